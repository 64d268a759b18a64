#!/bin/bash
# main with the item-fastest unit order + EVICT_NORMAL (session 26): gpu_check --tests-only (twins,
# sanitizers, batch invariance), window attention against cuDNN twice, iterations flash / + verify.
# Usage: bash .carry/run72.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h200-unit-order/run72.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=380 bash scripts/gpu_check.sh --tests-only > /tmp/gc.log 2>&1
echo "gpu_check rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^\| " $OUT/summary.md | head -30
for r in 1 2; do
  shapes=1:128:768,2:128:768,16:128:768,32:128:768; [[ $r == 2 ]] && shapes=16:128:768,32:128:768
  timeout 150 python3 bench/window_attention.py --bench $B/bench/attention_bench --shapes $shapes \
    --variants wgmma128,wgmma64 --json $OUT/window_attention_$r.json > $OUT/window_attention_$r.md 2>&1
  echo "window_attention $r rc=$?"; sed -n '/^| S | Q/,$p' $OUT/window_attention_$r.md | head -7
  rm -f $OUT/window_attention_$r.ours_tiles*.json
done
echo "window $(( $(date +%s) - t0 )) s"
timeout 250 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
