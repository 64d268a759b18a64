#!/bin/bash
# Session 23, call 5 (final): cbec470. Build; attention / importance / forward / verify / ops twins;
# memcheck + racecheck on the attention Small set and the fused importance Small test; then the targets
# in one run: A = flash, B = flash + verify (--verify-kept commits), 1 / 16 / 32 slots.
# Usage: bash .carry/run62.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-kv-rings/run62.sh
BUILD_BUDGET=250  # seconds for the build (default 200)
BUILD_OUT=/tmp/chk  # where the build's gpu_check.sh writes (default $OUT)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Compiling|Used|spill" |
  sed -E 's/.*wgmma_attention_kernelILi([0-9]+)ELi([0-9]+)ELi([0-9]+)ELi([0-9]+)E.*/wgmma n\1 K\2 V\3 consumers \4:/' > $OUT/ptxas.txt
: > $OUT/tests.txt
for t in test_cuda_attention test_cuda_importance test_cuda_forward test_cuda_verify test_cuda_ops; do
  timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -6 | tee -a $OUT/tests.txt
done
for tool in memcheck racecheck; do
  for t in test_cuda_attention:CudaAttention.Small* test_cuda_importance:*FusedWithAttentionMatchesCpu/Small; do
    FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 100 compute-sanitizer --tool $tool --error-exitcode 86 \
      --print-limit 10 $B/tests/${t%%:*} --gtest_color=no --gtest_filter="${t#*:}" > /tmp/san.txt 2>&1
    echo "$tool $t rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
    grep -E "PASSED|SUMMARY" /tmp/san.txt | head -2 | tee -a $OUT/tests.txt
  done
done
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor_targets.json > $OUT/floor_targets.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_targets.md
echo "elapsed $(( $(date +%s) - t0 )) s"
