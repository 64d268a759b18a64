#!/bin/bash
# Issue 50's GPU acceptance, call 2 (same warm machine as run1.sh, its build-gpu kept): every step of
# scripts/gpu_check.sh --tests-only on the refactored tree (twin tests, cuDNN-all forward, batch
# invariance, compute-sanitizer memcheck + racecheck), and the embedded model at 32 slots with and
# without Flash-Verify (answers and replayed layer loops), before (6ce2943, built by run1.sh) and after.
# Usage: LIMIT=<s> bash run2.sh <tree> <label>
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=330 timeout 350 bash scripts/gpu_check.sh --tests-only > $OUT/gpu_check.log 2>&1
echo "gpu_check rc=$?"; grep -E "^\| " $OUT/summary.md; rm -f $OUT/batch_invariance*.json
python3 -c "
import json
with open('data/arith/test.jsonl') as f, open('/tmp/p512.txt', 'w') as o:
    for i, line in enumerate(f):
        if i == 512: break
        o.write(json.loads(line)['question'] + '\n')"
for side in before after; do
  bin=$B/flashdllm; [[ $side == before ]] && bin=/tmp/before/build-gpu/flashdllm
  for v in "" "--verify"; do
    $bin generate --device cuda --prompt-file /tmp/p512.txt --slots 32 --no-live --json --cache flash $v > /tmp/$side$v.json
  done
done
python3 - <<'PY'
import json
for v in ["", "--verify"]:
    a, b = (json.load(open(f"/tmp/{s}{v}.json")) for s in ("before", "after"))
    ids = lambda d: [r.get("output_ids", r.get("ids")) for r in d["results"]] if "results" in d else None
    same = sum(x == y for x, y in zip(ids(a) or [], ids(b) or []))
    print(f"flash{v}: same answers {same}/{len(ids(a) or [])}; loops before {a.get('layer_loops')} after {b.get('layer_loops')}")
PY
echo "elapsed $(( $(date +%s) - t0 )) s"
