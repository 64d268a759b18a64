#!/bin/bash
# Second call on the same warm machine (build-gpu of run.sh's call kept): the 8B iteration bf16 vs FP8
# again with 2 repeats (run.sh had 1), and the Dream-7B-shape bf16 iteration's op profile at 32 slots
# (issue 46: where its 1.20x over the floor goes).
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-fp8-fused/run2.sh <tree> <label>
PRELUDE_BUILD=0 LIMIT=${RUN_LIMIT:-200}
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
prelude_build_targets flashdllm
timeout $(($(left) - 50)) python3 bench/iteration_floor.py --a-bin build-gpu/flashdllm --b-args "--quantization fp8" \
  --model data/llada-8b-instruct --slots 32,1 --repeats 2 --json "$OUT/iteration_floor_r2.json" 2>&1 | tail -6
echo "left $(left) s"
if (($(left) > 25)); then
  mapfile -t prompts < <(python3 bench/synthetic_prompt_args.py 250 32)
  timeout $(($(left) - 3)) build-gpu/flashdllm generate -m data/dream-v0-instruct-7b --load-format dummy --device cuda \
    --gen-length 512 --no-live --cache flash --forced-schedule 8 --slots 32 --profile-ops "${prompts[@]}" \
    > /tmp/profile.out 2> "$OUT/profile_dream_bf16_32.txt"
  echo "dream profile rc=$?"
  grep -A22 "op profile" "$OUT/profile_dream_bf16_32.txt" | head -24
fi
