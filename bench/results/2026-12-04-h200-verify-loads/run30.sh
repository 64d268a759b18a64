#!/bin/bash
# Session 19, call 3: <commit> only: iteration floor at 1/16/32 slots (A flash, B flash + verify, kept
# commits; 2 repeats) and the pass breakdown at 32 slots. Usage: bash .carry/run30.sh <tree> <commit>
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
timeout 300 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor.md
timeout 90 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots 32 --json $OUT/pass_breakdown_s32.json > $OUT/pass_breakdown_s32.md 2>&1
echo "pass breakdown rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/pass_breakdown_s32.md
echo "elapsed $(( $(date +%s) - t0 )) s"
