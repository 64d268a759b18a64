#!/bin/bash
# Session 24, call 5: O staging buffer of its own (904f9b0): twins, sanitizers, window attention vs cuDNN, iterations.
# Usage: bash .carry/run68.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-o-store/run68.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
for t in test_cuda_attention test_cuda_importance test_cuda_forward; do
  timeout 60 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; echo "$t rc=$?" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
done
FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 90 compute-sanitizer --tool racecheck --error-exitcode 86 \
  $B/tests/test_cuda_attention --gtest_color=no --gtest_filter='*Small*' > /tmp/san2.txt 2>&1
echo "racecheck attention Small rc=$?" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san2.txt | tee -a $OUT/tests.txt
echo "tests $(( $(date +%s) - t0 )) s"
timeout 100 python3 bench/window_attention.py --bench $B/bench/attention_bench --shapes 16:128:768,32:128:768 \
  --variants wgmma128 --json $OUT/window_attention.json > $OUT/window_attention.md 2>&1
echo "window_attention rc=$?"; sed -n '/^## Flash-Cache/,$p' $OUT/window_attention.md | head -10
rm -f $OUT/window_attention.ours_tiles*.json
echo "window $(( $(date +%s) - t0 )) s"
timeout 80 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,32 --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; tail -6 $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
