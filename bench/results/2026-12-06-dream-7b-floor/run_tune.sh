#!/bin/bash
# Is the Dream-7B iteration's distance from its floor the GEMM algorithm choice? iteration_floor.py
# at the Dream-7B shape, A = the built-in picks (LLaDA's shapes only) / heuristic, B = the same
# binary timing cuBLASLt's first 8 candidates per shape at run time (FLASHDLLM_GEMM_TUNE=8).
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-dream-7b-floor/run_tune.sh <tree> <label>
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_GEMM_TUNE=8 --model data/dream-v0-instruct-7b \
  --slots 1,32 --repeats 2 --json "$OUT/dream_tune.json" 2>&1 | tee "$OUT/dream_tune.md" | tail -12
