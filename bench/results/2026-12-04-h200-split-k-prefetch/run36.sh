#!/bin/bash
# Session 20, call 1: <commit>: build, test_cuda_gemm + test_gemm_picks, gemm_bench split-K exploration at
# 128/160/640 rows, merged pick table (built-in + new), 1-slot pass breakdown A (built-in) / B (merged),
# cuDNN SDPA graph vs eager, iteration floor A/B at 1/16/32 slots with --sdpa-timing graph.
# Usage: bash .carry/run36.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-split-k-prefetch/run36.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
for t in test_cuda_gemm test_gemm_picks; do
  timeout 60 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s"; grep -E "^\[  (PASSED|FAILED) |Failure|split-K picks|Expected|Which is|served by" /tmp/$t.txt | head -12
done
timeout 150 $B/bench/gemm_bench --shapes qkv,attn_out,gate_up,down --tokens 128,160,640 --write-picks /tmp/split_picks.json \
  --pick-candidates 8 --split-k 2,3,4,6,8 --reductions compute,inplace --json $OUT/split_bench.json > $OUT/split_bench.md 2>&1
echo "gemm_bench rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\| |wrote" $OUT/split_bench.md
python3 - <<'PY'
import json, os
base = json.load(open("src/backend/cuda/gemm_picks/nvidia-h200.json"))
new = json.load(open("/tmp/split_picks.json"))["picks"]
key = lambda p: (p["rows"], p["N"], p["K"], p["out"], p["accumulate"])
keep = {key(p): p for p in base["picks"]}
for p in new: keep[key(p)] = p
base["picks"] = sorted(keep.values(), key=lambda p: (p["N"], p["K"], p["rows"]))
base["measured"]["split_k_from"] = "run36 gemm_bench --split-k"
json.dump(base, open("/tmp/merged.json", "w"), indent=1)
json.dump(base, open(os.environ["OUT"] + "/merged_picks.json", "w"), indent=1)
print("merged picks:", len(base["picks"]), "new:", [(p["shape"], p["rows"], p["candidate"], p.get("split_k", 0), p.get("reduction", "")) for p in new])
PY
for side in A B; do
  env=(); [[ $side == B ]] && env=(FLASHDLLM_GEMM_PICKS=/tmp/merged.json)
  env "${env[@]}" timeout 80 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots 1 --json /tmp/pb_$side.json > $OUT/pass_breakdown_s1_$side.md 2>&1
  echo "pass breakdown 1 slot $side rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "pass ms|GEMM" $OUT/pass_breakdown_s1_$side.md | head -6
done
timeout 60 python3 - <<'PY' 2>&1 | tee $OUT/sdpa_timing.txt
import sys; sys.path.insert(0, "bench")
import iteration_floor as f
for t in ("graph", "eager", "graph", "eager"):
    p, g, s, h = f.measure_device([(1, 128, 768), (16, 128, 768), (32, 128, 768)], 32, 128, 3, 10, t)
    print(t, {f"{k[0]}:{k[1]}:{k[2]}": round(v * 1e3, 2) for k, v in s.items()}, "us", h, f"gemm {p:.0f} TFLOP/s copy {g:.0f} GB/s", flush=True)
PY
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_GEMM_PICKS=/tmp/merged.json \
  --slots 1,16,32 --per-iter 4 --repeats 2 --sdpa-timing graph --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
