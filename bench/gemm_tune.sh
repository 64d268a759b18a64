#!/usr/bin/env bash
# Issue 13 #4 (small-M GEMM efficiency): cuBLASLt's heuristic first choice against the fastest of its
# first K candidates (kernels/cuda/gemm.h tune_candidates; FLASHDLLM_GEMM_TUNE=K in the engine), one
# binary, one run:
#   1. gemm_bench --tune K at LLaDA-8B layer shapes for the Flash-Cache window rows of 1, 4, 16 and
#      32 slots (16 + 64 + 64 = 144 query rows per slot) and a 32 x 250-token prefill;
#   2. Flash-Cache per-iteration time at 8B shape (bench/gpu_grid_8b.sh, flash, 250-token prompts,
#      gen 512, forced 8 tokens per iteration) at SLOTS with FLASHDLLM_GEMM_TUNE=0 and =K.
#   bench/gemm_tune.sh                 on the GPU machine; $OUT/gemm_tune.md + raw files
#   BUILD=build-gpu K=8 SLOTS="1 16 32" OUT=./out
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build-gpu}"
K="${K:-8}"
SLOTS="${SLOTS:-1 16 32}"
OUT="${OUT:-./out}"
mkdir -p "$OUT/tune0" "$OUT/tune$K"
"$BUILD/bench/gemm_bench" --tokens 144,576,2304,4608,8000 --tune "$K" --iters 10 --json "$OUT/gemm_tune.json" |
  tee "$OUT/gemm_tune.md"
for k in 0 "$K"; do
  FLASHDLLM_GEMM_TUNE=$k FLASHDLLM="$BUILD/flashdllm" METHODS=flash PROMPTS=250 SLOTS="$SLOTS" BUDGET=200 \
    OUT="$OUT/tune$k" bench/gpu_grid_8b.sh > /dev/null
  echo
  echo "## Flash-Cache per iteration, FLASHDLLM_GEMM_TUNE=$k"
  cat "$OUT/tune$k/grid.md"
done | tee -a "$OUT/gemm_tune.md"
