#!/bin/bash
# Session 19, call 7: <commit>: build, the select / ops / forward twin tests, memcheck + racecheck on
# the select and ops Small sets, batch invariance. Usage: bash .carry/run34.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-verify-loads/run34.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
: > $OUT/tests.txt
for t in test_cuda_select test_cuda_ops test_cuda_verify test_cuda_forward; do
  timeout 60 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED) |Failure|select_tokens \]" /tmp/$t.txt | head -6 | tee -a $OUT/tests.txt
done
for tool in memcheck racecheck; do
  FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 60 compute-sanitizer --tool $tool --error-exitcode 86 \
    --print-limit 10 $B/tests/test_cuda_select --gtest_color=no --gtest_filter='Small*' > /tmp/san.txt 2>&1
  echo "$tool test_cuda_select Small rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san.txt | head -2 | tee -a $OUT/tests.txt
done
timeout 40 $B/bench/batch_invariance -m models/llada-arith-12m --device cuda --prompts 64 --slots 32 > /tmp/bi.txt 2>&1
echo "batch_invariance rc=$?" | tee -a $OUT/tests.txt; grep -E "identical" /tmp/bi.txt | tee -a $OUT/tests.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
