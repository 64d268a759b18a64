#!/bin/bash
# l2load: the L2 prefetch experiment's variants at one slot, each against prefetch off in the same floor call.
# Usage: bash .carry/run48.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-cutlass-gemms-l2-loads/run48.sh
BUILD_BUDGET=300  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 100 $B/tests/test_cuda_prefetch --gtest_color=no > /tmp/p.txt 2>&1; echo "test_cuda_prefetch rc=$?"; grep -E "^\[  (PASSED|FAILED)" /tmp/p.txt
for m in hint load loadlast; do
  FLASHDLLM_L2_PREFETCH_MODE=$m FLASHDLLM_L2_PREFETCH_JOIN=1 timeout 150 $B/tests/test_cuda_forward --gtest_color=no \
    --gtest_filter='*refetch*' > /tmp/f.txt 2>&1; echo "test_cuda_forward prefetch tests ($m, join) rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure" /tmp/f.txt | head -4
done
echo "at $(( $(date +%s) - t0 )) s"
run() {  # name, B env...
  local name=$1; shift
  local benv=(); for e in "$@"; do benv+=(--b-env "$e"); done
  timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_L2_PREFETCH_MB=0 "${benv[@]}" \
    --slots 1 --per-iter 4 --repeats 2 --json $OUT/floor_$name.json > $OUT/floor_$name.md 2>&1
  echo "$name ($*): rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\| 1 " $OUT/floor_$name.md
}
run attn_hint FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=hint FLASHDLLM_L2_PREFETCH_JOIN=1
run attn_load FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1
run attn_loadlast FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=loadlast FLASHDLLM_L2_PREFETCH_JOIN=1
run attn_load_nojoin FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load
run attn_load_132 FLASHDLLM_L2_PREFETCH_MB=40 FLASHDLLM_L2_PREFETCH_MAX_WEIGHT_MB=40 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1 FLASHDLLM_L2_PREFETCH_BLOCKS=132
run all16_load FLASHDLLM_L2_PREFETCH_MB=16 FLASHDLLM_L2_PREFETCH_MODE=load FLASHDLLM_L2_PREFETCH_JOIN=1
echo "elapsed $(( $(date +%s) - t0 )) s"
