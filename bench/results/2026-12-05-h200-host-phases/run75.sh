#!/bin/bash
# Session 27, call 3: <commit>: per-pass wall / busy / lead-in at 32 slots, gen 512 (issue 13's verify
# target): gpu_gaps with graph-level tracing (flash + verify, flash) and node-level (flash + verify).
# Usage: bash .carry/run74.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h200-host-phases/run75.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
NS=/opt/nvidia/nsight-compute/2025.3.1/host; G="--nsys $NS/target-linux-x64/nsys --importer $NS/linux-desktop-glibc_2_11_3-x64/QdstrmImporter"
(FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
V="--verify --verify-kept commits"
for c in "verify graph" "flash graph"; do
  set -- $c; args=""; [[ $1 == verify ]] && args=$V
  timeout 150 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --gen 512 --graph-trace $2 --gen-args="$args" \
    --top 14 --json $OUT/gaps_s32_g512_$1_$2.json > $OUT/gaps_s32_g512_$1_$2.md 2>&1
  echo "== $1 $2 rc=$? at $(( $(date +%s) - t0 )) s"; grep -v "^$" $OUT/gaps_s32_g512_$1_$2.md | head -30
done
# Host phases of the step on this machine's CPU (temporary timers, .carry/hostprof.patch; not a commit).
git apply .carry/hostprof.patch && cmake --build $B --target flashdllm -j16 > /tmp/b2.log 2>&1 || { tail -20 /tmp/b2.log; }
echo "hostprof build at $(( $(date +%s) - t0 )) s"
for m in verify; do
  args=""; [[ $m == verify ]] && args=$V
  timeout 60 $B/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda --gen-length 512 --json \
    --no-live --cache flash --forced-schedule 4 --slots 32 $args $(python3 bench/synthetic_prompt_args.py 250 32) \
    2> $OUT/hostprof_$m.txt > /tmp/hp_$m.json; echo "== hostprof $m rc=$?"; grep "^HP" $OUT/hostprof_$m.txt
done
git checkout -- src/denoise/flash_cache.cpp src/model/llada.cpp; rm -f src/core/hostprof_tmp.h
echo "elapsed $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=$PWD/.carry/dw:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
cmake --build $B --target flashdllm -j16 > /tmp/b3.log 2>&1 || tail -20 /tmp/b3.log
timeout 150 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 32 --per-iter 4 --repeats 1 --verify-rows-per-slot 20 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
