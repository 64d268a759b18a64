#!/bin/bash
# Session 19, call 5: <commit>: scripts/gpu_check.sh --tests-only, pass breakdown at 1 and 32 slots,
# iteration floor at 1/16/32 slots (A flash, B flash + verify, kept commits; 2 repeats).
# Usage: bash .carry/run32.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-verify-loads/run32.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OUT="/tmp/check" FLASHDLLM_GPU_CHECK_BUDGET=420 bash scripts/gpu_check.sh --tests-only > /tmp/gpu_check.stdout 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; cp /tmp/check/summary.md $OUT/gpu_check_summary.md; grep -E '^\| ' $OUT/gpu_check_summary.md
grep -E "FAILED|Failure" /tmp/check/*.log 2>/dev/null | head -20
grep -h "select_tokens \]" /tmp/check/*.log 2>/dev/null | head -3
timeout 45 $B/tests/test_cuda_select --gtest_color=no > /tmp/sel.txt 2>&1; echo "test_cuda_select (Small + Sweep) rc=$?"; grep -E "PASSED|FAILED|select_tokens \]" /tmp/sel.txt | head -4
for s in 1 32; do
  timeout 80 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots $s --json /tmp/pb_s$s.json > $OUT/pass_breakdown_s$s.md 2>&1
  echo "pass breakdown $s rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "pass ms|select|verify /" $OUT/pass_breakdown_s$s.md
done
timeout 260 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
