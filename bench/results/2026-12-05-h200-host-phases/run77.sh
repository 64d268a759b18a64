#!/bin/bash
# Session 27, call 5: <commit> (re-rank during the verify pass): iterations at 32 slots, flash + verify
# before (HEAD~1's flash_cache.cpp) vs after, then flash vs flash + verify with the verify pass's floor.
# Usage: bash .carry/run77.sh <tree> <label>
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
