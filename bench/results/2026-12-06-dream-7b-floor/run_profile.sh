#!/bin/bash
# Where the Dream-7B iteration spends its time against LLaDA-8B's (same binary, same call):
# `generate --profile-ops` (synchronising around every backend op) at 1 and 32 slots, 250-token
# prompts, gen 128, forced 8, Flash-Cache; the per-op tables go to $OUT/profile_<model>_<slots>.txt.
# Usage (device tool, carry .carry): bash bench/results/2026-12-06-dream-7b-floor/run_profile.sh <tree> <label>
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$1" "$2"
for m in dream-v0-instruct-7b llada-8b-instruct; do
  for s in 1 32; do
    mapfile -t pa < <(python3 bench/synthetic_prompt_args.py 250 $s)
    $B/flashdllm generate -m data/$m --load-format dummy --device cuda --gen-length 128 --no-live --cache flash \
      --forced-schedule 8 --slots $s --profile-ops "${pa[@]}" > /dev/null 2> "$OUT/profile_${m}_$s.txt"
    echo "### $m, $s slots (rc $?)"
    grep -v "^\[" "$OUT/profile_${m}_$s.txt" | head -40
  done
done
