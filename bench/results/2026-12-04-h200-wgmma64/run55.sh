#!/bin/bash
# Session 22, call 3: scripts/gpu_check.sh --tests-only on main with wgmma64 as the small-call default
# (every GPU twin test, sanitizers, batch invariance), then window attention vs PyTorch SDPA at 1/2/16/32 slots.
# Usage: bash .carry/run55.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-wgmma64/run55.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OUT_ROOT=$OUT
OUT=$OUT_ROOT FLASHDLLM_GPU_CHECK_BUDGET=400 timeout 420 bash scripts/gpu_check.sh --tests-only > /tmp/check.log 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; tail -40 $OUT_ROOT/summary.md 2>/dev/null
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
timeout 90 python3 bench/window_attention.py --bench build-gpu/bench/attention_bench \
  --shapes 1:128:768,2:128:768,16:128:768,32:128:768 --variants wgmma128,wgmma64 --json $OUT_ROOT/window_attention.json \
  > $OUT_ROOT/window_attention.md 2>&1
echo "window rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT_ROOT/window_attention.md | tail -25
