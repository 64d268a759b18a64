#!/bin/bash
# Session 22, call 2: wgmma64. Build; attention/importance/forward/verify/ops twins + golden/parity;
# sanitizers on the attention Small set; window attention wgmma128 vs wgmma64 (1, 2, 16 slots);
# iteration floor A = FLASHDLLM_ATTENTION=wgmma128 (the former default for 128-row windows) vs
# B = default, slots 1/2/16/32; then flash+verify at 32 slots, 44d45e0 (before gather_columns) vs this.
# Usage: bash .carry/run54.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-wgmma64/run54.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
mkdir -p .deps /tmp/old
(FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
# The old tree (44d45e0) beside it, built in the background while the tests run.
git archive 44d45e0 | tar -x -C /tmp/old && cp -r .deps .carry /tmp/old/
(cd /tmp/old && FLASHDLLM_COMMIT=44d45e0 FLASHDLLM_GPU_CHECK_BUDGET=300 bash scripts/gpu_check.sh --build-only > /tmp/oldbuild.log 2>&1; echo "old build rc=$?" >> /tmp/oldbuild.log) &
: > $OUT/tests.txt
for t in test_cuda_attention test_cuda_importance test_cuda_forward test_cuda_verify test_cuda_ops; do
  timeout 150 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure|note\]" /tmp/$t.txt | head -8 | tee -a $OUT/tests.txt
done
for t in test_forward_golden test_flash_cache_golden test_small_model_parity test_flash_verify; do
  timeout 150 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -6 | tee -a $OUT/tests.txt
done
for tool in memcheck racecheck; do
  FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 150 compute-sanitizer --tool $tool --error-exitcode 86 \
    --print-limit 10 $B/tests/test_cuda_attention --gtest_color=no --gtest_filter='CudaAttention.Small*' > /tmp/san.txt 2>&1
  echo "$tool test_cuda_attention Small rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "PASSED|SUMMARY" /tmp/san.txt | head -2 | tee -a $OUT/tests.txt
done
timeout 60 $B/bench/attention_bench --window-shapes 1:128:768,2:128:768,16:128:768 --variants wgmma128,wgmma64 --iters 30 \
  --json $OUT/window_bench.json > $OUT/window_bench.md 2>&1
echo "window bench rc=$?"; cat $OUT/window_bench.md | grep "^|"
wait; tail -2 /tmp/oldbuild.log  # no build beside the timed runs
timeout 330 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_ATTENTION=wgmma128 --b-bin $B/flashdllm \
  --slots 1,2,16,32 --per-iter 4 --repeats 2 --json $OUT/floor_wgmma64.json > $OUT/floor_wgmma64.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_wgmma64.md
if [[ -x /tmp/old/$B/flashdllm ]]; then
  timeout 200 python3 bench/iteration_floor.py --a-bin /tmp/old/$B/flashdllm --a-args="--verify --verify-kept commits" \
    --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
    --slots 1,32 --per-iter 4 --repeats 2 --json $OUT/floor_verify_ab.json > $OUT/floor_verify_ab.md 2>&1
  echo "floor verify rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_verify_ab.md
fi
echo "elapsed $(( $(date +%s) - t0 )) s"
