#!/bin/bash
# The first GPU run of the CUDA code written without a GPU (MoE kernels, Dream's top-p/top-k filter,
# block-FP8 GEMM, the Ampere path): every kernels-labelled twin test (gpu_check.sh --tests-only) on an
# sm_90 build, then the same tests on a compute_80 PTX build (FLASHDLLM_CUDA_ARCHS=80-virtual: the
# Ampere code paths, no wgmma, run on this Hopper GPU), each within its budget (later steps are
# skipped rather than overrunning). Keeps each check's summary.md and log.
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-gpu-tests/run.sh <tree> <label>
PRELUDE_BUILD=0
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
echo "still missing: $(git ls-files -d | head -5 | tr '\n' ' ')"
for v in sm90 c80; do
  mkdir -p "$OUT/$v"
  if [[ $v == sm90 ]]; then
    OUT=/tmp/out-$v FLASHDLLM_GPU_CHECK_BUDGET=${SM90_BUDGET:-270} bash scripts/gpu_check.sh --tests-only > /dev/null 2>&1
  else
    OUT=/tmp/out-$v FLASHDLLM_CUDA_ARCHS=80-virtual FLASHDLLM_GPU_BUILD_DIR=build-c80 \
      FLASHDLLM_GPU_CHECK_BUDGET=${C80_BUDGET:-230} bash scripts/gpu_check.sh --tests-only > /dev/null 2>&1
  fi
  echo "$v rc=$?"
  cp /tmp/out-$v/summary.md /tmp/out-$v/gpu_check.log "$OUT/$v/" 2>/dev/null
  sed -n '/^| step/,/^$/p' "$OUT/$v/summary.md"
  grep -E "^\[probe\]" "$OUT/$v/gpu_check.log"
done
