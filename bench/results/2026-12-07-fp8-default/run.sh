#!/bin/bash
# The FP8-GEMM route as sm_90's default, one device call (<= 600 s):
#  1. test_cuda_fp8 (the default route = the FP8 GEMM, and the dequantising route), now with split-K
#     algorithms allowed and the vectorised activation quantiser;
#  2. the small LLaDA model's arith accuracy on CUDA, 1000 problems: bf16 and --quantization fp8 (default route);
#  3. gemm_bench --fp8 at LLaDA-8B's layer shapes, 128 and 4096 rows;
#  4. the LLaDA-8B-shape Flash-Cache iteration, bf16 (A) vs --quantization fp8 (B), 32 and 1 slots;
#  5. gemm_bench at Dream-7B's shapes (issue 46: each product's own rate against the floor's 8192^3
#     peak), 128 / 2048 / 4096 rows, with the first 8 heuristic candidates timed (--tune 8).
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-fp8-default/run.sh <tree> <label>
PRELUDE_BUILD=0 LIMIT=570
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
prelude_build_targets test_cuda_fp8 flashdllm gemm_bench
build-gpu/tests/test_cuda_fp8 > /tmp/test_cuda_fp8.log 2>&1
echo "test_cuda_fp8 rc=$?"
grep -E "^\[ +(FAILED|PASSED|SKIPPED) |Failure|\[probe\] weight|rel max err [0-9.e-]+ >" /tmp/test_cuda_fp8.log | head -30
cp /tmp/test_cuda_fp8.log "$OUT/"
for mode in bf16 fp8; do
  args=()
  [[ $mode == fp8 ]] && args=(--quantization fp8)
  timeout 60 build-gpu/flashdllm eval --task arith --device cuda "${args[@]}" --limit 1000 --out "/tmp/eval-$mode" \
    > "/tmp/eval-$mode.log" 2>&1
  echo "eval $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/eval-$mode/summary.md" | cut -c1-300)"
  cp "/tmp/eval-$mode/summary.json" "$OUT/eval-$mode.json" 2>/dev/null
done
timeout 120 build-gpu/bench/gemm_bench --fp8 --shapes qkv,attn_out,gate_up,down --tokens 128,4096 \
  --json "$OUT/gemm_fp8.json" > "$OUT/gemm_fp8.md" 2>&1
echo "gemm_bench rc=$? at $(($(date +%s) - t0)) s"
cat "$OUT/gemm_fp8.md"
echo "left $(left) s"
if (($(left) > 230)); then
  timeout $(($(left) - 60)) python3 bench/iteration_floor.py --a-bin build-gpu/flashdllm --b-args "--quantization fp8" \
    --model data/llada-8b-instruct --slots 32,1 --repeats 1 --json "$OUT/iteration_floor.json" 2>&1 | tail -12
fi
if (($(left) > 40)); then
  timeout $(($(left) - 10)) build-gpu/bench/gemm_bench --model-config data/dream-v0-instruct-7b/config.json \
    --shapes qkv,attn_out,gate_up,down --tokens 128,2048,4096 --tune 8 --json "$OUT/gemm_dream.json" \
    > "$OUT/gemm_dream.md" 2>&1
  echo "gemm_bench dream rc=$?"
  cat "$OUT/gemm_dream.md"
fi
