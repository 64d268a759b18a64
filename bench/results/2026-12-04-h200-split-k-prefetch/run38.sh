#!/bin/bash
# Session 20, call 3 (exploratory, branch exp-lines): <commit>: per-line LSU L2 prefetch; build, prefetch + forward
# L2 tests, iteration floor at 1/4 slots: A 32 MiB / B off, A 8 MiB / B 64 MiB. Usage: bash .carry/run38.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-split-k-prefetch/run38.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 60 $B/tests/test_cuda_prefetch --gtest_color=no 2>&1 | grep -E "^\[  (PASSED|FAILED)"
timeout 60 $B/tests/test_cuda_forward --gtest_color=no --gtest_filter='*L2*:*Recorded*' 2>&1 | grep -E "^\[  (PASSED|FAILED)"
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_L2_PREFETCH_MB=0 \
  --slots 1,4 --per-iter 4 --repeats 2 --sdpa-timing graph --json $OUT/floor_on_off.json > $OUT/floor_on_off.md 2>&1
echo "floor on/off rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_on_off.md
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_L2_PREFETCH_MB=8 --b-env FLASHDLLM_L2_PREFETCH_MB=64 \
  --slots 1,4 --per-iter 4 --repeats 2 --sdpa-timing graph --json $OUT/floor_8_64.json > $OUT/floor_8_64.md 2>&1
echo "floor 8/64 rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_8_64.md
echo "elapsed $(( $(date +%s) - t0 )) s"
