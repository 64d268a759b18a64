#!/bin/bash
# Session 20, call 6: <commit> (final HEAD, split-K and prefetch reverted): scripts/gpu_check.sh --tests-only.
# Usage: bash .carry/run41.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-split-k-prefetch/run41.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OUT="/tmp/check" FLASHDLLM_GPU_CHECK_BUDGET=420 bash scripts/gpu_check.sh --tests-only > /tmp/gpu_check.stdout 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; cp /tmp/check/summary.md $OUT/gpu_check_summary.md; grep -E '^\| ' $OUT/gpu_check_summary.md
grep -E "FAILED|Failure" /tmp/check/*.log 2>/dev/null | head -20
