#!/bin/bash
# Session 19, call 2: <commit> (lean K/V loads) vs 5405bf4 (attention_flash.cu carried as a file):
# GPU tests of the attention kernels, sanitizers on verify/attention Small sets, verify + m64n64
# window attention in isolation for both binaries, flash+verify iterations at 1 and 32 slots (A/B).
# Usage: bash .carry/run29.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-verify-loads/run29.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
mkdir -p .deps /tmp/old
tar -c --exclude=./build-gpu --exclude=./build . | tar -x -C /tmp/old
cp .carry/old_attention_flash.cu /tmp/old/src/kernels/cuda/attention_flash.cu
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "new built $(( $(date +%s) - t0 )) s"
(cd /tmp/old && FLASHDLLM_COMMIT=5405bf4 FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/oldbuild.log 2>&1) || { tail -20 /tmp/oldbuild.log; exit 1; }
echo "old built $(( $(date +%s) - t0 )) s"
: > $OUT/tests.txt
for t in test_cuda_verify test_cuda_attention test_cuda_importance test_cuda_forward; do
  timeout 90 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" /tmp/$t.txt | head -8 | tee -a $OUT/tests.txt
done
FLASHDLLM_ATTENTION=m64n64 timeout 60 $B/tests/test_cuda_verify --gtest_color=no > /tmp/v64.txt 2>&1
echo "test_cuda_verify with FLASHDLLM_ATTENTION=m64n64 rc=$?" | tee -a $OUT/tests.txt
for tool in memcheck racecheck; do
  for spec in "test_cuda_verify:*/Small:CudaVerifyLaunch.*" "test_cuda_attention:CudaAttention.Small*"; do
    t=${spec%%:*}; f=${spec#*:}
    FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 100 compute-sanitizer --tool $tool --error-exitcode 86 \
      --print-limit 10 $B/tests/$t --gtest_color=no --gtest_filter="$f" > /tmp/san.txt 2>&1
    echo "$tool $t rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san.txt | head -2 | tee -a $OUT/tests.txt
  done
done
for side in old new; do
  bin=$B/bench/attention_bench; [[ $side == old ]] && bin=/tmp/old/$B/bench/attention_bench
  timeout 60 $bin --verify-shapes 32:20:750,16:20:750,8:20:750,1:20:750,32:32:738 --verify-ctas 2x2,2x3 --iters 20 \
    --json /tmp/vb_$side.json > /tmp/vb_$side.md 2>&1; echo "verify bench $side rc=$?"
  timeout 60 $bin --window-shapes 1:128:768,32:128:768 --variants m64n64 --iters 20 > /tmp/wb_$side.md 2>&1; echo "window bench $side rc=$?"
done
{ for side in old new; do echo "## $side"; grep -E "^\|" /tmp/vb_$side.md; grep -E "^\|" /tmp/wb_$side.md; done; } | tee $OUT/bench_ab.md
timeout 200 python3 bench/iteration_floor.py --a-bin /tmp/old/build-gpu/flashdllm --b-bin build-gpu/flashdllm \
  --a-args="--verify --verify-kept commits" --b-args="--verify --verify-kept commits" \
  --slots 1,32 --per-iter 4 --repeats 2 --json $OUT/floor_ab_verify.json > $OUT/floor_ab_verify.md 2>&1
echo "verify ab rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured|^A|^B" $OUT/floor_ab_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
