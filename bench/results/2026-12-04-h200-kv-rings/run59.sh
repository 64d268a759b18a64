#!/bin/bash
# Session 23, call 1: K/V rings + the importance warp in the wgmma attention. Build this tree and
# 8b8b8f8 beside it; attention/importance/forward/verify twins; memcheck + racecheck on the attention
# and importance Small sets; window attention old vs new (attention_bench, 1/2/16/32 slots);
# window_attention.py (cuDNN) on the new; iteration floor A = 8b8b8f8, B = this tree, 1/16/32 slots.
# Usage: bash .carry/run59.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-kv-rings/run59.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OLD=${OLD:-8b8b8f8}
mkdir -p .deps /tmp/old
git archive $OLD | tar -x -C /tmp/old && cp -r .deps .carry /tmp/old/
(cd /tmp/old && FLASHDLLM_COMMIT=$OLD FLASHDLLM_GPU_CHECK_BUDGET=300 bash scripts/gpu_check.sh --build-only > /tmp/oldbuild.log 2>&1; echo "old build rc=$?" >> /tmp/oldbuild.log) &
(FLASHDLLM_GPU_CHECK_BUDGET=250 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/build.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
: > $OUT/tests.txt
for t in test_cuda_attention test_cuda_importance test_cuda_forward test_cuda_verify; do
  timeout 150 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure|note\]" /tmp/$t.txt | head -8 | tee -a $OUT/tests.txt
done
for tool in memcheck racecheck; do
  for t in test_cuda_attention:CudaAttention.Small* test_cuda_importance:*Small*; do
    FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 150 compute-sanitizer --tool $tool --error-exitcode 86 \
      --print-limit 10 $B/tests/${t%%:*} --gtest_color=no --gtest_filter="${t#*:}" > /tmp/san.txt 2>&1
    echo "$tool $t rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
    grep -E "PASSED|SUMMARY|tests? ran" /tmp/san.txt | head -3 | tee -a $OUT/tests.txt
  done
done
wait; tail -2 /tmp/oldbuild.log  # no build beside the timed runs
S=1:128:768,2:128:768,16:128:768,32:128:768
for side in old new; do
  bin=$B/bench/attention_bench; [[ $side == old ]] && bin=/tmp/old/$B/bench/attention_bench
  timeout 90 $bin --window-shapes $S --variants wgmma128,wgmma64 --iters 30 --json $OUT/window_$side.json > $OUT/window_$side.md 2>&1
  echo "window bench $side rc=$?"; grep "^|" $OUT/window_$side.md
done
timeout 120 python3 bench/window_attention.py --bench $B/bench/attention_bench --shapes $S --variants wgmma128,wgmma64 \
  --json $OUT/window_attention.json > $OUT/window_attention.md 2>&1
echo "window_attention rc=$?"; grep "^|" $OUT/window_attention.md
timeout 300 python3 bench/iteration_floor.py --a-bin /tmp/old/$B/flashdllm --b-bin $B/flashdllm \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor_ab.json > $OUT/floor_ab.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_ab.md
echo "elapsed $(( $(date +%s) - t0 )) s"
