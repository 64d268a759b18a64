#!/bin/bash
# Same-machine A/B of the verify pass: 6bbf282 (64-row verify CTAs) vs <commit>. Usage: bash .carry/run22.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-verify-cta/272fc24/run_ab.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "new built $(( $(date +%s) - t0 )) s"
git worktree add -f /tmp/old 6bbf282 > /dev/null 2>&1 && cp -r .deps /tmp/old/ && cp -r .carry /tmp/old/
(cd /tmp/old && FLASHDLLM_COMMIT=6bbf282 FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/oldbuild.log 2>&1) || { tail -20 /tmp/oldbuild.log; exit 1; }
echo "old built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
for side in old new; do
  bin=build-gpu/flashdllm; [[ $side == old ]] && bin=/tmp/old/build-gpu/flashdllm
  timeout 100 python3 bench/iteration_floor.py --a-bin $bin --b-args="--verify --verify-kept commits" \
    --slots 32 --per-iter 4 --repeats 1 --json $OUT/floor_$side.json > $OUT/floor_$side.md 2>&1
  echo "floor $side rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\| 32" $OUT/floor_$side.md
done
