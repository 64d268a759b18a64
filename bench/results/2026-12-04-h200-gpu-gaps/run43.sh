#!/bin/bash
# Session 20, call 8: <commit>: bench/gpu_gaps.py (Nsight Compute's bundled target nsys + QdstrmImporter, libdw/libelf
# from Debian's libdw1/libelf1 carried) at 32 slots, flash + verify and flash only.
# Usage: bash .carry/run43.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-gpu-gaps/run43.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
NS=/opt/nvidia/nsight-compute/2025.3.1/host; G="--nsys $NS/target-linux-x64/nsys --importer $NS/linux-desktop-glibc_2_11_3-x64/QdstrmImporter"
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
timeout 70 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --gen-args="--verify --verify-kept commits" \
  --json $OUT/gaps_s32_verify.json > $OUT/gaps_s32_verify.md 2>&1; echo "s32 verify rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/gaps_s32_verify.md | head -22
timeout 50 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --json $OUT/gaps_s32_flash.json > $OUT/gaps_s32_flash.md 2>&1
echo "s32 flash rc=$? at $(( $(date +%s) - t0 )) s"; head -16 $OUT/gaps_s32_flash.md
echo "elapsed $(( $(date +%s) - t0 )) s"
