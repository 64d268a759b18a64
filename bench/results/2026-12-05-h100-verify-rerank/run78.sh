#!/bin/bash
# Session 28: <commit> (host phase timers, radix re-rank, early re-rank during the verify pass):
# flash vs flash + verify at 32 slots with the verify floor and the per-pass host timers, then the
# 1/16/32-slot floor table (flash), then the GPU tests.
# Usage: bash .carry/run78.sh <tree> <label>
set -u
# Ran on an NVIDIA H100 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h100-verify-rerank/run78.sh
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
V="--verify --verify-kept commits"
timeout 240 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="$V" --slots 32 --per-iter 4 --repeats 2 \
  --verify-rows-per-slot 20 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_verify.md
python3 - "$OUT/floor_verify.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    for side, runs in r["runs"].items():
        for x in runs:
            print(side, {k: round(v, 3) for k, v in sorted(x["host_phase_ms"].items())})
PY
echo "elapsed $(( $(date +%s) - t0 )) s"
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --slots 1,16 --per-iter 8 --repeats 1 \
  --json $OUT/floor_1_16.json > $OUT/floor_1_16.md 2>&1
echo "floor 1/16 rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_1_16.md
echo "elapsed $(( $(date +%s) - t0 )) s"
remaining=$(( 560 - ($(date +%s) - t0) ))
if (( remaining > 60 )); then
  FLASHDLLM_GPU_CHECK_BUDGET=$remaining timeout $remaining bash scripts/gpu_check.sh --tests-only > $OUT/gpu_check.log 2>&1
  echo "gpu_check rc=$?"; tail -15 $OUT/gpu_check.log
fi
echo "elapsed $(( $(date +%s) - t0 )) s"
