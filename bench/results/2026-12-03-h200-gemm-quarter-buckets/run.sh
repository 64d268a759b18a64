#!/bin/bash
# GEMM row buckets (pow2 / quarter / exact): gemm_bench side by side, then the 32-slot iteration and
# verify pass per FLASHDLLM_GEMM_BUCKETS. Usage (repo root): bash .carry/run12.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $OUT/gpu.txt
t0=$(date +%s)
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
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
