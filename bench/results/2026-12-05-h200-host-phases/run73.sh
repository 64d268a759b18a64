#!/bin/bash
# Session 27, call 1: main <commit>: where the verify pass's wall time goes at 32 slots (nsys gaps,
# flash + verify and flash) and the iteration floor at 32 slots (A flash, B flash + verify), 2 repeats.
# Usage: bash .carry/run73.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h200-host-phases/run73.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
NS=/opt/nvidia/nsight-compute/2025.3.1/host; G="--nsys $NS/target-linux-x64/nsys --importer $NS/linux-desktop-glibc_2_11_3-x64/QdstrmImporter"
(FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
timeout 80 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --gen-args="--verify --verify-kept commits" \
  --top 25 --json $OUT/gaps_s32_verify.json > $OUT/gaps_s32_verify.md 2>&1; echo "s32 verify rc=$? at $(( $(date +%s) - t0 )) s"; head -32 $OUT/gaps_s32_verify.md
timeout 60 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --top 20 --json $OUT/gaps_s32_flash.json > $OUT/gaps_s32_flash.md 2>&1
echo "s32 flash rc=$? at $(( $(date +%s) - t0 )) s"; head -26 $OUT/gaps_s32_flash.md
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 32 --per-iter 4 --repeats 2 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
