#!/bin/bash
# Second GPU call of the merge check: test_cuda_gqa after its yardstick change, and the steps of the
# first call that needed the embedded model (test_cuda_forward's small-model cases, NCCL tp1,
# batch invariance), which that call could not carry.
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-merge-check/run2.sh <tree> <label>
PRELUDE_BUILD=0
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
ROOT=$PWD FDLLM_TAG=merge2 LOG=/tmp/merge2.log
source scripts/gpu_env.sh
fdllm_use_carried_deps > /dev/null 2>&1
fdllm_configure_cmd build-gpu
"${CONFIGURE_CMD[@]}" > /tmp/cfg.log 2>&1 || { tail -20 /tmp/cfg.log; exit 1; }
cmake --build build-gpu -j16 --target test_cuda_gqa test_cuda_forward test_nccl_comm batch_invariance > /tmp/b.log 2>&1 ||
  { grep -E "error" /tmp/b.log | head -20; exit 1; }
echo "built $(($(date +%s) - t0)) s on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
build-gpu/tests/test_cuda_gqa 2>&1 | grep -E "dream_a|dream layout|^\[ +(OK|FAILED|PASSED|SKIPPED) "
build-gpu/tests/test_cuda_forward --gtest_filter=-*Golden* 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure"
build-gpu/tests/test_nccl_comm 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure"
build-gpu/bench/batch_invariance --device cuda --json "$OUT/batch_invariance.json" 2>&1 | tail -4
