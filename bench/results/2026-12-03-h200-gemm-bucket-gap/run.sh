#!/bin/bash
# Verify-sized GEMMs (bucket algorithm vs tuned exact-T candidates) and the 1-slot iteration floor.
# Usage (repo root): bash .carry/run11.sh <expected tree hash> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-gemm-bucket-gap/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
timeout 90 $B/bench/gemm_bench --tokens 256,384,512,640,768,1024 --shapes qkv,attn_out,gate_up,down --tune 8 --iters 10 \
  --json $OUT/gemm_bench.json > $OUT/gemm_bench.txt 2>&1; echo "gemm_bench rc=$?"; grep -E "^\|" $OUT/gemm_bench.txt | head -40
echo "gemm done $(( $(date +%s) - t0 )) s"
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --slots 1 --repeats 3 --json $OUT/floor_1slot.json \
  > $OUT/floor_1slot.md 2>&1; echo "floor rc=$?"; grep -E "^\|" $OUT/floor_1slot.md
echo "elapsed $(( $(date +%s) - t0 )) s"
