#!/bin/bash
# Session 27, call 1: main <commit>: where the verify pass's wall time goes at 32 slots (nsys gaps,
# flash + verify and flash) and the iteration floor at 32 slots (A flash, B flash + verify), 2 repeats.
# Usage: bash .carry/run73.sh <tree> <label>
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
NS=/opt/nvidia/nsight-compute/2025.3.1/host; G="--nsys $NS/target-linux-x64/nsys --importer $NS/linux-desktop-glibc_2_11_3-x64/QdstrmImporter"
(FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=$PWD/.carry/dw:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 80 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --gen-args="--verify --verify-kept commits" \
  --top 25 --json $OUT/gaps_s32_verify.json > $OUT/gaps_s32_verify.md 2>&1; echo "s32 verify rc=$? at $(( $(date +%s) - t0 )) s"; head -32 $OUT/gaps_s32_verify.md
timeout 60 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --top 20 --json $OUT/gaps_s32_flash.json > $OUT/gaps_s32_flash.md 2>&1
echo "s32 flash rc=$? at $(( $(date +%s) - t0 )) s"; head -26 $OUT/gaps_s32_flash.md
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 32 --per-iter 4 --repeats 2 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
