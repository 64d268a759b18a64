#!/bin/bash
# wsgemm: the wide CUTLASS GEMM (128x256 tiles, stream-K / persistent data-parallel) for verify-pass row counts.
# Build, test_cuda_gemm, memcheck, gemm_bench --stream at 640/1024/4096 rows, then flash vs flash+verify at 16/32 slots,
# default and with the better wide tile on 129-1024 rows (the verify passes; main passes have 2048/4096 rows).
# Usage: bash .carry/run47.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-cutlass-gemms-l2-loads/run47.sh
BUILD_BUDGET=300  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
timeout 150 $B/tests/test_cuda_gemm --gtest_color=no > /tmp/g.txt 2>&1; echo "test_cuda_gemm rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|row |tile " /tmp/g.txt | head -16
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 86 --print-limit 10 $B/tests/test_cuda_gemm --gtest_color=no \
  --gtest_filter='*StreamGemm*' > /tmp/san.txt 2>&1; echo "memcheck rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|SUMMARY" /tmp/san.txt | head -3
timeout 150 $B/bench/gemm_bench --shapes qkv,attn_out,gate_up,down --tokens 320,640,1024,4096 --stream --json $OUT/wide_bench.json \
  > $OUT/wide_bench.md 2>&1; echo "gemm_bench rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "wide|^\| shape \| T \| tile" $OUT/wide_bench.md
tile=$(python3 - $OUT/wide_bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
tot = {}
for r in d["results"]:
    if r["T"] in (320, 640):
        for s in r.get("stream", []):
            if s["tile"].startswith("wide"): tot[s["tile"]] = tot.get(s["tile"], 0.0) + s["median_us"]
print(min(tot, key=tot.get) if tot else "widesk")
PY
)
echo "better wide tile at 320 + 640 rows: $tile"
V="--verify --verify-kept commits"
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="$V" --slots 16,32 --per-iter 4 --repeats 2 \
  --json $OUT/verify_default.json > $OUT/verify_default.md 2>&1; echo "floor default rc=$? at $(( $(date +%s) - t0 )) s"
grep -E "^\||measured" $OUT/verify_default.md
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="$V" --b-env FLASHDLLM_GEMM_STREAM=$tile@129-1024 \
  --slots 16,32 --per-iter 4 --repeats 2 --json $OUT/verify_wide.json > $OUT/verify_wide.md 2>&1
echo "floor wide rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/verify_wide.md
echo "elapsed $(( $(date +%s) - t0 )) s"
