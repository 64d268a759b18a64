#!/usr/bin/env bash
# How much of a Flash-Cache generate call the GPU is busy (issue 13, "show the launch gaps"): runs the
# same generate twice, plainly (wall time from --json) and under Nsight Compute collecting only each
# kernel's duration (gpu__time_duration.sum; no cache flush, no clock lock), and bench/launch_gaps.py
# sums the kernels. wall - sum(kernels) is time the GPU idles between kernels: launch latency, host
# work and synchronisations, i.e. what CUDA graphs and fewer host round trips can win back.
#   bench/launch_gaps.sh               on the GPU machine; $OUT/launch_gaps.md + raw files
#   FLASHDLLM=build-gpu/flashdllm MODEL=data/llada-8b-instruct SLOTS="1 32" P=250 GENS="32 160" OUT=./out
# Dummy (random) weights at the model's shapes, P-token prompts, a forced schedule of 8 tokens per
# iteration (every request runs its whole canvas), at two canvas lengths: the difference between
# the two runs is what the extra iterations cost, without the first call's warm-up (cuBLASLt
# heuristics, module loading) and the admission prefill, which both runs share. Weight
# initialisation kernels (fill_*) run before generate and are left out of the sums.
set -euo pipefail
cd "$(dirname "$0")/.."
F="${FLASHDLLM:-build-gpu/flashdllm}"
MODEL="${MODEL:-data/llada-8b-instruct}"
OUT="${OUT:-./out}"
SLOTS="${SLOTS:-1 32}"
P="${P:-250}"
GENS="${GENS:-32 160}"  # two canvas lengths: their difference is steady-state decoding (no warm-up, no prefill)
mkdir -p "$OUT"
for s in $SLOTS; do
  for gen in $GENS; do
    args=(generate --device cuda -m "$MODEL" --load-format dummy --gen-length "$gen" --slots "$s" --forced-schedule 8
          --json)
    for ((i = 0; i < s; ++i)); do
      args+=(--prompt-ids "$(python3 -c "print(','.join(str(100 + (j * 7 + $i) % 1900) for j in range($P)))")")
    done
    "$F" "${args[@]}" > "$OUT/plain_s${s}_g$gen.json"
    ncu --csv --log-file "$OUT/ncu_s${s}_g$gen.csv" --print-kernel-base function --metrics gpu__time_duration.sum \
      --cache-control none --clock-control none "$F" "${args[@]}" > /dev/null
  done
done
python3 bench/launch_gaps.py "$OUT" "$GENS" $SLOTS | tee "$OUT/launch_gaps.md"
