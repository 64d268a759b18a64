#!/bin/bash
# GPU check of main after the merges of 2026-12-06 (variants, server, jinja, generic, Dream sampler,
# Dream caches, LLaDA-MoE on the CPU, GQA + q/k/v bias on CUDA: test_cuda_gqa):
# scripts/gpu_check.sh --tests-only (twin tests incl. CudaSelect.DreamRuleMatchesCpu, the bench-only
# attention tile shapes, cuDNN-all forward, memcheck, racecheck), then Dream's tiny golden checkpoint
# through the CLI on CUDA (Dream's sampler and Flash-Cache) next to the CPU's answer.
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-merge-check/run.sh <tree> <label>
PRELUDE_BUILD=0
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
FLASHDLLM_GPU_CHECK_BUDGET=560 OUT=$OUT bash scripts/gpu_check.sh --tests-only > /tmp/gc.log 2>&1
echo "gpu_check rc=$?"
grep -E "^\| " "$OUT/summary.md" | head -60
grep -E "FAILED|Failure" /tmp/gc.log | head -30
for args in "" "--cache flash"; do
  for dev in cuda cpu; do
    echo "### dream_a $dev $args"
    o=$(build-gpu/flashdllm generate --device $dev -m tests/data/golden/dream_a --prompt-ids 5,6,7,8 --gen-length 32 \
      --no-live $args --json 2>&1)
    echo "$o" | python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):]); r=j["results"][0]; print(r["output_ids"], r["nfe"])' 2>/dev/null ||
      echo "$o" | tail -3
  done
done
