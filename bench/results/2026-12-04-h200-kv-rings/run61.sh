#!/bin/bash
# Session 23, call 4: two Q buffers in the wgmma attention (branch qbuf). Build; attention and importance
# twins with FLASHDLLM_WGMMA_QBUF=2 and =k2; window attention at 16 / 32 slots for modes 0 / k2 / 2,
# alternating, three rounds.
# Usage: bash .carry/run61.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-kv-rings/run61.sh
BUILD_BUDGET=250  # seconds for the build (default 200)
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
for m in 2 k2; do
  for t in test_cuda_attention test_cuda_importance; do
    FLASHDLLM_WGMMA_QBUF=$m timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1
    echo "QBUF=$m $t rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4
  done
done
for r in 1 2 3; do
  for m in 0 k2 2; do
    FLASHDLLM_WGMMA_QBUF=$m timeout 60 $B/bench/attention_bench --window-shapes 16:128:768,32:128:768 --variants wgmma128 \
      --iters 30 --json /tmp/w_${m}_$r.json > /tmp/w.md 2>&1; cat /tmp/w.md >> $OUT/window_rounds.md
    echo "round $r QBUF=$m rc=$?"; grep "^| wgmma128" /tmp/w.md | awk -F'|' '{print $3, $8, $9}' | tr '\n' ';'; echo
  done
done
echo "elapsed $(( $(date +%s) - t0 )) s"
