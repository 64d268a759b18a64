#!/bin/bash
# First GPU run of LLaDA-MoE on CUDA (QK-norm in rope_store, moe_route, moe_experts: branch moecuda)
# and of gemm_bench at Dream-7B's shapes:
#   1. test_cuda_moe (twins, the 7B-A1B expert shape, the golden forward + verify, graph replay);
#   2. test_cuda_verify, test_cuda_gqa, test_cuda_attention, test_cuda_forward (the verify tile's
#      source rows for Dream: branch dreamverify; Dream's bias path in rope_store was refactored), and
#      dream_a through the CLI with Flash-Cache and Flash-Verify on both devices;
#   3. the tiny LLaDA-MoE golden through the CLI on CUDA (reference attention: head_dim 64) against
#      the CPU, LLaDA's sampler / Flash-Cache / Flash-Verify;
#   4. gemm_bench --model-config data/dream-v0-instruct-7b/config.json at the Flash-Cache row counts.
# Each test binary gets at most 40 s (the session's device time was nearly spent).
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-moe-cuda/run.sh <tree> <label>
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
timeout 40 $B/tests/test_cuda_moe 2>&1 | tee "$OUT/test_cuda_moe.log" | grep -E "^\[  (PASSED|FAILED|  OK|  FAILED|  SKIPPED) |Failure|error|Expected|Which is|actual" | head -60
for t in test_cuda_verify test_cuda_gqa test_cuda_attention test_cuda_forward; do
  f='*'
  [[ $t == test_cuda_attention ]] && f='*Small*:*Verify*:*verify*'  # the device budget: the small shapes
  timeout 40 $B/tests/$t --gtest_filter="$f" > "$OUT/$t.log" 2>&1
  echo "$t rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \]|Failure$" "$OUT/$t.log" | head -8
done
for args in "--cache flash" "--cache flash --verify"; do
  for dev in cuda cpu; do
    o=$(FLASHDLLM_ATTENTION=reference $B/flashdllm generate --device $dev -m tests/data/golden/dream_a --prompt-ids 5,6,7,8 --gen-length 32 \
      --no-live $args --json 2>&1)
    echo "dream_a $dev $args: $(echo "$o" | python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):]); r=j["results"][0]; print(r["output_ids"], "nfe", r["nfe"])' 2>/dev/null || echo "$o" | tail -2)"
  done
done
for args in "--cache none" "--cache flash" "--cache flash --verify"; do
  for dev in cuda cpu; do
    o=$(FLASHDLLM_ATTENTION=reference $B/flashdllm generate --device $dev -m tests/data/golden/llada_moe_a \
      --prompt-ids 5,6,7,8 --gen-length 32 --no-live $args --json 2>&1)
    echo "moe_a $dev $args: $(echo "$o" | python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):]); r=j["results"][0]; print(r["output_ids"], "nfe", r["nfe"])' 2>/dev/null || echo "$o" | tail -2)"
  done
done
$B/bench/gemm_bench --model-config data/dream-v0-instruct-7b/config.json --tokens 128,2048,4096,8192 \
  --peak-tflops 989.4 --peak-gbps 4800 2>&1 | tee "$OUT/gemm_dream.md" | tail -30
nvidia-smi --query-gpu=name --format=csv,noheader
# what the training pipeline (tools/train/run.sh) needs from this machine's Python
python3 -c 'import sys, torch, tokenizers, safetensors, jinja2, matplotlib, numpy; print(sys.version.split()[0], torch.__version__, tokenizers.__version__, "train deps ok")' 2>&1 | tail -1
