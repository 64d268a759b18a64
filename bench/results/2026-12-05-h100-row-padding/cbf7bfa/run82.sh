#!/bin/bash
# Session 30, call 2: <commit> with the row padding on by default. Build; the embedded model at 32
# slots, default vs FLASHDLLM_ROW_PADDING=0 (two runs each, flash + verify); the GPU tests; the 8B-shape
# floor table at 16 and 32 slots, default (A) vs FLASHDLLM_ROW_PADDING=0 (B) (LIMIT seconds in all).
# Usage: bash run82.sh <tree> <label> (labels results with <label> only if the tree matches)
set -u
# Ran on an NVIDIA H100 on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-05-h100-row-padding/cbf7bfa/run82.sh
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
python3 -c "
import json
with open('data/arith/test.jsonl') as f, open('/tmp/p512.txt', 'w') as o:
    for i, line in enumerate(f):
        if i == 512: break
        o.write(json.loads(line)['question'] + '\n')"
mkdir -p /tmp/small
run() {  # label, env, args
  local label=$1 envs=$2; shift 2
  local s=$(date +%s.%N)
  env $envs $B/flashdllm generate --device cuda --prompt-file /tmp/p512.txt --slots 32 --no-live --json "$@" > /tmp/small/$label.json 2>/tmp/err_$label.log || { echo "$label failed"; tail -3 /tmp/err_$label.log; }
  local e=$(date +%s.%N)
  python3 - "/tmp/small/$label.json" "$label" "$s" "$e" <<'PY' | tee -a $OUT/small_runs.txt
import json, sys
d = json.load(open(sys.argv[1])); wall = float(sys.argv[4]) - float(sys.argv[3])
toks = sum(r["generated_tokens"] for r in d["results"]); nfe = sum(r["nfe"] for r in d["results"])
it = d["iterations"]
print(f"{sys.argv[2]:>16}: wall {wall:5.2f} s (incl. load {d['load_seconds']:.2f}), {toks} tokens, nfe {nfe}, "
      f"admission it median {it['admission']['median_ms']:.3f} ms (n {it['admission']['count']}), "
      f"decode it median {it['decode']['median_ms']:.3f} ms (n {it['decode']['count']}), loops {d['layer_loops']}")
PY
}
for rep in 1 2; do
  run verify_default$rep "" --cache flash --verify; run verify_pad0_$rep "FLASHDLLM_ROW_PADDING=0" --cache flash --verify
  run flash_default$rep "" --cache flash; run flash_pad0_$rep "FLASHDLLM_ROW_PADDING=0" --cache flash
done
python3 - <<'PY' | tee -a $OUT/small_runs.txt
import json
L = lambda n: json.load(open(f"/tmp/small/{n}.json"))["results"]
for a, b in (("verify_default1", "verify_pad0_1"), ("flash_default1", "flash_pad0_1"), ("verify_default1", "verify_default2")):
    ra, rb = L(a), L(b)
    print(a, "vs", b, "same output ids:", sum(x["output_ids"] == y["output_ids"] for x, y in zip(ra, rb)), "of", len(ra))
PY
echo "elapsed $(( $(date +%s) - t0 )) s"
FLASHDLLM_GPU_CHECK_BUDGET=300 timeout 320 bash scripts/gpu_check.sh --tests-only > $OUT/gpu_check.log 2>&1
echo "gpu_check rc=$?"; grep -E "^\| " $OUT/summary.md; rm -f $OUT/*.json
echo "elapsed $(( $(date +%s) - t0 )) s"
if (( $(left) > 90 )); then
  timeout $(( $(left) - 5 )) python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_ROW_PADDING=0 --slots 32,16 \
    --per-iter 4 --repeats 1 --json $OUT/floor_pad.json > $OUT/floor_pad.md 2>&1
  echo "floor rc=$?"; grep -E "^\| [0-9]|^measured" $OUT/floor_pad.md
fi
echo "elapsed $(( $(date +%s) - t0 )) s"
