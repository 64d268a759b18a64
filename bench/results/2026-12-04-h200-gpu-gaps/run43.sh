#!/bin/bash
# Session 20, call 8: <commit>: bench/gpu_gaps.py (Nsight Compute's bundled target nsys + QdstrmImporter, libdw/libelf
# from Debian's libdw1/libelf1 carried) at 32 slots, flash + verify and flash only.
# Usage: bash .carry/run43.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null); git reset -q 2>/dev/null
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
NS=/opt/nvidia/nsight-compute/2025.3.1/host; G="--nsys $NS/target-linux-x64/nsys --importer $NS/linux-desktop-glibc_2_11_3-x64/QdstrmImporter"
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=$PWD/.carry/dw:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 70 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --gen-args="--verify --verify-kept commits" \
  --json $OUT/gaps_s32_verify.json > $OUT/gaps_s32_verify.md 2>&1; echo "s32 verify rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/gaps_s32_verify.md | head -22
timeout 50 python3 bench/gpu_gaps.py $G --bin $B/flashdllm --slots 32 --json $OUT/gaps_s32_flash.json > $OUT/gaps_s32_flash.md 2>&1
echo "s32 flash rc=$? at $(( $(date +%s) - t0 )) s"; head -16 $OUT/gaps_s32_flash.md
echo "elapsed $(( $(date +%s) - t0 )) s"
