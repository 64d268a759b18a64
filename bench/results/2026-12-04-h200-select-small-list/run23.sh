#!/bin/bash
# Session 18: gpu_check --tests-only on HEAD, the per-pass kernel breakdown (bench/pass_breakdown.py)
# of flash + verify at 32 slots, the 32-slot floor with and without verify. Usage: bash .carry/run23.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-select-small-list/run23.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
if [[ "${SKIP_CHECK:-0}" == 1 ]]; then
  FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
  echo "built $(( $(date +%s) - t0 )) s"
else
  OUT="/tmp/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-300} bash scripts/gpu_check.sh --tests-only > /tmp/gpu_check.stdout 2>&1
  echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; cp /tmp/check/summary.md $OUT/gpu_check_summary.md; grep -E '^\| ' $OUT/gpu_check_summary.md
fi
timeout 150 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots 32 --json $OUT/pass_breakdown.json \
  > $OUT/pass_breakdown.md 2>&1
echo "pass breakdown rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/pass_breakdown.md
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-32} --per-iter 4 --repeats ${REPEATS:-2} --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
