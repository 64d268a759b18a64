#!/bin/bash
# Session 18: gpu_check --tests-only, pass_breakdown at 32 and 1 slots, ncu sections of select_kernel,
# same-machine A/B of 9d7a2d5 (before the select / small-list changes) vs <commit> at 1 and 32 slots.
# Usage: bash .carry/run25.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-select-small-list/run25.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
OUT="/tmp/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-300} bash scripts/gpu_check.sh --tests-only > /tmp/gpu_check.stdout 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; cp /tmp/check/summary.md $OUT/gpu_check_summary.md; grep -E '^\| ' $OUT/gpu_check_summary.md
grep -hE "^\[  FAILED|Failure" /tmp/check/*.log 2>/dev/null | head -10
for s in 32 1; do
  timeout 100 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots $s --json /tmp/pb_s$s.json > $OUT/pass_breakdown_s$s.md 2>&1
  echo "pass breakdown $s rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/pass_breakdown_s$s.md
done
mapfile -t pa < <(python3 bench/synthetic_prompt_args.py 250 1)
for s in 1 32; do
  mapfile -t pa < <(python3 bench/synthetic_prompt_args.py 250 $s)
  timeout 60 ncu --kernel-name regex:select_kernel --launch-skip 20 --launch-count 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    $B/flashdllm generate -m data/llada-8b-instruct --load-format dummy --device cuda --gen-length 128 --json --no-live \
    --cache flash --forced-schedule 4 --slots $s "${pa[@]}" 2>&1 | grep -vE '^\{|^ *"|^\}|^\]' | tail -80 > /tmp/ncu_select_s$s.txt
  echo "ncu select $s rc=$? at $(( $(date +%s) - t0 )) s"
done
cat /tmp/ncu_select_s1.txt /tmp/ncu_select_s32.txt > $OUT/ncu_select.txt
git worktree add -f /tmp/old 9d7a2d5 > /dev/null 2>&1 && cp -r .deps /tmp/old/ && cp -r .carry /tmp/old/
(cd /tmp/old && FLASHDLLM_COMMIT=9d7a2d5 FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/oldbuild.log 2>&1) || { tail -20 /tmp/oldbuild.log; exit 1; }
echo "old built $(( $(date +%s) - t0 )) s"
timeout 200 python3 bench/iteration_floor.py --a-bin /tmp/old/build-gpu/flashdllm --b-bin $B/flashdllm \
  --slots 1,32 --per-iter 4 --repeats 2 --json $OUT/floor_ab.json > $OUT/floor_ab.md 2>&1
echo "floor ab rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured|^A|^B" $OUT/floor_ab.md
python3 - > $OUT/pass_breakdown.json <<'PY'
import json
print(json.dumps({s: json.load(open(f"/tmp/pb_s{s}.json")) for s in (1, 32)}, indent=1))
PY
echo "elapsed $(( $(date +%s) - t0 )) s"
