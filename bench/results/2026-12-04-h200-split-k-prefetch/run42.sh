#!/bin/bash
# Session 20, call 7: <commit>: ncu of cuBLASLt's GEMMs at one slot's 128 rows (gemm_bench, one launch per shape
# after two): duration, grid, cluster, occupancy, DRAM throughput. Usage: bash .carry/run42.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null); git reset -q 2>/dev/null
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
for s in qkv attn_out gate_up down; do
  timeout 60 ncu --kernel-name regex:'nvjet|gemm|xmma|cutlass' --launch-skip 2 --launch-count 1 --cache-control all \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    $B/bench/gemm_bench --shapes $s --tokens 128 --iters 1 --warmup 2 > $OUT/ncu_gemm128_$s.txt 2>&1
  echo "ncu $s rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "nvjet|Duration|DRAM Throughput|Memory Throughput|Grid Size|Cluster Size|Block Size|Registers Per|Shared Memory Config|Achieved Occupancy|L2 Hit Rate|Waves Per SM|Compute \(SM\) Throughput|Max Bandwidth|Mem Busy" $OUT/ncu_gemm128_$s.txt | head -22
done
echo "elapsed $(( $(date +%s) - t0 )) s"
