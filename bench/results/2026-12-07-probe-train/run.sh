#!/bin/bash
# One device call (<= 600 s) doing three things: the small Dream model's training on the GPU in the
# background (bench/results/2026-12-07-dream-model/run.sh: Python, mostly GPU), and in the
# foreground (C++ builds on the CPU, short GPU kernels) the FP8 GEMM operand-order probe and the
# sm_90 re-runs of the tests changed since bench/results/2026-12-07-gpu-tests/ (fp8, attention, the
# MoE and Dream golden forwards' yardstick), then the compute_80 PTX build's twin tests
# (gpu_check.sh --tests-only with FLASHDLLM_CUDA_ARCHS=80-virtual: the Ampere paths on this GPU)
# within what is left. No timings are taken here.
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-probe-train/run.sh <tree> <label> [train budget]
PRELUDE_BUILD=0
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
echo "still missing: $(git ls-files -d | wc -l) tracked files $(git ls-files -d | head -3 | tr '\n' ' ')"
mkdir -p "$OUT/dream" "$OUT/c80" /tmp/sm90
OUT=$OUT/dream TRAIN_LIMIT=520 bash bench/results/2026-12-07-dream-model/run.sh "${3:-310}" > /tmp/dream_call.log 2>&1 &
train=$!
prelude_build_targets test_cuda_fp8 test_cuda_attention test_cuda_moe test_cuda_gqa
build-gpu/tests/test_cuda_fp8 > "/tmp/sm90/test_cuda_fp8.log" 2>&1
grep -E "probe|^\[ +(OK|FAILED|PASSED|SKIPPED) |rel max err" "/tmp/sm90/test_cuda_fp8.log" | head -60
for t in attention moe gqa; do
  build-gpu/tests/test_cuda_$t > "/tmp/sm90/test_cuda_$t.log" 2>&1
  echo "test_cuda_$t rc=$?"
  grep -E "^\[ +(FAILED|PASSED) |Failure|argmax agreement" "/tmp/sm90/test_cuda_$t.log" | head -20
done
tar -C /tmp -czf "$OUT/sm90.tgz" sm90
echo "sm90 done at $(($(date +%s) - t0)) s"
budget=$((500 - ($(date +%s) - t0)))
if ((budget > 60)); then
  OUT=/tmp/out-c80 FLASHDLLM_CUDA_ARCHS=80-virtual FLASHDLLM_GPU_BUILD_DIR=build-c80 \
    FLASHDLLM_GPU_CHECK_BUDGET=$budget bash scripts/gpu_check.sh --tests-only > /dev/null 2>&1
  echo "c80 rc=$? (budget $budget s)"
  cp /tmp/out-c80/summary.md "$OUT/c80/" 2>/dev/null
  gzip -c /tmp/out-c80/gpu_check.log > "$OUT/c80/gpu_check.log.gz" 2>/dev/null
  sed -n '/^| step/,/^$/p' "$OUT/c80/summary.md"
fi
wait $train
echo "== training ($(($(date +%s) - t0)) s)"
cat /tmp/dream_call.log
