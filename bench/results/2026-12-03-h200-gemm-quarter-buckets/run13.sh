#!/bin/bash
# GPU check of the default (tests, batch invariance, sanitizers), then the iteration floors at 1/16/32
# slots with Flash-Verify (commits). Usage (repo root): bash .carry/run13.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-gemm-quarter-buckets/run13.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OUT="$OUT/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-300} bash scripts/gpu_check.sh --tests-only > "$OUT/gpu_check.stdout" 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; grep -E '^\| ' "$OUT/check/summary.md"
FLASHDLLM_GEMM_BUCKETS=pow2 timeout 60 $B/bench/batch_invariance --device cuda --json $OUT/batch_invariance_pow2.json > $OUT/bi_pow2.txt 2>&1
echo "batch_invariance pow2 rc=$?"; grep -i "identical" $OUT/bi_pow2.txt
timeout 240 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-1,16,32} --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor.md
