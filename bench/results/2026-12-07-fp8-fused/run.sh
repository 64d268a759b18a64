#!/bin/bash
# The 16-byte activation quantiser and the SwiGLU-fused down-projection input, one device call (<= 520 s),
# in order of what matters if time runs out:
#  1. test_cuda_fp8 (the quantisers bit for bit against the CPU, swiglu_matmul_fp8 against swiglu +
#     matmul_fp8, both routes);
#  2. gemm_bench --fp8 at LLaDA-8B's layer shapes, 128 and 4096 rows (the quantisation pass's time,
#     CUTLASS's block-scaled FP8 GEMM beside cuBLASLt's);
#  3. the LLaDA-8B-shape Flash-Cache iteration, bf16 (A) vs --quantization fp8 (B), 32 and 1 slots;
#  4. moe_bench: LLaDA-MoE-7B's layer, the grouped experts vs one cuBLASLt GEMM per expert (issue 47);
#  5. the small LLaDA model's arith accuracy on CUDA, 1000 problems, --quantization fp8;
#  6. the op profile of the FP8 iteration at 32 slots (generate --profile-ops);
#  7. tools/train/tests/test_moe.py (f5629d8's training-tool fixes, never run on torch).
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-fp8-fused/run.sh <tree> <label>
PRELUDE_BUILD=0 LIMIT=${RUN_LIMIT:-520}  # RUN_LIMIT: a shorter lease
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
prelude_build_targets test_cuda_fp8 flashdllm gemm_bench moe_bench
echo "built at $(($(date +%s) - t0)) s on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
build-gpu/tests/test_cuda_fp8 > /tmp/test_cuda_fp8.log 2>&1
echo "test_cuda_fp8 rc=$?"
grep -E "^\[ +(FAILED|PASSED|SKIPPED) |Failure|rel max err [0-9.e-]+ >" /tmp/test_cuda_fp8.log | head -30
cp /tmp/test_cuda_fp8.log "$OUT/"
timeout 120 build-gpu/bench/gemm_bench --fp8 --shapes qkv,attn_out,gate_up,down --tokens 128,4096 \
  --json "$OUT/gemm_fp8.json" > "$OUT/gemm_fp8.md" 2>&1
echo "gemm_bench rc=$? at $(($(date +%s) - t0)) s"
cat "$OUT/gemm_fp8.md"
if (($(left) > 200)); then
  timeout $(($(left) - 150)) python3 bench/iteration_floor.py --a-bin build-gpu/flashdllm --b-args "--quantization fp8" \
    --model data/llada-8b-instruct --slots 32,1 --repeats 1 --json "$OUT/iteration_floor.json" 2>&1 | tail -12
fi
echo "left $(left) s"
if (($(left) > 150)); then
  timeout 40 build-gpu/bench/moe_bench --json "$OUT/moe_bench.json" > "$OUT/moe_bench.md" 2>&1
  echo "moe_bench rc=$?"
  cat "$OUT/moe_bench.md"
fi
if (($(left) > 120)); then
  timeout 60 build-gpu/flashdllm eval --task arith --device cuda --quantization fp8 --limit 1000 --out /tmp/eval-fp8 \
    > /tmp/eval-fp8.log 2>&1
  echo "eval fp8 rc=$? at $(($(date +%s) - t0)) s: $(tail -1 /tmp/eval-fp8/summary.md | cut -c1-300)"
  cp /tmp/eval-fp8/summary.json "$OUT/eval-fp8.json" 2>/dev/null
fi
if (($(left) > 75)); then
  mapfile -t prompts < <(python3 bench/synthetic_prompt_args.py 250 32)
  timeout 60 build-gpu/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda --gen-length 512 \
    --no-live --cache flash --forced-schedule 8 --slots 32 --quantization fp8 --profile-ops "${prompts[@]}" \
    > /tmp/profile.out 2> "$OUT/profile_fp8_32.txt"
  echo "profile rc=$?"
  grep -E "matmul|quant|swiglu|rmsnorm|attention|qkv|total" "$OUT/profile_fp8_32.txt" | head -30
fi
if (($(left) > 20)); then
  timeout $(($(left) - 5)) python3 -m pytest -q -p no:cacheprovider tools/train/tests/test_moe.py 2>&1 | tail -8
fi
echo "done at $(($(date +%s) - t0)) s"
