#!/bin/bash
# main with the item-fastest unit order + EVICT_NORMAL (session 26): gpu_check --tests-only (twins,
# sanitizers, batch invariance), window attention against cuDNN twice, iterations flash / + verify.
# Usage: bash .carry/run72.sh <tree> <label>
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
FLASHDLLM_GPU_CHECK_BUDGET=380 bash scripts/gpu_check.sh --tests-only > /tmp/gc.log 2>&1
echo "gpu_check rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^\| " $OUT/summary.md | head -30
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
for r in 1 2; do
  shapes=1:128:768,2:128:768,16:128:768,32:128:768; [[ $r == 2 ]] && shapes=16:128:768,32:128:768
  timeout 150 python3 bench/window_attention.py --bench $B/bench/attention_bench --shapes $shapes \
    --variants wgmma128,wgmma64 --json $OUT/window_attention_$r.json > $OUT/window_attention_$r.md 2>&1
  echo "window_attention $r rc=$?"; sed -n '/^| S | Q/,$p' $OUT/window_attention_$r.md | head -7
  rm -f $OUT/window_attention_$r.ours_tiles*.json
done
echo "window $(( $(date +%s) - t0 )) s"
timeout 250 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
