#!/bin/bash
# wsgemm: six tiles of the weight-streaming GEMM. Build, test_cuda_gemm, memcheck + racecheck, gemm_bench --stream
# at 16/64/128 rows, pick the tile with the least summed time at 128 rows, batch invariance with it, iteration floor
# A (off) / B (that tile) at 1 slot.
# Usage: bash .carry/run45.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-cutlass-gemms-l2-loads/run45.sh
BUILD_BUDGET=300  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 120 $B/tests/test_cuda_gemm --gtest_color=no > /tmp/g.txt 2>&1; echo "test_cuda_gemm rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|row |tile " /tmp/g.txt | head -16
cp /tmp/g.txt $OUT/test_cuda_gemm.txt
timeout 120 $B/bench/gemm_bench --shapes qkv,attn_out,gate_up,down --tokens 16,64,128 --stream --json $OUT/stream_bench.json \
  > $OUT/stream_bench.md 2>&1; echo "gemm_bench rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/stream_bench.md
tile=$(python3 - $OUT/stream_bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"] if isinstance(d, dict) and "results" in d else d
tot = {}
for r in rows:
    if r.get("tokens", r.get("T")) == 128 and "stream_us" in r:
        for k, v in r["stream_us"].items(): tot[k] = tot.get(k, 0.0) + v
print(min(tot, key=tot.get) if tot else "n32c4")
PY
)
echo "best tile at 128 rows: $tile"
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 86 --print-limit 10 $B/tests/test_cuda_gemm --gtest_color=no \
    --gtest_filter='*StreamGemm*' > /tmp/san.txt 2>&1; echo "$tool rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|SUMMARY" /tmp/san.txt | head -3
done
FLASHDLLM_GEMM_STREAM=$tile timeout 60 $B/bench/batch_invariance -m models/llada-arith-12m --device cuda --prompts 64 --slots 32 \
  > /tmp/bi.txt 2>&1; echo "batch_invariance (stream $tile) rc=$?"; grep -E "identical" /tmp/bi.txt
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_GEMM_STREAM=$tile --slots 1 --per-iter 4 \
  --repeats 3 --json $OUT/floor_stream.json > $OUT/floor_stream.md 2>&1; echo "floor rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^\||measured" $OUT/floor_stream.md
echo "elapsed $(( $(date +%s) - t0 )) s"
