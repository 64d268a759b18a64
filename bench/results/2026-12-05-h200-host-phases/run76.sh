#!/bin/bash
# Session 27, call 4: <commit> (packed-key rerank): host phases (temporary timers, .carry/hostprof.patch)
# with and without glibc's heap trimming; iterations old rerank (HEAD~1's flash_cache.cpp) vs new at
# 32 slots; flash vs flash + verify with the verify pass's floor.
# Usage: bash .carry/run76.sh <tree> <label>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null && echo "restored data/gsm8k_train.jsonl from git"
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
(FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu; V="--verify --verify-kept commits"
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
