#!/bin/bash
# Session 19, call 1: build, floor at 1/16/32 slots (A flash, B flash + verify, kept commits), the verify
# attention kernel in isolation (attention_bench) and under ncu with per-SASS-instruction counters.
# Usage: bash .carry/run28.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-verify-loads/run28.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 100 $B/bench/attention_bench --verify-shapes 32:20:750,16:20:750,1:20:750 --verify-ctas 2x2,2x3 --iters 20 \
  --json $OUT/verify_bench.json > $OUT/verify_bench.md 2>&1
echo "verify bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/verify_bench.md
for shape in 32:20:750 1:20:750; do
  tag=${shape%%:*}
  timeout 60 ncu --kernel-name regex:flash_attention_kernel --launch-skip 3 --launch-count 1 --import-source no \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section InstructionStats --section MemoryWorkloadAnalysis --section SourceCounters -o /tmp/ncu_v$tag -f \
    $B/bench/attention_bench --verify-shapes $shape --verify-ctas 2x3 --iters 2 --warmup 1 > /tmp/ncu_v$tag.log 2>&1
  echo "ncu $shape rc=$? at $(( $(date +%s) - t0 )) s"; tail -3 /tmp/ncu_v$tag.log
  ncu -i /tmp/ncu_v$tag.ncu-rep --page details > $OUT/ncu_verify_t$tag.txt 2>&1
  ncu -i /tmp/ncu_v$tag.ncu-rep --page source --csv --print-source sass > /tmp/sass_t$tag.csv 2>&1; xz -c /tmp/sass_t$tag.csv > $OUT/sass_t$tag.csv.xz
  cp /tmp/ncu_v$tag.ncu-rep $OUT/ 2>/dev/null
done
grep -E "Duration|Throughput|Warp Cycles|Issued Ipc|Registers|Achieved Occ" $OUT/ncu_verify_t32.txt | head -20
timeout 240 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
