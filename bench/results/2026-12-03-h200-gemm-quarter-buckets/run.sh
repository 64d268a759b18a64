#!/bin/bash
# GEMM row buckets (pow2 / quarter / exact): gemm_bench side by side, then the 32-slot iteration and
# verify pass per FLASHDLLM_GEMM_BUCKETS. Usage (repo root): bash .carry/run12.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-gemm-quarter-buckets/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
timeout 60 $B/tests/test_cuda_ops --gtest_filter='GemmBuckets*:*Matmul*' > $OUT/test_gemm.txt 2>&1; echo "test rc=$?"; tail -2 $OUT/test_gemm.txt
timeout ${GEMM_T:-150} $B/bench/gemm_bench --tokens ${TOKENS:-160,192,256,320,384,512,640,768,1024,1280,1536,2048,2560,3072,4096} \
  --shapes qkv,attn_out,gate_up,down,lm_head --tune 8 --buckets quarter,exact --iters 10 \
  --json $OUT/gemm_bench.json > $OUT/gemm_bench.txt 2>&1; echo "gemm_bench rc=$?"
echo "gemm done $(( $(date +%s) - t0 )) s"
for b in ${MODES:-pow2 quarter exact}; do
  FLASHDLLM_GEMM_BUCKETS=$b timeout 150 python3 bench/iteration_floor.py --a-bin $B/flashdllm \
    --b-args="--verify --verify-kept commits" --slots ${SLOTS:-32} --per-iter 4 --repeats 1 \
    --json $OUT/floor_$b.json > $OUT/floor_$b.md 2>&1
  echo "floor $b rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor_$b.md
done
python3 - $OUT/gemm_bench.json <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print("| shape | T | pow2 us | quarter us | exact us | tuned8 us |")
for r in d["results"]:
    b=r.get("buckets_us",{})
    print(f"| {r['shape']} | {r['T']} | {r['median_us']:.1f} | {b.get('quarter',0):.1f} | {b.get('exact',0):.1f} | {r.get('tuned_median_us',0):.1f} |")
PY
echo "elapsed $(( $(date +%s) - t0 )) s"
