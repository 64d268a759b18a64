#!/bin/bash
# Session 24, call 4: O staged through the warp buffer (fac8f26): gpu_check --tests-only, window attention vs cuDNN, iterations.
# Usage: bash .carry/run67.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-o-store/run67.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
mkdir -p $OUT/checks
(OUT=$OUT/checks timeout 240 bash scripts/gpu_check.sh --tests-only > /tmp/check.log 2>&1); echo "gpu_check rc=$?"
cp $OUT/checks/summary.md $OUT/gpu_check_summary.md 2>/dev/null; rm -rf $OUT/checks
grep -E "^\| (test_|batch|memcheck|racecheck|cuda_)" $OUT/gpu_check_summary.md | awk -F'|' '{print $2,$3,$4}'
echo "checks $(( $(date +%s) - t0 )) s"
timeout 130 python3 bench/window_attention.py --bench $B/bench/attention_bench --shapes 1:128:768,16:128:768,32:128:768 \
  --variants wgmma128,wgmma64 --json $OUT/window_attention.json > $OUT/window_attention.md 2>&1
echo "window_attention rc=$?"; sed -n '/^## Flash-Cache/,$p' $OUT/window_attention.md | head -10
rm -f $OUT/window_attention.ours_tiles*.json
echo "window $(( $(date +%s) - t0 )) s"
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,32 --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; tail -5 $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
