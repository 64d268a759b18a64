#!/bin/bash
# The first GPU run of the CUDA code written without a GPU (MoE kernels, Dream's top-p/top-k filter,
# the Ampere path): every kernels-labelled twin test (gpu_check.sh --tests-only) on an sm_90 build,
# then the same tests on a compute_80 PTX build (FLASHDLLM_CUDA_ARCHS=80-virtual: the Ampere code
# paths, no wgmma, run on this Hopper GPU), each within its budget.
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-gpu-tests/run.sh <tree> <label>
PRELUDE_BUILD=0
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
echo "still missing: $(git ls-files -d | head -5 | tr '\n' ' ')"
mkdir -p "$OUT/sm90" "$OUT/c80"
OUT=$OUT/sm90 FLASHDLLM_GPU_CHECK_BUDGET=${SM90_BUDGET:-270} bash scripts/gpu_check.sh --tests-only > /tmp/sm90.log 2>&1
echo "sm_90 rc=$?"; sed -n '/^| step/,/^$/p' "$OUT/sm90/summary.md"
OUT=$OUT/c80 FLASHDLLM_CUDA_ARCHS=80-virtual FLASHDLLM_GPU_BUILD_DIR=build-c80 \
  FLASHDLLM_GPU_CHECK_BUDGET=${C80_BUDGET:-230} bash scripts/gpu_check.sh --tests-only > /tmp/c80.log 2>&1
echo "compute_80 rc=$?"; sed -n '/^| step/,/^$/p' "$OUT/c80/summary.md"
