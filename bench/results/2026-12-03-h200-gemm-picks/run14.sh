#!/bin/bash
# GEMM picks: measure a table (gemm_bench --write-picks), then the iteration floors without / with it
# and the verify pass with it. Usage (repo root): bash .carry/run14.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-gemm-picks/run14.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
FLASHDLLM_GPU_CHECK_BUDGET=150 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu --target test_gemm_picks > /dev/null 2>&1
echo "built $(( $(date +%s) - t0 )) s"
{ timeout 60 $B/tests/test_cuda_ops --gtest_filter='GemmPicks*:GemmBuckets*:*Matmul*'; timeout 30 $B/tests/test_gemm_picks; } > $OUT/tests.txt 2>&1
echo "tests rc=$?"; grep -E "PASSED|FAILED|SKIPPED \]" $OUT/tests.txt
timeout ${GEMM_T:-220} $B/bench/gemm_bench --tokens ${TOKENS:-16,20,24,28,32,40,48,56,64,80,96,112,128,160,192,224,256,320,384,448,512,640,768,896,1024,1280,1536,1792,2048,2560,3072,3584,4096,5120,6144,7168,8192} \
  --write-picks $OUT/picks.json --pick-candidates 8 --iters 10 --json $OUT/gemm_picks_bench.json > $OUT/gemm_picks_bench.txt 2>&1
echo "gemm_bench rc=$? at $(( $(date +%s) - t0 )) s"; tail -n 2 $OUT/gemm_picks_bench.txt
[[ -s $OUT/picks.json ]] || exit 1
timeout 150 python3 bench/iteration_floor.py --a-bin $B/flashdllm --a-env FLASHDLLM_GEMM_PICKS=off \
  --b-env FLASHDLLM_GEMM_PICKS=$OUT/picks.json --slots 1,16,32 --per-iter 4 --repeats 1 \
  --json $OUT/floor_picks.json > $OUT/floor_picks.md 2>&1
echo "floor picks rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_picks.md
FLASHDLLM_GEMM_PICKS=$OUT/picks.json timeout 90 python3 bench/iteration_floor.py --a-bin $B/flashdllm \
  --b-args="--verify --verify-kept commits" --slots 32 --per-iter 4 --repeats 1 \
  --json $OUT/floor_verify_picks.json > $OUT/floor_verify_picks.md 2>&1
echo "floor verify rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_verify_picks.md
FLASHDLLM_GEMM_PICKS=$OUT/picks.json timeout 60 $B/bench/batch_invariance --device cuda --json $OUT/batch_invariance_picks.json > $OUT/bi.txt 2>&1
echo "batch_invariance rc=$?"; grep -i identical $OUT/bi.txt
python3 - $OUT/picks.json <<'PY'
import json,sys
t=json.load(open(sys.argv[1])); print(t['device'], t['cublaslt_version'], len(t['picks']), 'picks')
for p in t['picks']: print(p['shape'], p['rows'], p['candidate'], p['speedup'])
PY
echo "elapsed $(( $(date +%s) - t0 )) s"
