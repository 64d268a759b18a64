#!/bin/bash
# Final GPU check of the wgmma default + window / prefill / iteration benchmarks (one build).
set -u
cd "$(dirname "$0")/.."
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz
FLASHDLLM_GPU_CHECK_BUDGET=330 bash scripts/gpu_check.sh --tests-only > /dev/null 2>&1
rc=$?
sed -n '/gpu_check summary/,$p' $OUT/summary.md | head -40
grep -B2 -A12 "FAILED\|Failure" $OUT/gpu_check.log | head -40
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
rm -f $OUT/batch_invariance_cudnn_all.json
cd bench
timeout 150 python3 window_attention.py --bench ../$B/bench/attention_bench --shapes 1:128:768,16:128:768,32:128:768,32:128:1280 \
  --variants m64n64,wgmma128 --json $OUT/window_attention.json > /tmp/win.log 2>&1
rm -f $OUT/window_attention.ours_tiles16.json
sed -n '/## Flash-Cache window/,$p' /tmp/win.log
cd ..
timeout 60 python3 bench/attention_vs_sdpa.py --bench $B/bench/attention_bench --seqlens 1024,2048 --batches 8 \
  --variants m64n64,wgmma,wgmma128,cudnn --json $OUT/prefill_attention.json > /tmp/prefill.log 2>&1
grep -E "^\| (m64n64|wgmma|cudnn|8) " /tmp/prefill.log
timeout 170 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_ATTENTION=m64n64 --slots 1,16,32 \
  --repeats 1 --json $OUT/floor_default_vs_m64n64.json > /tmp/floor.log 2>&1; tail -7 /tmp/floor.log
exit $rc
