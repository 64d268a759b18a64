#!/bin/bash
# Verify attention CTA shapes (issue 13): gpu_check --tests-only, attention_bench --verify-shapes,
# ncu of the default shape, the verify pass at 1/16/32 slots. Usage: bash .carry/run19.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-verify-cta/0f0d3cf/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OUT="/tmp/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-300} bash scripts/gpu_check.sh --tests-only > /tmp/gpu_check.stdout 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; cp /tmp/check/summary.md $OUT/gpu_check_summary.md; grep -E '^\| |m.*verify' $OUT/gpu_check_summary.md
timeout 150 $B/bench/attention_bench --verify-shapes ${VSHAPES:-32:20:750,32:32:738,16:20:750,64:20:750} \
  --verify-ctas 1x1,2x2,2x3 --iters 20 --json $OUT/verify_bench.json > $OUT/verify_bench.md 2>&1
echo "verify bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/verify_bench.md
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 90 $NCU --kernel-name regex:flash_attention_kernel --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
  $B/bench/attention_bench --verify-shapes 32:20:750 --verify-ctas 2x3 --iters 2 --warmup 1 > $OUT/ncu_2x3.txt 2>&1
echo "ncu rc=$?"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per" $OUT/ncu_2x3.txt
timeout 330 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-1,16,32} --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
