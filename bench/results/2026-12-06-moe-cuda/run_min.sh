#!/bin/bash
# The shortest GPU check of this session's CUDA changes (what the device time left allowed):
# test_cuda_verify (the 6-int verify tile and its source rows: LLaDA's Flash-Verify path), then
# test_cuda_moe (QK-norm, moe_route, moe_experts), then test_cuda_gqa; 30 s per binary.
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-moe-cuda/run_min.sh <tree> <label>
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
for t in test_cuda_verify test_cuda_moe test_cuda_gqa; do
  timeout 30 $B/tests/$t > "$OUT/$t.log" 2>&1
  echo "$t rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]|Failure$" "$OUT/$t.log" | head -8
done
