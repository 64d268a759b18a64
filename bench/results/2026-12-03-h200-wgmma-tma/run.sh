#!/bin/bash
# Device run: GPU check (tests + sanitizers), window / prefill attention benches, iterations.
# Usage (repo root): bash .carry/run2.sh <expected tree hash> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-wgmma-tma/run.sh
# (ran as .carry/<name>.sh from the repository root)
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz
FLASHDLLM_GPU_CHECK_BUDGET=300 bash scripts/gpu_check.sh --tests-only > /dev/null 2>&1
rc=$?
sed -n '/gpu_check summary/,$p' $OUT/summary.md | head -40
grep -B2 -A12 "FAILED\|Failure" $OUT/gpu_check.log | head -40
rm -f $OUT/batch_invariance_cudnn_all.json
echo "check done rc=$rc $(( $(date +%s) - t0 )) s"
[[ -x $B/bench/attention_bench ]] || { echo "no bench binary"; exit 1; }
cd bench
timeout 120 python3 window_attention.py --bench ../$B/bench/attention_bench --shapes 1:128:768,16:128:768,32:128:768,32:128:1280 \
  --variants m64n64,wgmma,wgmma128 --json $OUT/window_attention.json > /tmp/win.log 2>&1
echo "window rc=$?"; rm -f $OUT/window_attention.ours_tiles16.json
grep -E "^\| (wgmma|wgmma128|m64n64) " /tmp/win.log | head -30
sed -n '/## Flash-Cache window/,$p' /tmp/win.log
cd ..
timeout 60 python3 bench/attention_vs_sdpa.py --bench $B/bench/attention_bench --seqlens 1024,2048 --batches 8 \
  --variants wgmma,wgmma128,cudnn --json $OUT/prefill_attention.json > /tmp/prefill.log 2>&1
echo "prefill rc=$?"; grep -E "^\| (m64n64|wgmma|wgmma128|cudnn|8) " /tmp/prefill.log
echo "elapsed $(( $(date +%s) - t0 )) s"

timeout 170 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_ATTENTION=m64n64 --slots 1,16,32 \
  --repeats 1 --json $OUT/floor_default_vs_m64n64.json > /tmp/floor.log 2>&1; echo "floor rc=$?"; tail -7 /tmp/floor.log
echo "elapsed $(( $(date +%s) - t0 )) s"
exit $rc
