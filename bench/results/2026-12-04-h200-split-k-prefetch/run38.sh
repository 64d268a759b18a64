#!/bin/bash
# Session 20, call 3 (exploratory, branch exp-lines): <commit>: per-line LSU L2 prefetch; build, prefetch + forward
# L2 tests, iteration floor at 1/4 slots: A 32 MiB / B off, A 8 MiB / B 64 MiB. Usage: bash .carry/run38.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null && echo "restored data/gsm8k_train.jsonl from git"
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 60 $B/tests/test_cuda_prefetch --gtest_color=no 2>&1 | grep -E "^\[  (PASSED|FAILED)"
timeout 60 $B/tests/test_cuda_forward --gtest_color=no --gtest_filter='*L2*:*Recorded*' 2>&1 | grep -E "^\[  (PASSED|FAILED)"
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_L2_PREFETCH_MB=0 \
  --slots 1,4 --per-iter 4 --repeats 2 --sdpa-timing graph --json $OUT/floor_on_off.json > $OUT/floor_on_off.md 2>&1
echo "floor on/off rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_on_off.md
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_L2_PREFETCH_MB=8 --b-env FLASHDLLM_L2_PREFETCH_MB=64 \
  --slots 1,4 --per-iter 4 --repeats 2 --sdpa-timing graph --json $OUT/floor_8_64.json > $OUT/floor_8_64.md 2>&1
echo "floor 8/64 rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_8_64.md
echo "elapsed $(( $(date +%s) - t0 )) s"
