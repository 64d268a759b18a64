#!/bin/bash
# Issue 50's GPU acceptance, call 1: a same-machine A/B of the Flash-Cache iteration at the LLaDA-8B
# shape (dummy weights, 250-token prompts, gen 512) at 1/16/32 slots, before (6ce2943, the last commit
# before the refactor) against after (<commit>), both built in this call; then, as time allows, the
# GPU tests of the refactored tree.
# Usage: LIMIT=<s> bash run.sh <tree> <label>
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
git worktree add -f /tmp/before 6ce2943 > /dev/null 2>&1 && cp -r .deps .carry /tmp/before/
(cd /tmp/before && FLASHDLLM_COMMIT=6ce2943 FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only \
  > /tmp/beforebuild.log 2>&1) || { tail -20 /tmp/beforebuild.log; exit 1; }
echo "before built at $(( $(date +%s) - t0 )) s"
timeout $(( $(left) - 10 )) python3 bench/iteration_floor.py --a-bin /tmp/before/build-gpu/flashdllm --b-bin $B/flashdllm \
  --slots 1,16,32 --repeats 3 --json $OUT/ab_floor.json > $OUT/ab_floor.md 2>&1
echo "ab floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\| |^measured" $OUT/ab_floor.md
