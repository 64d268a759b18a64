#!/bin/bash
# Session 27, call 5: <commit> (re-rank during the verify pass): iterations at 32 slots, flash + verify
# before (HEAD~1's flash_cache.cpp) vs after, then flash vs flash + verify with the verify pass's floor.
# Usage: bash .carry/run77.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h200-host-phases/run77.sh
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
V="--verify --verify-kept commits"
cp $B/flashdllm /tmp/fd_new; cp src/denoise/flash_cache.cpp /tmp/fc_new.cpp
git show HEAD~1:src/denoise/flash_cache.cpp > src/denoise/flash_cache.cpp
cmake --build $B --target flashdllm -j16 > /tmp/b1.log 2>&1 || tail -20 /tmp/b1.log
cp $B/flashdllm /tmp/fd_old; cp /tmp/fc_new.cpp src/denoise/flash_cache.cpp
echo "binaries at $(( $(date +%s) - t0 )) s"
timeout 170 python3 bench/iteration_floor.py --a-bin /tmp/fd_old --b-bin /tmp/fd_new --a-args="$V" --b-args="$V" --slots 32 \
  --per-iter 4 --repeats 1 --json $OUT/floor_verify_ab.json > $OUT/floor_verify_ab.md 2>&1
echo "floor verify A/B rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_verify_ab.md
timeout 170 python3 bench/iteration_floor.py --a-bin /tmp/fd_new --b-args="$V" --slots 32 --per-iter 4 --repeats 1 \
  --verify-rows-per-slot 20 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
