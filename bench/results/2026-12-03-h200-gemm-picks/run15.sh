#!/bin/bash
# The built-in GEMM pick table on the device: tests, that it applies, and floors without / with it
# (3 repeats, alternating). Usage (repo root): bash .carry/run15.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-gemm-picks/run15.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=150 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu --target test_gemm_picks > /dev/null 2>&1
echo "built $(( $(date +%s) - t0 )) s"
{ timeout 60 $B/tests/test_cuda_ops --gtest_filter='GemmPicks*:GemmBuckets*:*Matmul*'; timeout 30 $B/tests/test_gemm_picks; } > $OUT/tests.txt 2>&1
echo "tests rc=$?"; grep -E "PASSED|FAILED|SKIPPED \]" $OUT/tests.txt
timeout 60 $B/flashdllm generate -v --device cuda -m tests/data/golden/g1 --prompt-ids 1,2,3,4 --gen-length 16 --json > /dev/null 2> $OUT/picks_log.txt
echo "generate rc=$?"; grep -i "picks" $OUT/picks_log.txt
timeout 240 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_GEMM_PICKS=off \
  --b-env FLASHDLLM_GEMM_PICKS= --slots 1,16,32 --per-iter 4 --repeats 3 \
  --json $OUT/floor_builtin.json > $OUT/floor_builtin.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_builtin.md
timeout 90 python3 bench/iteration_floor.py --a-bin $B/flashdllm \
  --b-args="--verify --verify-kept commits" --slots 32 --per-iter 4 --repeats 1 \
  --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
