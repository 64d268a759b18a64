#!/bin/bash
# Session 27, call 4: <commit> (packed-key rerank): host phases (temporary timers, .carry/hostprof.patch)
# with and without glibc's heap trimming; iterations old rerank (HEAD~1's flash_cache.cpp) vs new at
# 32 slots; flash vs flash + verify with the verify pass's floor.
# Usage: bash .carry/run76.sh <tree> <label>
set -u
# Ran on an NVIDIA H200 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h200-host-phases/run76.sh
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
V="--verify --verify-kept commits"
cp $B/flashdllm /tmp/fd_new
git show HEAD~1:src/denoise/flash_cache.cpp > src/denoise/flash_cache.cpp
cmake --build $B --target flashdllm -j16 > /tmp/b1.log 2>&1 || tail -20 /tmp/b1.log
cp $B/flashdllm /tmp/fd_old; git checkout -- src/denoise/flash_cache.cpp
git apply .carry/hostprof.patch && cmake --build $B --target flashdllm -j16 > /tmp/b2.log 2>&1 || tail -20 /tmp/b2.log
echo "binaries at $(( $(date +%s) - t0 )) s"
run_hp() {  # name, env..., -- generate args
  local name=$1; shift
  timeout 60 env "$@" $B/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda --gen-length 512 \
    --json --no-live --cache flash --forced-schedule 4 --slots 32 $EXTRA $(python3 bench/synthetic_prompt_args.py 250 32) \
    2> $OUT/hostprof_$name.txt > /dev/null; echo "== hostprof $name rc=$?"; grep "^HP" $OUT/hostprof_$name.txt
}
EXTRA=$V run_hp verify FOO=1
EXTRA=$V run_hp verify_notrim MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=67108864
EXTRA="" run_hp flash FOO=1
git checkout -- src/denoise/flash_cache.cpp src/model/llada.cpp; rm -f src/core/hostprof_tmp.h
echo "hostprof done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 bench/iteration_floor.py --a-bin /tmp/fd_old --b-bin /tmp/fd_new --slots 32 --per-iter 4 --repeats 1 \
  --json $OUT/floor_rerank.json > $OUT/floor_rerank.md 2>&1
echo "floor rerank rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_rerank.md
timeout 150 python3 bench/iteration_floor.py --a-bin /tmp/fd_new --b-args="$V" --slots 32 --per-iter 4 --repeats 1 \
  --verify-rows-per-slot 20 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
