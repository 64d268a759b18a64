#!/bin/bash
# The shortest follow-up of run.sh (what the device time left allowed): builds only test_cuda_fp8 and
# test_cuda_attention and runs the FP8 operand-role / scale-layout probe, the FP8 twins and the fixed
# attention test.
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-gpu-tests/run_fp8_probe.sh <tree> <label>
PRELUDE_BUILD=0
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
ROOT=$PWD FDLLM_TAG=fp8probe LOG=/tmp/fp8probe.log
source scripts/gpu_env.sh
fdllm_use_carried_deps > /dev/null 2>&1
fdllm_configure_cmd build-gpu
"${CONFIGURE_CMD[@]}" > /tmp/cfg.log 2>&1 || { tail -20 /tmp/cfg.log; exit 1; }
cmake --build build-gpu -j16 --target test_cuda_fp8 test_cuda_attention > /tmp/b.log 2>&1 ||
  { grep -E "error" /tmp/b.log | head -20; exit 1; }
echo "built $(($(date +%s) - t0)) s on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
build-gpu/tests/test_cuda_fp8 2>&1 | tee "$OUT/test_cuda_fp8.log" | grep -E "probe|^\[ +(OK|FAILED|PASSED|SKIPPED) |rel max err" | head -60
build-gpu/tests/test_cuda_attention --gtest_filter='*SmallPlanOnce*' 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED) |Failure"
