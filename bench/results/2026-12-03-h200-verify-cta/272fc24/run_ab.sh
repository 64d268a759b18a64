#!/bin/bash
# Same-machine A/B of the verify pass: 6bbf282 (64-row verify CTAs) vs <commit>. Usage: bash .carry/run22.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
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
