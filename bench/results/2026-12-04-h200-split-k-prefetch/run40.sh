#!/bin/bash
# Session 20, call 5: <commit>: which racecheck set failed in run39: racecheck on every GPU test's sanitizer set,
# printing each one's summary, and test_cuda_gemm's hazards. Usage: bash .carry/run40.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null); git reset -q 2>/dev/null
[[ "$tree" == "$1" ]] && echo "tree matches commit $2" || echo "tree $tree != $1: dirty"
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
for spec in "test_cuda_gemm:CudaGemm.*" "test_cuda_gemm:CudaGemm.*:-*SplitK*" "test_cuda_attention:CudaAttention.Small*" \
  "test_cuda_forward:CudaForward.Golden*" "test_cuda_importance:*/Small:-*Cudnn*" "test_cuda_verify:*/Small:CudaVerifyLaunch.*" \
  "test_cuda_ops:Small*" "test_cuda_select:Small*" "test_cuda_fill:Small*"; do
  t=${spec%%:*}; f=${spec#*:}
  FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 100 compute-sanitizer --tool racecheck --error-exitcode 86 \
    --print-limit 10 --report-api-errors no $B/tests/$t --gtest_color=no --gtest_filter="$f" > /tmp/rc.txt 2>&1
  echo "racecheck $t $f rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|SUMMARY|Failure" /tmp/rc.txt | head -4
  [[ $t == test_cuda_gemm ]] && grep -E "Error|Race|hazard|kernel|cublas|Timeout|error" /tmp/rc.txt | head -12
done
echo "elapsed $(( $(date +%s) - t0 )) s"
