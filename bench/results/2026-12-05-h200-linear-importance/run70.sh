#!/bin/bash
# Plan for the next GPU session (prepared in session 26 without a GPU). Run on branch
# linear-importance (d5fb8f1 or later: the wgmma importance as q̄·k in two producer warps, the
# consumers doing none; main + that one commit).
# Twins, memcheck/racecheck on the importance, window attention against cuDNN (graph-timed, same
# run) at 1/2/16/32 slots on wgmma128 and wgmma64, iterations at 1/16/32 slots flash vs
# flash + verify (issue 13's targets: window <= 1.1x cuDNN, 1 slot <= 1.3x, verify <= 0.2x).
# Usage: bash .carry/run70.sh <tree> <label>   (~450 s)
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null && echo "restored data/gsm8k_train.jsonl from git"
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches $2"; else echo "tree $tree != $1: dirty"; fi
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
for t in test_cuda_importance test_cuda_attention test_cuda_forward test_cuda_verify; do
  timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1
  echo "$t rc=$?" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
done
for tool in racecheck memcheck; do
  FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 90 compute-sanitizer --tool $tool --error-exitcode 86 \
    $B/tests/test_cuda_importance --gtest_color=no --gtest_filter='*Small*' > /tmp/san.txt 2>&1
  echo "$tool importance Small rc=$?" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san.txt | tee -a $OUT/tests.txt
done
echo "tests $(( $(date +%s) - t0 )) s"
timeout 150 python3 bench/window_attention.py --bench $B/bench/attention_bench \
  --shapes 1:128:768,2:128:768,16:128:768,32:128:768 --variants wgmma128,wgmma64 \
  --json $OUT/window_attention.json > $OUT/window_attention.md 2>&1
echo "window_attention rc=$?"; sed -n '/^## Flash-Cache/,$p' $OUT/window_attention.md | head -14
rm -f $OUT/window_attention.ours_tiles*.json
echo "window $(( $(date +%s) - t0 )) s"
timeout 280 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; tail -12 $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
