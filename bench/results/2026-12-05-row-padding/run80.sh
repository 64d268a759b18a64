#!/bin/bash
# Session 29 (not run: no machine): row padding (FLASHDLLM_ROW_PADDING=1) on the GPU. Build; the graph
# tests; the embedded model, 512 problems, 32 slots, padded / exact rows / padded without graphs;
# then the GPU tests while time is left (LIMIT seconds in all).
# Usage: bash run80.sh <tree> <label> (labels results with <label> only if the tree matches)
set -u
# Written on 2026-12-05 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as written:
# git show 6ce2943:bench/results/2026-12-05-row-padding/run80.sh
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
python3 -c "
import json
with open('data/arith/test.jsonl') as f, open('/tmp/p512.txt', 'w') as o:
    for i, line in enumerate(f):
        if i == 512: break
        o.write(json.loads(line)['question'] + '\n')"
run() {  # label, env, args
  local label=$1 envs=$2; shift 2
  local s=$(date +%s.%N)
  env $envs $B/flashdllm generate --device cuda --prompt-file /tmp/p512.txt --slots 32 --no-live --json "$@" > $OUT/small_$label.json 2>/tmp/err_$label.log || { echo "$label failed"; tail -3 /tmp/err_$label.log; }
  local e=$(date +%s.%N)
  python3 - "$OUT/small_$label.json" "$label" "$s" "$e" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); wall = float(sys.argv[4]) - float(sys.argv[3])
toks = sum(r["generated_tokens"] for r in d["results"]); nfe = sum(r["nfe"] for r in d["results"])
it = d["iterations"]["decode"]
print(f"{sys.argv[2]:>22}: wall {wall:6.2f} s, {toks / wall:8.0f} tokens/s (incl. load), decode it mean {it['mean_ms']:.3f} ms "
      f"median {it['median_ms']:.3f}, nfe {nfe}, loops {d['layer_loops']}")
PY
}
timeout 60 $B/tests/test_cuda_forward --gtest_filter='*LayerLoopsReplay*:*GraphsDoNotChange*:*RecordedLayerLoop*' > $OUT/test_cuda_forward_graphs.txt 2>&1
echo "test_cuda_forward (graphs) rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" $OUT/test_cuda_forward_graphs.txt | sort -u
run verify_pad1 "FLASHDLLM_ROW_PADDING=1" --cache flash --verify
run verify_nopad1 "FLASHDLLM_ROW_PADDING=0" --cache flash --verify
echo "elapsed $(( $(date +%s) - t0 )) s"
if (( $(left) > 60 )); then
  timeout 60 $B/tests/test_cuda_verify > $OUT/test_cuda_verify.txt 2>&1; echo "test_cuda_verify rc=$?"; tail -1 $OUT/test_cuda_verify.txt
  timeout 60 $B/tests/test_cuda_forward > $OUT/test_cuda_forward.txt 2>&1; echo "test_cuda_forward rc=$?"; tail -1 $OUT/test_cuda_forward.txt
fi
if (( $(left) > 40 )); then run flash_pad1 "FLASHDLLM_ROW_PADDING=1" --cache flash; run flash_nopad1 "FLASHDLLM_ROW_PADDING=0" --cache flash; fi
if (( $(left) > 40 )); then run verify_nographs "FLASHDLLM_ROW_PADDING=1 FLASHDLLM_CUDA_GRAPHS=0" --cache flash --verify; fi
python3 - $OUT <<'PY'
import json, os, sys
o = sys.argv[1]
for a, b in (("flash_pad1", "flash_nopad1"), ("verify_pad1", "verify_nopad1"), ("verify_pad1", "verify_nographs")):
    if not (os.path.exists(f"{o}/small_{a}.json") and os.path.exists(f"{o}/small_{b}.json")): continue
    ra = json.load(open(f"{o}/small_{a}.json"))["results"]; rb = json.load(open(f"{o}/small_{b}.json"))["results"]
    print(a, "vs", b, "same output ids:", sum(x["output_ids"] == y["output_ids"] for x, y in zip(ra, rb)), "of", len(ra))
PY
if (( $(left) > 120 )); then
  FLASHDLLM_GPU_CHECK_BUDGET=$(( $(left) - 15 )) timeout $(( $(left) - 10 )) bash scripts/gpu_check.sh --tests-only > $OUT/gpu_check.log 2>&1
  echo "gpu_check rc=$?"; grep -E "^\| " $OUT/summary.md
fi
echo "elapsed $(( $(date +%s) - t0 )) s"
