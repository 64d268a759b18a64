#!/bin/bash
# Verify attention launch configurations (issue 13): build, test_cuda_verify (+ sanitizers on the
# launch test), attention_bench --verify-shapes, the 32-slot verify pass. Usage: bash .carry/run17.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null && echo "restored data/gsm8k_train.jsonl from git"
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt
t0=$(date +%s)
FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 90 $B/tests/test_cuda_verify > $OUT/test_cuda_verify.txt 2>&1; echo "test_cuda_verify rc=$?"; grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|differ" $OUT/test_cuda_verify.txt | head -30
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  FLASHDLLM_CUDA_SYNC=1 timeout 150 $SAN --tool $tool --error-exitcode 86 --print-limit 10 --report-api-errors no \
    $B/tests/test_cuda_verify --gtest_filter='CudaVerifyLaunch.*' > $OUT/san_$tool.txt 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/san_$tool.txt | head -4
done
echo "tests done $(( $(date +%s) - t0 )) s"
timeout 120 $B/bench/attention_bench --verify-shapes ${VSHAPES:-32:20:750,32:32:738,16:20:750,64:20:750,128:20:750} \
  --verify-stages 2,3 --verify-orders item,head --iters 20 --json $OUT/verify_bench.json > $OUT/verify_bench.md 2>&1
echo "verify bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/verify_bench.md
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-32} --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
