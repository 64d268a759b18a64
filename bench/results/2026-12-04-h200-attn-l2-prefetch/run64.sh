#!/bin/bash
# Session 24, call 1: L2 prefetch distance in the wgmma attention's producer (FLASHDLLM_WGMMA_PREFETCH),
# graph-timed cuDNN at the same shapes, and the verify attention's time against its tile count (waves).
# Usage: bash .carry/run64.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-attn-l2-prefetch/run64.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
for t in test_cuda_attention test_cuda_importance; do
  FLASHDLLM_WGMMA_PREFETCH=3 timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1
  echo "PREFETCH=3 $t rc=$?" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
done
for r in 1 2 3; do
  for d in 0 1 2 3 4 6 8; do
    FLASHDLLM_WGMMA_PREFETCH=$d timeout 60 $B/bench/attention_bench --window-shapes 16:128:768,32:128:768 --variants wgmma128 \
      --iters 30 > /tmp/w.md 2>&1; echo "## round $r PREFETCH=$d" >> $OUT/window_rounds.md; cat /tmp/w.md >> $OUT/window_rounds.md
    echo -n "round $r PREFETCH=$d: "; grep "^| wgmma128" /tmp/w.md | awk -F'|' '{print $3, $8, $9}' | tr '\n' ';'; echo
  done
done 2>&1 | tee $OUT/window_summary.txt
for d in 0 3; do
  FLASHDLLM_WGMMA_PREFETCH=$d timeout 60 $B/bench/attention_bench --window-shapes 1:128:768,2:128:768,4:128:768 --variants wgmma64,wgmma128 \
    --iters 30 > /tmp/w.md 2>&1; echo "## small PREFETCH=$d" >> $OUT/window_small.md; cat /tmp/w.md >> $OUT/window_small.md
done
grep "^| wgmma" $OUT/window_small.md | awk -F'|' '{print $2,$3,$8,$9}'
python3 -c "
import sys; sys.path.insert(0, 'bench'); import iteration_floor as f
p, g, s, h = f.measure_device([(1,128,768),(16,128,768),(32,128,768)], 32, 128, 3, 10)
print('cudnn graph-timed us:', {k: round(v*1e3, 1) for k, v in s.items()}, h)" 2>&1 | tail -2 | tee $OUT/cudnn_graph.txt
timeout 120 $B/bench/attention_bench --verify-shapes 8:20:750,12:20:750,16:20:750,20:20:750,24:20:750,28:20:750,32:20:750,36:20:750,40:20:750,48:20:750 \
  --verify-ctas 2x2,2x3 --iters 20 > $OUT/verify_waves.md 2>&1
grep "^|" $OUT/verify_waves.md | head -30
echo "elapsed $(( $(date +%s) - t0 )) s"
