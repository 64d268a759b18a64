#!/bin/bash
# Session 23, call 3 (final): the GPU checks on this commit (scripts/gpu_check.sh --tests-only: every GPU
# twin, sanitizers, batch invariance) and the issue's iteration targets: A = 8b8b8f8 (built beside) vs
# B = this commit, flash at 1/16/32 slots; flash vs flash + verify at 32 slots.
# Usage: bash .carry/run60.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-kv-rings/run60.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OLD=${OLD:-8b8b8f8}
mkdir -p .deps /tmp/old /tmp/oldout $OUT/checks
git archive $OLD | tar -x -C /tmp/old && cp -r .deps .carry /tmp/old/
(cd /tmp/old && OUT=/tmp/oldout FLASHDLLM_COMMIT=$OLD FLASHDLLM_GPU_CHECK_BUDGET=300 bash scripts/gpu_check.sh --build-only > /tmp/oldbuild.log 2>&1; echo "old build rc=$?" >> /tmp/oldbuild.log) &
(OUT=$OUT/checks FLASHDLLM_GPU_CHECK_BUDGET=250 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
wait; tail -1 /tmp/oldbuild.log
(OUT=$OUT/checks FLASHDLLM_GPU_CHECK_BUDGET=300 timeout 330 bash scripts/gpu_check.sh --tests-only > $OUT/gpu_check_stdout.txt 2>&1); echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^\| " $OUT/checks/summary.md | head -30
timeout 150 python3 bench/iteration_floor.py --a-bin /tmp/old/$B/flashdllm --b-bin $B/flashdllm \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor_ab.json > $OUT/floor_ab.md 2>&1
echo "floor A/B rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_ab.md
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 32 --per-iter 4 --repeats 2 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
