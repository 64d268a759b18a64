#!/bin/bash
# Issue 46's Dream-7B targets on one GPU: the Flash-Cache iteration against its floor at 1/16/32/64
# slots (bench/iteration_floor.py at the Dream-v0-Instruct-7B shape from its real config/index, dummy
# bf16 weights, 250-token prompts, gen 512, forced 8 commits per iteration), then 128 slots x
# (512-token prompt + gen 512) = 1,152-position slots through one run for the memory fit.
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-dream-7b-floor/run.sh <tree> <label>
BUILD_BUDGET=330
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
M=data/dream-v0-instruct-7b
python3 bench/iteration_floor.py --a-bin $B/flashdllm --model $M --slots 1,16,32,64 --repeats 2 \
  --json "$OUT/dream_floor.json" 2>&1 | tee "$OUT/dream_floor.md" | tail -25
mapfile -t pa < <(python3 bench/synthetic_prompt_args.py 512 128)
/usr/bin/time -v $B/flashdllm generate -m $M --load-format dummy --device cuda --gen-length 512 --json --no-live \
  --cache flash --forced-schedule 8 --slots 128 "${pa[@]}" > "$OUT/dream_128x1152.json" 2> /tmp/fit.err
echo "128-slot run rc=$?"
tail -5 /tmp/fit.err
python3 - "$OUT/dream_128x1152.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
it = d["iterations"]
print("results", len(d["results"]), "decode median ms", it["decode"]["median_ms"], "peak_memory_bytes",
      d.get("peak_memory_bytes"), {k: v for k, v in d.items() if "mem" in k or "kv" in k.lower()})
PY
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
