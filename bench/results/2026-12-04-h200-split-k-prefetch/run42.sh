#!/bin/bash
# Session 20, call 7: <commit>: ncu of cuBLASLt's GEMMs at one slot's 128 rows (gemm_bench, one launch per shape
# after two): duration, grid, cluster, occupancy, DRAM throughput. Usage: bash .carry/run42.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-split-k-prefetch/run42.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
for s in qkv attn_out gate_up down; do
  timeout 60 ncu --kernel-name regex:'nvjet|gemm|xmma|cutlass' --launch-skip 2 --launch-count 1 --cache-control all \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    $B/bench/gemm_bench --shapes $s --tokens 128 --iters 1 --warmup 2 > $OUT/ncu_gemm128_$s.txt 2>&1
  echo "ncu $s rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "nvjet|Duration|DRAM Throughput|Memory Throughput|Grid Size|Cluster Size|Block Size|Registers Per|Shared Memory Config|Achieved Occupancy|L2 Hit Rate|Waves Per SM|Compute \(SM\) Throughput|Max Bandwidth|Mem Busy" $OUT/ncu_gemm128_$s.txt | head -22
done
echo "elapsed $(( $(date +%s) - t0 )) s"
