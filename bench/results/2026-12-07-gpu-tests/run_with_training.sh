#!/bin/bash
# One device call doing two things at once: the small Dream model's training on the GPU in the
# background (bench/results/2026-12-07-dream-model/run.sh: Python, mostly GPU) while the C++ builds
# (CPU) and the twin tests (short GPU kernels) of run.sh run beside it. No timings are taken here.
# Usage (device tool, carry .carry): bash bench/results/2026-12-07-gpu-tests/run_with_training.sh <tree> <label> [budget]
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)" || exit 1
git ls-files -d -z | xargs -0 -r git checkout -- 2>/dev/null
mkdir -p "$OUT/dream"
OUT=$OUT/dream TRAIN_LIMIT=540 bash bench/results/2026-12-07-dream-model/run.sh "${3:-330}" > /tmp/dream_call.log 2>&1 &
train=$!
SM90_BUDGET=260 C80_BUDGET=200 bash bench/results/2026-12-07-gpu-tests/run.sh "$1" "$2"
wait $train
echo "== training"
cat /tmp/dream_call.log
