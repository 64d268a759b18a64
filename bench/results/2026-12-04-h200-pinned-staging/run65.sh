#!/bin/bash
# Session 24, call 2: pinned host staging (80c5baf; A/B by FLASHDLLM_PINNED_STAGING in one binary) and
# window attention against cuDNN on both K/V layouts, graph-timed (7ba9fc0's window_attention.py).
# Usage: bash .carry/run65.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-pinned-staging/run65.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 120 $B/tests/test_cuda_ops --gtest_color=no > /tmp/ops.txt 2>&1; echo "test_cuda_ops rc=$?" | tee -a $OUT/tests.txt
grep -E "^\[  (PASSED|FAILED) |Failure|Uploads" /tmp/ops.txt | head -8 | tee -a $OUT/tests.txt
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 86 $B/tests/test_cuda_ops --gtest_color=no \
  --gtest_filter='*Uploads*:*MemoryRoundTrip*' > /tmp/san.txt 2>&1
echo "memcheck uploads rc=$?" | tee -a $OUT/tests.txt; grep -E "PASSED|ERROR SUMMARY" /tmp/san.txt | tee -a $OUT/tests.txt
timeout 100 $B/tests/test_cuda_forward --gtest_color=no > /tmp/fw.txt 2>&1; echo "test_cuda_forward rc=$?" | tee -a $OUT/tests.txt
grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/fw.txt | head -4 | tee -a $OUT/tests.txt
echo "tests $(( $(date +%s) - t0 )) s"
timeout 150 python3 bench/window_attention.py --bench $B/bench/attention_bench --shapes 1:128:768,2:128:768,16:128:768,32:128:768 \
  --variants wgmma128,wgmma64 --json $OUT/window_attention.json > $OUT/window_attention.md 2>&1
echo "window_attention rc=$?"; sed -n '/^## Flash-Cache/,$p' $OUT/window_attention.md | head -14
rm -f $OUT/window_attention.ours_tiles*.json
echo "window $(( $(date +%s) - t0 )) s"
timeout 280 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_PINNED_STAGING=0 --b-bin $B/flashdllm \
  --slots 1,32 --per-iter 4 --repeats 2 --json $OUT/floor_flash.json > $OUT/floor_flash.md 2>&1
echo "floor flash rc=$?"; tail -6 $OUT/floor_flash.md
echo "flash $(( $(date +%s) - t0 )) s"
timeout 280 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_PINNED_STAGING=0 --b-bin $B/flashdllm \
  --a-args="--verify --verify-kept commits" --b-args="--verify --verify-kept commits" \
  --slots 1,32 --per-iter 4 --repeats 2 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$?"; tail -6 $OUT/floor_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
