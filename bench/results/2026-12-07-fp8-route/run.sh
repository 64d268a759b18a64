#!/bin/bash
# The FP8-GEMM route after the weight-scale stride fix, one device call (<= 600 s):
#  1. test_cuda_fp8: WeightScaleStrideProbe (the stride cuBLASLt reads at ceil(K/128) = 3) and the twins
#     of both routes (padded rows, K block counts 2, 3, 5);
#  2. the small LLaDA model's arith accuracy on CUDA, 1000 problems: bf16, --quantization fp8 on the
#     FP8-GEMM route (FLASHDLLM_FP8_DEQUANTIZE=0) and on the dequantising route (=1);
#  3. gemm_bench --fp8 at LLaDA-8B's layer shapes, 128 and 4096 rows: each product bf16 vs block-FP8,
#     and the activation quantisation pass;
#  4. the LLaDA-8B-shape Flash-Cache iteration, bf16 (A) vs --quantization fp8 on the FP8-GEMM route
#     (B), dummy weights, 32 and 1 slots (bench/iteration_floor.py, one repeat), within the time left.
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-fp8-route/run.sh <tree> <label>
PRELUDE_BUILD=0 LIMIT=560
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
prelude_build_targets test_cuda_fp8 flashdllm gemm_bench
build-gpu/tests/test_cuda_fp8 > /tmp/test_cuda_fp8.log 2>&1
echo "test_cuda_fp8 rc=$?"
grep -E "^\[ +(FAILED|PASSED|SKIPPED) |Failure|\[probe\] weight|rel max err" /tmp/test_cuda_fp8.log | head -30
cp /tmp/test_cuda_fp8.log "$OUT/"
for mode in bf16 fp8 fp8-dequant; do
  args=() v=1
  [[ $mode != bf16 ]] && args=(--quantization fp8)
  [[ $mode == fp8 ]] && v=0
  FLASHDLLM_FP8_DEQUANTIZE=$v timeout 60 build-gpu/flashdllm eval --task arith --device cuda "${args[@]}" --limit 1000 \
    --out "/tmp/eval-$mode" > "/tmp/eval-$mode.log" 2>&1
  echo "eval $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/eval-$mode/summary.md" | cut -c1-300)"
  cp "/tmp/eval-$mode/summary.json" "$OUT/eval-$mode.json" 2>/dev/null
done
timeout 120 build-gpu/bench/gemm_bench --fp8 --shapes qkv,attn_out,gate_up,down --tokens 128,4096 \
  --json "$OUT/gemm_fp8.json" > "$OUT/gemm_fp8.md" 2>&1
echo "gemm_bench rc=$? at $(($(date +%s) - t0)) s"
cat "$OUT/gemm_fp8.md"
echo "left $(left) s"
if (($(left) > 200)); then
  timeout $(($(left) - 10)) python3 bench/iteration_floor.py --a-bin build-gpu/flashdllm --b-args "--quantization fp8" \
    --b-env FLASHDLLM_FP8_DEQUANTIZE=0 --model data/llada-8b-instruct --slots 32,1 --repeats 1 \
    --json "$OUT/iteration_floor.json" 2>&1 | tail -25
fi
