#!/bin/bash
# Session 19, call 3: <commit> only: iteration floor at 1/16/32 slots (A flash, B flash + verify, kept
# commits; 2 repeats) and the pass breakdown at 32 slots. Usage: bash .carry/run30.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-verify-loads/run30.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 300 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor.md
timeout 90 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots 32 --json $OUT/pass_breakdown_s32.json > $OUT/pass_breakdown_s32.md 2>&1
echo "pass breakdown rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/pass_breakdown_s32.md
echo "elapsed $(( $(date +%s) - t0 )) s"
