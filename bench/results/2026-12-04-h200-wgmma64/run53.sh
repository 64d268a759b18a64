#!/bin/bash
# Session 22, call 1: build; GPU twin tests touched by PDL + gather_columns (and the forward's
# graph-replay bit-exactness, golden + small-model parity); then iteration floor A = FLASHDLLM_PDL=0,
# B = default (PDL on), flash, slots 1/16/32; then flash+verify at 32 slots with PDL on and off.
# Usage: bash .carry/run53.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-wgmma64/run53.sh
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
: > $OUT/tests.txt
for t in test_cuda_ops test_cuda_select test_cuda_verify test_cuda_forward test_cuda_attention test_cuda_importance; do
  timeout 120 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" /tmp/$t.txt | head -8 | tee -a $OUT/tests.txt
done
for t in test_forward_golden test_flash_cache_golden test_small_model_parity test_flash_verify; do
  [[ -x $B/tests/$t ]] || continue
  timeout 120 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" /tmp/$t.txt | head -6 | tee -a $OUT/tests.txt
done
FLASHDLLM_CUDA_SYNC=1 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 86 --print-limit 10 \
  $B/tests/test_cuda_ops --gtest_color=no --gtest_filter='Small*Gather*' > /tmp/san.txt 2>&1
echo "memcheck gather rc=$?" | tee -a $OUT/tests.txt; grep -E "PASSED|SUMMARY" /tmp/san.txt | head -2 | tee -a $OUT/tests.txt
timeout 330 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_PDL=0 --b-bin $B/flashdllm \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor_pdl.json > $OUT/floor_pdl.md 2>&1
echo "floor pdl rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_pdl.md
echo "elapsed $(( $(date +%s) - t0 )) s"
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_PDL=0 --a-args="--verify --verify-kept commits" \
  --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 32 --per-iter 4 --repeats 2 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
