#!/bin/bash
# GPU check of main after the merges of 2026-12-06 (variants, server, jinja, generic, Dream sampler):
# scripts/gpu_check.sh --tests-only (twin tests incl. CudaSelect.DreamRuleMatchesCpu, the bench-only
# attention tile shapes, cuDNN-all forward, memcheck, racecheck), then Dream's sampler on the CUDA
# backend is refused (GQA) and LLaDA's golden CLI run on CUDA.
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-merge-check/run.sh <tree> <label>
PRELUDE_BUILD=0
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
FLASHDLLM_GPU_CHECK_BUDGET=560 OUT=$OUT bash scripts/gpu_check.sh --tests-only > /tmp/gc.log 2>&1
echo "gpu_check rc=$?"
grep -E "^\| " "$OUT/summary.md" | head -60
grep -E "FAILED|Failure" /tmp/gc.log | head -30
