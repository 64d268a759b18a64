#!/bin/bash
# Session 22, call 5: scripts/gpu_check.sh --tests-only on main's final commit of the session.
# Usage: bash .carry/run57.sh <tree> <commit>
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
FLASHDLLM_GPU_CHECK_BUDGET=330 timeout 340 bash scripts/gpu_check.sh --tests-only > /tmp/check.log 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\| " $OUT/summary.md | head -30
