#!/bin/bash
# Session 23, call 6: 626bed3 (compiler fences, comments). Build; ptxas; attention / importance / forward
# twins; racecheck on the fused importance test.
# Usage: bash .carry/run63.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null && echo "restored data/gsm8k_train.jsonl from git"
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
(OUT=/tmp/chk FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
for t in test_cuda_attention test_cuda_importance test_cuda_forward; do
  timeout 60 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; echo "$t rc=$?" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
done
FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 60 compute-sanitizer --tool racecheck --error-exitcode 86 \
  $B/tests/test_cuda_importance --gtest_color=no --gtest_filter='*FusedWithAttentionMatchesCpu/Small' > /tmp/san.txt 2>&1
echo "racecheck fused importance rc=$?" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san.txt | tee -a $OUT/tests.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
