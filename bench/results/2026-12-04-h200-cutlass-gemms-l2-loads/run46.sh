#!/bin/bash
# wsgemm: the weight-streaming GEMM's tiles incl. the swapped split-K form. Build, test_cuda_gemm, memcheck + racecheck,
# gemm_bench --stream at 16/64/128 rows, then iteration floor A (off) / B (best swap tile, N <= 4096) and
# A / C (best swap tile, all shapes) at 1 slot.
# Usage: bash .carry/run46.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-cutlass-gemms-l2-loads/run46.sh
BUILD_BUDGET=300  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 150 $B/tests/test_cuda_gemm --gtest_color=no > /tmp/g.txt 2>&1; echo "test_cuda_gemm rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|row |tile " /tmp/g.txt | head -16
cp /tmp/g.txt $OUT/test_cuda_gemm.txt
timeout 150 $B/bench/gemm_bench --shapes qkv,attn_out,gate_up,down --tokens 16,128 --stream --json $OUT/stream_bench.json \
  > $OUT/stream_bench.md 2>&1; echo "gemm_bench rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^\| (shape|qkv|attn_out|gate_up|down) \| 128 " $OUT/stream_bench.md | grep -E "shape|cuBLAS|auto|n64c4|\| 1 \|"
tile=$(python3 - $OUT/stream_bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
tot = {}
for r in d["results"]:
    if r["T"] == 128 and r["shape"] in ("attn_out", "down"):
        best = {}
        for s in r.get("stream", []):
            if s["tile"].startswith("swap"):
                best[s["tile"]] = min(best.get(s["tile"], 1e9), s["median_us"])
        for k, v in best.items(): tot[k] = tot.get(k, 0.0) + v
print(min(tot, key=tot.get) if tot else "swapc1")
PY
)
echo "best swap tile at 128 rows (attn_out + down): $tile"
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 86 --print-limit 10 $B/tests/test_cuda_gemm --gtest_color=no \
    --gtest_filter='*StreamGemm*' > /tmp/san.txt 2>&1; echo "$tool rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|SUMMARY" /tmp/san.txt | head -3
done
FLASHDLLM_GEMM_STREAM=$tile:4096 timeout 60 $B/bench/batch_invariance -m models/llada-arith-12m --device cuda --prompts 64 --slots 32 \
  > /tmp/bi.txt 2>&1; echo "batch_invariance (stream $tile:4096) rc=$?"; grep -E "identical" /tmp/bi.txt
for b in "$tile:4096" "$tile"; do
  timeout 150 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_GEMM_STREAM=$b --slots 1 --per-iter 4 \
    --repeats 3 --json $OUT/floor_stream_${b/:/_}.json > $OUT/floor_stream_${b/:/_}.md 2>&1; echo "floor B=$b rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "^\||measured" $OUT/floor_stream_${b/:/_}.md
done
echo "elapsed $(( $(date +%s) - t0 )) s"
