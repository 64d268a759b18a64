#!/bin/bash
# Plan for the next GPU session (prepared in session 26 without a GPU). Run on branch
# linear-importance (d5fb8f1 or later: the wgmma importance as q̄·k in two producer warps, the
# consumers doing none; main + that one commit).
# Twins, memcheck/racecheck on the importance, window attention against cuDNN (graph-timed, same
# run) at 1/2/16/32 slots on wgmma128 and wgmma64, iterations at 1/16/32 slots flash vs
# flash + verify (issue 13's targets: window <= 1.1x cuDNN, 1 slot <= 1.3x, verify <= 0.2x).
# Usage: bash .carry/run70.sh <tree> <label>   (~450 s)
set -u
# Ran on an NVIDIA H200 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h200-linear-importance/run70.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
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
