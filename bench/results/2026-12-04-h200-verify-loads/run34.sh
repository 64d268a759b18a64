#!/bin/bash
# Session 19, call 7: <commit>: build, the select / ops / forward twin tests, memcheck + racecheck on
# the select and ops Small sets, batch invariance. Usage: bash .carry/run34.sh <tree> <commit>
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
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
: > $OUT/tests.txt
for t in test_cuda_select test_cuda_ops test_cuda_verify test_cuda_forward; do
  timeout 60 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED) |Failure|select_tokens \]" /tmp/$t.txt | head -6 | tee -a $OUT/tests.txt
done
for tool in memcheck racecheck; do
  FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 60 compute-sanitizer --tool $tool --error-exitcode 86 \
    --print-limit 10 $B/tests/test_cuda_select --gtest_color=no --gtest_filter='Small*' > /tmp/san.txt 2>&1
  echo "$tool test_cuda_select Small rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san.txt | head -2 | tee -a $OUT/tests.txt
done
timeout 40 $B/bench/batch_invariance -m models/llada-arith-12m --device cuda --prompts 64 --slots 32 > /tmp/bi.txt 2>&1
echo "batch_invariance rc=$?" | tee -a $OUT/tests.txt; grep -E "identical" /tmp/bi.txt | tee -a $OUT/tests.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
