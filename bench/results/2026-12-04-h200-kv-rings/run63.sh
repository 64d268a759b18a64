#!/bin/bash
# Session 23, call 6: 626bed3 (compiler fences, comments). Build; ptxas; attention / importance / forward
# twins; racecheck on the fused importance test.
# Usage: bash .carry/run63.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-kv-rings/run63.sh
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
for t in test_cuda_attention test_cuda_importance test_cuda_forward; do
  timeout 60 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; echo "$t rc=$?" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
done
FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 60 compute-sanitizer --tool racecheck --error-exitcode 86 \
  $B/tests/test_cuda_importance --gtest_color=no --gtest_filter='*FusedWithAttentionMatchesCpu/Small' > /tmp/san.txt 2>&1
echo "racecheck fused importance rc=$?" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san.txt | tee -a $OUT/tests.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
