#!/bin/bash
# Session 24, call 3: wgmma attention experiment flags (unit order, no store, evict hint)
# window attention against cuDNN on both K/V layouts, graph-timed (7ba9fc0's window_attention.py).
# Usage: bash .carry/run66.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-o-store/run66.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
for f in 0 1 5; do
  for t in test_cuda_attention test_cuda_importance; do
    FLASHDLLM_WGMMA_EXP=$f timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1
    echo "EXP=$f $t rc=$?" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
  done
done
for r in 1 2 3; do
  for f in 0 1 2 4 5; do
    FLASHDLLM_WGMMA_EXP=$f timeout 60 $B/bench/attention_bench --window-shapes 16:128:768,32:128:768 --variants wgmma128 \
      --iters 30 > /tmp/w.md 2>&1; echo "## round $r EXP=$f" >> $OUT/window_rounds.md; cat /tmp/w.md >> $OUT/window_rounds.md
    echo -n "round $r EXP=$f: "; grep "^| wgmma128" /tmp/w.md | awk -F'|' '{print $3, $8, $9}' | tr '\n' ';'; echo
  done
done 2>&1 | tee $OUT/window_summary.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
