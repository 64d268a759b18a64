#!/bin/bash
# Session 22, call 4: main's final code (drafts uploaded before the verify pass). Build; test_cuda_verify;
# iteration floor A = flash, B = flash + verify (--verify-kept commits), slots 1 and 32, two runs each.
# Usage: bash .carry/run56.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-wgmma64/run56.sh
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 100 $B/tests/test_cuda_verify --gtest_color=no > /tmp/v.txt 2>&1; echo "test_cuda_verify rc=$?" | tee $OUT/tests.txt
grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/v.txt | head -4 | tee -a $OUT/tests.txt
timeout 300 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,32 --per-iter 4 --repeats 2 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_verify.md
