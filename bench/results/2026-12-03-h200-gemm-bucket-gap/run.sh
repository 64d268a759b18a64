#!/bin/bash
# Verify-sized GEMMs (bucket algorithm vs tuned exact-T candidates) and the 1-slot iteration floor.
# Usage (repo root): bash .carry/run11.sh <expected tree hash> <commit>
set -u
cd "$(dirname "$0")/.."
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 90 $B/bench/gemm_bench --tokens 256,384,512,640,768,1024 --shapes qkv,attn_out,gate_up,down --tune 8 --iters 10 \
  --json $OUT/gemm_bench.json > $OUT/gemm_bench.txt 2>&1; echo "gemm_bench rc=$?"; grep -E "^\|" $OUT/gemm_bench.txt | head -40
echo "gemm done $(( $(date +%s) - t0 )) s"
timeout 120 python3 bench/iteration_floor.py --a-bin $B/flashdllm --slots 1 --repeats 3 --json $OUT/floor_1slot.json \
  > $OUT/floor_1slot.md 2>&1; echo "floor rc=$?"; grep -E "^\|" $OUT/floor_1slot.md
echo "elapsed $(( $(date +%s) - t0 )) s"
