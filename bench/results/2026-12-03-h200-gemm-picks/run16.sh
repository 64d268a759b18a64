#!/bin/bash
# GemmLt picks on the device after the review fixes: build, test_cuda_gemm, the Gemm tests, the
# built-in table applying. Usage (repo root): bash .carry/run16.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-gemm-picks/run16.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu --target test_gemm_picks > /dev/null 2>&1
echo "built $(( $(date +%s) - t0 )) s"
timeout 40 $B/tests/test_cuda_gemm > $OUT/test_cuda_gemm.txt 2>&1; echo "test_cuda_gemm rc=$?"; grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|actual" $OUT/test_cuda_gemm.txt | head -30
timeout 40 $B/tests/test_cuda_ops --gtest_filter='Gemm*:*Matmul*' > $OUT/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc=$?"; grep -E "PASSED|FAILED" $OUT/test_cuda_ops.txt
timeout 20 $B/tests/test_gemm_picks > $OUT/test_gemm_picks.txt 2>&1; echo "test_gemm_picks rc=$?"; grep -E "PASSED|FAILED" $OUT/test_gemm_picks.txt
timeout 30 $B/flashdllm generate -v --device cuda -m tests/data/golden/g1 --prompt-ids 1,2,3,4 --gen-length 16 --json > /dev/null 2> $OUT/picks_log.txt
echo "generate rc=$?"; grep -i "picks" $OUT/picks_log.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
