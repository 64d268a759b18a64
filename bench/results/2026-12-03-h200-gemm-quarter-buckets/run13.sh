#!/bin/bash
# GPU check of the default (tests, batch invariance, sanitizers), then the iteration floors at 1/16/32
# slots with Flash-Verify (commits). Usage (repo root): bash .carry/run13.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
OUT="$OUT/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-300} bash scripts/gpu_check.sh --tests-only > "$OUT/gpu_check.stdout" 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; grep -E '^\| ' "$OUT/check/summary.md"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
FLASHDLLM_GEMM_BUCKETS=pow2 timeout 60 $B/bench/batch_invariance --device cuda --json $OUT/batch_invariance_pow2.json > $OUT/bi_pow2.txt 2>&1
echo "batch_invariance pow2 rc=$?"; grep -i "identical" $OUT/bi_pow2.txt
timeout 240 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-1,16,32} --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor.md
