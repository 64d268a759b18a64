#!/bin/bash
# Session 22, call 5: scripts/gpu_check.sh --tests-only on main's final commit of the session.
# Usage: bash .carry/run57.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-wgmma64/run57.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=330 timeout 340 bash scripts/gpu_check.sh --tests-only > /tmp/check.log 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\| " $OUT/summary.md | head -30
