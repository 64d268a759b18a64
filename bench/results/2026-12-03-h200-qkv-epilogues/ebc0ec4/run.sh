#!/bin/bash
# ncu of the bulk-copy fused QKV kernel (128x256b) and of the same CUTLASS main loop with CUTLASS's TMA
# epilogue at T 4096; the embedded model's Flash-Cache vs Flash-Cache + Flash-Verify (flashdllm bench).
# Usage (repo root): bash .carry/run6.sh <expected tree hash> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-qkv-epilogues/ebc0ec4/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu -j16 --target qkv_bench >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
for t in test_cuda_ops test_cuda_forward; do
  timeout 150 $B/tests/$t > $OUT/$t.log 2>&1; r=$?; echo "$t rc=$r $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.log | tr '\n' ' ')"
  [[ $r == 0 ]] || grep -B3 -A12 "Failure\|FAILED" $OUT/$t.log | head -60
done
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
timeout 120 $CS --tool memcheck $B/tests/test_cuda_ops --gtest_filter='*Qkv*small' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tr '\n' ' '; echo
timeout 120 $CS --tool racecheck $B/tests/test_cuda_ops --gtest_filter='*QkvRopeStoreMatchesCpu*small' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | tr '\n' ' '; echo
echo "checks done $(( $(date +%s) - t0 )) s"
timeout 200 $B/flashdllm bench --device cuda -m models/llada-arith-12m --grid .carry/verify_grid.json --out $OUT/bench_small \
  > $OUT/bench_small.log 2>&1; echo "bench rc=$?"; cat $OUT/bench_small/summary.md 2>/dev/null | head -30 || tail -20 $OUT/bench_small.log
echo "bench done $(( $(date +%s) - t0 )) s"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats"
timeout 150 $NCU --kernel-name-base mangled --kernel-name 'regex:RopeStoreEpilogueILi128ELi256EEE' --launch-count 1 $S --section SourceCounters \
  $B/bench/qkv_bench --slots 32 --prefill-tokens 4096 --iters 1 --warmup 0 > $OUT/ncu_bulk.txt 2>&1; echo "ncu bulk rc=$?"
timeout 120 $NCU --kernel-name regex:device_kernel --launch-skip 9 --launch-count 1 $S \
  $B/bench/qkv_bench --slots 32 --prefill-tokens 4096 --iters 1 --warmup 0 > $OUT/ncu_ref.txt 2>&1; echo "ncu ref rc=$?"
for f in $OUT/ncu_bulk.txt $OUT/ncu_ref.txt; do
  grep -E "RopeStore|CollectiveEpilogue|Sm90TmaWarpSpecialized" $f | head -1 | cut -c1-200
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|L2 Hit|Registers Per|Shared Memory Config|Dynamic Shared|Stall|L1/TEX Hit|Mem Busy|Max Bandwidth" $f | head -24
done
echo "elapsed $(( $(date +%s) - t0 )) s"
