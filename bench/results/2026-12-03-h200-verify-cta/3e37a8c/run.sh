#!/bin/bash
# Verify attention launch configurations (issue 13): build, test_cuda_verify (+ sanitizers on the
# launch test), attention_bench --verify-shapes, the 32-slot verify pass. Usage: bash .carry/run17.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-verify-cta/3e37a8c/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt
FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
timeout 90 $B/tests/test_cuda_verify > $OUT/test_cuda_verify.txt 2>&1; echo "test_cuda_verify rc=$?"; grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|differ" $OUT/test_cuda_verify.txt | head -30
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  FLASHDLLM_CUDA_SYNC=1 timeout 150 $SAN --tool $tool --error-exitcode 86 --print-limit 10 --report-api-errors no \
    $B/tests/test_cuda_verify --gtest_filter='CudaVerifyLaunch.*' > $OUT/san_$tool.txt 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/san_$tool.txt | head -4
done
echo "tests done $(( $(date +%s) - t0 )) s"
timeout 120 $B/bench/attention_bench --verify-shapes ${VSHAPES:-32:20:750,32:32:738,16:20:750,64:20:750,128:20:750} \
  --verify-stages 2,3 --verify-orders item,head --iters 20 --json $OUT/verify_bench.json > $OUT/verify_bench.md 2>&1
echo "verify bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/verify_bench.md
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-32} --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
