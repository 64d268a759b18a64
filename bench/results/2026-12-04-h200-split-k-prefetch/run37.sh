#!/bin/bash
# Session 20, call 2: <commit>: build, prefetch / gemm / forward / ops tests, memcheck + racecheck on the
# prefetch test and the forward L2 test, iteration floor A (prefetch default 32 MiB) / B (off) at 1/4/16
# slots, A (16 MiB) / B (64 MiB) at 1/4 slots; --sdpa-timing graph. Usage: bash .carry/run37.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-split-k-prefetch/run37.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
: > $OUT/tests.txt
for t in test_cuda_prefetch test_cuda_gemm test_cuda_forward test_cuda_ops; do
  timeout 120 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|split-K picks|Expected|served by" /tmp/$t.txt | head -10 | tee -a $OUT/tests.txt
done
for tool in memcheck racecheck; do
  for spec in "test_cuda_prefetch:*" "test_cuda_forward:*L2Prefetch*"; do
    t=${spec%%:*}; f=${spec#*:}
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 86 --print-limit 10 $B/tests/$t --gtest_color=no \
      --gtest_filter="$f" > /tmp/san.txt 2>&1
    echo "$tool $t rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "PASSED|FAILED|SUMMARY" /tmp/san.txt | head -3 | tee -a $OUT/tests.txt
  done
done
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_L2_PREFETCH_MB=0 \
  --slots 1,4,16 --per-iter 4 --repeats 2 --sdpa-timing graph --json $OUT/floor_on_off.json > $OUT/floor_on_off.md 2>&1
echo "floor on/off rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_on_off.md
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_L2_PREFETCH_MB=16 --b-env FLASHDLLM_L2_PREFETCH_MB=64 \
  --slots 1,4 --per-iter 4 --repeats 2 --sdpa-timing graph --json $OUT/floor_16_64.json > $OUT/floor_16_64.md 2>&1
echo "floor 16/64 rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_16_64.md
echo "elapsed $(( $(date +%s) - t0 )) s"
