#!/bin/bash
# Session 22, call 3: scripts/gpu_check.sh --tests-only on main with wgmma64 as the small-call default
# (every GPU twin test, sanitizers, batch invariance), then window attention vs PyTorch SDPA at 1/2/16/32 slots.
# Usage: bash .carry/run55.sh <tree> <commit>
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
OUT_ROOT=$OUT
OUT=$OUT_ROOT FLASHDLLM_GPU_CHECK_BUDGET=400 timeout 420 bash scripts/gpu_check.sh --tests-only > /tmp/check.log 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; tail -40 $OUT_ROOT/summary.md 2>/dev/null
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
timeout 90 python3 bench/window_attention.py --bench build-gpu/bench/attention_bench \
  --shapes 1:128:768,2:128:768,16:128:768,32:128:768 --variants wgmma128,wgmma64 --json $OUT_ROOT/window_attention.json \
  > $OUT_ROOT/window_attention.md 2>&1
echo "window rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT_ROOT/window_attention.md | tail -25
