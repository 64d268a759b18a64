#!/bin/bash
# The small MoE model beside the dense one on CUDA, every decoding mode, one device call (<= LIMIT s,
# default 190): `flashdllm eval --task arith --device cuda --limit 1000` on
# models/llada-moe-arith-12m and models/llada-arith-12m with the LLaDA sampler (steps 128, block 32),
# Fast-dLLM prefix and dual caches (threshold 0.9), the no-cache threshold decoder, Flash-Cache,
# Flash-Cache + Verify, and Flash-Cache with --quantization fp8 (dense only: MoE FP8 is refused).
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-moe-model/run_modes.sh <tree> <label>
PRELUDE_BUILD=0 LIMIT=${LIMIT:-190}
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 1
# The MoE weights travel in .carry/moe when the copy's git objects lack them (.carry/moe/model.safetensors).
[[ -f models/llada-moe-arith-12m/model.safetensors ]] || cp .carry/moe/model.safetensors models/llada-moe-arith-12m/ 2>/dev/null
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
prelude_build_targets flashdllm
mkdir -p /tmp/evals
for model in llada-moe-arith-12m llada-arith-12m; do
  for mode in prefix dual threshold flash-verify llada flash flash-fp8; do
    case $mode in
      llada) args=(--cache none --steps 128 --block-length 32) ;;
      prefix) args=(--cache prefix --threshold 0.9 --block-length 32) ;;
      dual) args=(--cache dual --threshold 0.9 --block-length 32) ;;
      threshold) args=(--cache none --threshold 0.9 --block-length 32) ;;
      flash) args=(--cache flash) ;;
      flash-verify) args=(--cache flash --verify) ;;
      flash-fp8) args=(--cache flash --quantization fp8) ;;
    esac
    [[ $model == llada-moe-arith-12m && $mode == flash-fp8 ]] && continue
    (($(left) > 20)) || break 2
    timeout $(($(left) - 10)) build-gpu/flashdllm eval -m "models/$model" --task arith --device cuda "${args[@]}" \
      --limit 1000 --out "/tmp/evals/$model-$mode" > "/tmp/evals/$model-$mode.log" 2>&1
    echo "$model $mode rc=$? at $(($(date +%s) - t0)) s: $(tail -1 "/tmp/evals/$model-$mode/summary.md" | cut -c1-260)"
  done
done
tar -C /tmp -czf "$OUT/evals.tgz" evals
