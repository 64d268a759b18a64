#!/bin/bash
# Session 24, call 4: O staged through the warp buffer (fac8f26): gpu_check --tests-only, window attention vs cuDNN, iterations.
# Usage: bash .carry/run67.sh <tree> <label>
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
(OUT=/tmp/chk FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
mkdir -p $OUT/checks
(OUT=$OUT/checks timeout 240 bash scripts/gpu_check.sh --tests-only > /tmp/check.log 2>&1); echo "gpu_check rc=$?"
cp $OUT/checks/summary.md $OUT/gpu_check_summary.md 2>/dev/null; rm -rf $OUT/checks
grep -E "^\| (test_|batch|memcheck|racecheck|cuda_)" $OUT/gpu_check_summary.md | awk -F'|' '{print $2,$3,$4}'
echo "checks $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 130 python3 bench/window_attention.py --bench $B/bench/attention_bench --shapes 1:128:768,16:128:768,32:128:768 \
  --variants wgmma128,wgmma64 --json $OUT/window_attention.json > $OUT/window_attention.md 2>&1
echo "window_attention rc=$?"; sed -n '/^## Flash-Cache/,$p' $OUT/window_attention.md | head -10
rm -f $OUT/window_attention.ours_tiles*.json
echo "window $(( $(date +%s) - t0 )) s"
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,32 --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; tail -5 $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
