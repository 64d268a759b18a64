#!/bin/bash
# Verify attention configurations + ncu of the verify kernel (issue 13). Usage: bash .carry/run18.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-verify-cta/c6ec1b2/run.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*flash_attention_kernelILi(32|64)ELi64ELb1" /tmp/build.log | grep -E "Compiling|Used" | sed -E 's/.*kernelILi([0-9]+)ELi([0-9]+)ELb1ELi([0-9])ELb([01])E.*/m\1 stages \3 head \4:/' | paste - - | cut -c1-90
{
timeout 90 $B/tests/test_cuda_verify; echo "test_cuda_verify rc=$?"
FLASHDLLM_ATTENTION=reference timeout 90 $B/tests/test_cuda_verify --gtest_filter='*CudaVerify.*'; echo "test_cuda_verify (reference attention: the scalar kernel at head_dim 128) rc=$?"
} > $OUT/tests.txt 2>&1
grep -E "rc=|FAILED|Failure" $OUT/tests.txt | head
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  FLASHDLLM_CUDA_SYNC=1 timeout 150 $SAN --tool $tool --error-exitcode 86 --print-limit 10 --report-api-errors no \
    $B/tests/test_cuda_verify --gtest_filter='CudaVerifyLaunch.*' > /tmp/san_$tool.txt 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" /tmp/san_$tool.txt | head -4
done
echo "tests done $(( $(date +%s) - t0 )) s"
timeout 150 $B/bench/attention_bench --verify-shapes ${VSHAPES:-32:20:750,32:32:738,16:20:750} \
  --verify-block-m 64,32 --verify-stages 2,3 --verify-orders item,head --iters 20 --json $OUT/verify_bench.json > $OUT/verify_bench.md 2>&1
echo "verify bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/verify_bench.md
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for cfg in "64 2 item" "32 2 item"; do
  set -- $cfg
  timeout 120 $NCU --kernel-name regex:flash_attention_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
    $B/bench/attention_bench --verify-shapes 32:20:750 --verify-block-m $1 --verify-stages $2 --verify-orders $3 --iters 2 --warmup 1 \
    > $OUT/ncu_m$1_s$2_$3.txt 2>&1
  echo "ncu $cfg rc=$?"
done
echo "elapsed $(( $(date +%s) - t0 )) s"
