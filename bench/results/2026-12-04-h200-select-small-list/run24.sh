#!/bin/bash
# Session 18: gpu_check --tests-only, pass_breakdown at 1 and 32 slots, floor at 1/16/32 slots (A flash,
# B flash + verify, kept commits). Usage: bash .carry/run24.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-select-small-list/run24.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OUT="/tmp/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-300} bash scripts/gpu_check.sh --tests-only > /tmp/gpu_check.stdout 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; cp /tmp/check/summary.md $OUT/gpu_check_summary.md; grep -E '^\| ' $OUT/gpu_check_summary.md
grep -E "FAILED|Failure|error" /tmp/check/*.log 2>/dev/null | head -20
for s in 32 1; do
  timeout 120 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots $s --json /tmp/pb_s$s.json > $OUT/pass_breakdown_s$s.md 2>&1
  echo "pass breakdown $s rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/pass_breakdown_s$s.md
done
python3 - > $OUT/pass_breakdown.json <<'PY'
import json
print(json.dumps({s: json.load(open(f"/tmp/pb_s{s}.json")) for s in (1, 32)}, indent=1))
PY
timeout 260 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-1,16,32} --per-iter 4 --repeats ${REPEATS:-1} --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
