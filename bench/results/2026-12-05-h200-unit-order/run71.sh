#!/bin/bash
# Plan for the next GPU session (prepared in session 25 without a GPU). Run on branch
# exp-order-evict (533219d or later, rebased on main; EXP=0 is main's kernel):
#   FLASHDLLM_WGMMA_EXP bits: 1 item-fastest unit order, 4 EVICT_NORMAL loads, 8 linear importance
#   (two producer warps take q̄·k from shared memory; the consumers do no importance work).
# Twins and racecheck with the flags, window attention rounds EXP 0/5/8/13 and against cuDNN
# (graph-timed), iterations at 16/32 slots EXP 0 vs 13.
# Usage: bash .carry/run69.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h200-unit-order/run71.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
# EXP=0: main's host-side verify plan (the verify twins); 8 and 13: the kernels with the flags.
for ft in 5:test_cuda_importance 5:test_cuda_attention; do
  f=${ft%%:*}; t=${ft#*:}
  FLASHDLLM_WGMMA_EXP=$f timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1
  echo "EXP=$f $t rc=$?" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
done
true \
  || true
true
echo "tests $(( $(date +%s) - t0 )) s"
for r in 1 2; do
  for f in 0 1 4 5; do
    FLASHDLLM_WGMMA_EXP=$f timeout 60 $B/bench/attention_bench --window-shapes 16:128:768,32:128:768 --variants wgmma128 \
      --iters 30 > /tmp/w.md 2>&1; echo "## round $r EXP=$f" >> $OUT/window_rounds.md; cat /tmp/w.md >> $OUT/window_rounds.md
    echo -n "round $r EXP=$f: "; grep "^| wgmma128" /tmp/w.md | awk -F'|' '{print $3, $8, $9}' | tr '\n' ';'; echo
  done
done 2>&1 | tee $OUT/window_summary.txt
echo "rounds $(( $(date +%s) - t0 )) s"
FLASHDLLM_WGMMA_EXP=5 timeout 100 python3 bench/window_attention.py --bench $B/bench/attention_bench \
  --shapes 16:128:768,32:128:768 --variants wgmma128 --json $OUT/window_attention_exp5.json > $OUT/window_attention_exp5.md 2>&1
echo "window_attention EXP=13 rc=$?"; sed -n '/^## Flash-Cache/,$p' $OUT/window_attention_exp5.md | head -8
rm -f $OUT/window_attention_exp5.ours_tiles*.json
echo "window $(( $(date +%s) - t0 )) s"
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_WGMMA_EXP=0 --b-bin $B/flashdllm \
  --b-env FLASHDLLM_WGMMA_EXP=5 --slots 16,32 --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; tail -6 $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
