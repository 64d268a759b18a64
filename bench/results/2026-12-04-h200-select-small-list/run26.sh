#!/bin/bash
# Session 18: same-machine A/B of 9d7a2d5 (before the select and small-list changes) vs <commit>:
# flash at 1 and 32 slots (2 repeats), flash + verify (kept commits) at 32 slots (1 repeat).
# Usage: bash .carry/run26.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-select-small-list/run26.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
mkdir -p .deps /tmp/old
# 9d7a2d5's build differs from <commit>'s in these two sources only (git diff --stat 9d7a2d5 <commit> -- src include)
tar -c --exclude=./build-gpu --exclude=./build . | tar -x -C /tmp/old
cp .carry/old9d7/select.cu /tmp/old/src/kernels/cuda/select.cu && cp .carry/old9d7/cuda_backend.cu /tmp/old/src/backend/cuda/cuda_backend.cu
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "new built $(( $(date +%s) - t0 )) s"
(cd /tmp/old && FLASHDLLM_COMMIT=9d7a2d5 FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/oldbuild.log 2>&1) || { tail -20 /tmp/oldbuild.log; exit 1; }
echo "old built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
timeout 200 python3 bench/iteration_floor.py --a-bin /tmp/old/build-gpu/flashdllm --b-bin build-gpu/flashdllm \
  --slots 1,32 --per-iter 4 --repeats 2 --json $OUT/floor_ab_flash.json > $OUT/floor_ab_flash.md 2>&1
echo "flash ab rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured|^A|^B" $OUT/floor_ab_flash.md
timeout 120 python3 bench/iteration_floor.py --a-bin /tmp/old/build-gpu/flashdllm --b-bin build-gpu/flashdllm \
  --a-args="--verify --verify-kept commits" --b-args="--verify --verify-kept commits" \
  --slots 32 --per-iter 4 --repeats 1 --json $OUT/floor_ab_verify.json > $OUT/floor_ab_verify.md 2>&1
echo "verify ab rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured|^A|^B" $OUT/floor_ab_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
