#!/bin/bash
# Staged / bulk-copy fused QKV epilogues: build, qkv twin tests over every tile (FLASHDLLM_QKV=fused:<tile>),
# memcheck + racecheck of the small qkv tests, qkv_bench (every tile x walk, bare GEMM, unfused),
# iterations default vs forced tiles.
# Usage (repo root): bash .carry/run5.sh <expected tree hash> <commit> [floor tiles, comma-separated]
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-qkv-epilogues/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu -j16 --target qkv_bench >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
rc=0
for t in test_cuda_ops test_cuda_forward; do
  timeout 150 $B/tests/$t > $OUT/$t.log 2>&1; r=$?; echo "$t rc=$r $(grep -E '^\[  (PASSED|FAILED) ' $OUT/$t.log | tr '\n' ' ')"
  [[ $r == 0 ]] || { rc=1; grep -B3 -A12 "Failure\|FAILED" $OUT/$t.log | head -60; }
done
grep -E "note" $OUT/test_cuda_ops.log | sort | uniq -c | head
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
timeout 120 $CS --tool memcheck $B/tests/test_cuda_ops --gtest_filter='*Qkv*small' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tr '\n' ' '; echo
timeout 120 $CS --tool racecheck $B/tests/test_cuda_ops --gtest_filter='*QkvRopeStoreMatchesCpu*small' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | tr '\n' ' '; echo
echo "checks done $(( $(date +%s) - t0 )) s"
timeout 200 $B/bench/qkv_bench --slots 1,2,4,8,16,32,64 --prefill-tokens 256,1024,2048,4096,8192 --iters 10 \
  --json $OUT/qkv_bench.json > $OUT/qkv_bench.txt 2>&1; echo "qkv_bench rc=$?"
python3 - $OUT/qkv_bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    us = r["us"]; g = us["gemm"]; best = {}
    for k, v in us.items():
        if k.startswith("fused ") and k != "fused auto":
            t = k.split()[1]; best[t] = min(best.get(t, 1e9), v)
    print(r["shape"], r["T"], "gemm %.1f unf %.3f" % (g, us["unfused"] / g),
          " ".join("%s %.3f" % (t, v / g) for t, v in best.items()), "auto %.3f" % (us["fused auto"] / g))
PY
echo "bench done $(( $(date +%s) - t0 )) s"
for tile in $(echo "${3:-}" | tr ',' ' '); do
  timeout 100 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_QKV=fused:$tile --slots 1,16,32 \
    --repeats 1 --json $OUT/floor_default_vs_fused_$tile.json > $OUT/floor_$tile.log 2>&1; echo "floor $tile rc=$?"; tail -6 $OUT/floor_$tile.log
done
echo "elapsed $(( $(date +%s) - t0 )) s"
exit $rc
