#!/bin/bash
# Session 30, call 3: <commit> (one reader of FLASHDLLM_ROW_PADDING; bench/device_prelude.sh's first
# use): the verify pass against its floor at 32 slots (8B shape); the GPU tests; the embedded model at
# 32 slots with the default padding (replay counts); then, while time is left, the nsys pass split at 32
# slots, flash + verify (main pass lead-in after the re-rank changes).
# Usage: LIMIT=<s> bash run83.sh <tree> <label>
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 240 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" --slots 32 \
  --per-iter 4 --repeats 2 --verify-rows-per-slot 20 --json $OUT/floor_verify.json > $OUT/floor_verify.md 2>&1
echo "floor verify rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_verify.md
echo "elapsed $(( $(date +%s) - t0 )) s"
FLASHDLLM_GPU_CHECK_BUDGET=260 timeout 280 bash scripts/gpu_check.sh --tests-only > $OUT/gpu_check.log 2>&1
echo "gpu_check rc=$?"; grep -E "^\| " $OUT/summary.md; rm -f $OUT/batch_invariance*.json
python3 -c "
import json
with open('data/arith/test.jsonl') as f, open('/tmp/p512.txt', 'w') as o:
    for i, line in enumerate(f):
        if i == 512: break
        o.write(json.loads(line)['question'] + '\n')"
$B/flashdllm generate --device cuda --prompt-file /tmp/p512.txt --slots 32 --no-live --json --cache flash --verify > /tmp/v.json
python3 -c "
import json; d = json.load(open('/tmp/v.json')); print('embedded, 512 problems, verify, default padding: loops', d['layer_loops'])"
echo "elapsed $(( $(date +%s) - t0 )) s"
if (( $(left) > 120 )); then
  NS=/opt/nvidia/nsight-compute/2025.3.1/host
  timeout $(( $(left) - 5 )) python3 bench/gpu_gaps.py --nsys $NS/target-linux-x64/nsys \
    --importer $NS/linux-desktop-glibc_2_11_3-x64/QdstrmImporter --bin $B/flashdllm --slots 32 --gen 512 \
    --graph-trace graph --gen-args="--verify --verify-kept commits" --top 14 --json $OUT/gaps_s32_verify.json \
    > $OUT/gaps_s32_verify.md 2>&1
  echo "gaps rc=$?"; grep -v "^$" $OUT/gaps_s32_verify.md | head -40
fi
echo "elapsed $(( $(date +%s) - t0 )) s"
