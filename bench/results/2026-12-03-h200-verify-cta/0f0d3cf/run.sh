#!/bin/bash
# Verify attention CTA shapes (issue 13): gpu_check --tests-only, attention_bench --verify-shapes,
# ncu of the default shape, the verify pass at 1/16/32 slots. Usage: bash .carry/run19.sh <tree> <commit>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null && echo "restored data/gsm8k_train.jsonl from git"
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches commit $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
OUT="/tmp/check" FLASHDLLM_GPU_CHECK_BUDGET=${CHECK_BUDGET:-300} bash scripts/gpu_check.sh --tests-only > /tmp/gpu_check.stdout 2>&1
echo "gpu_check rc=$? at $(( $(date +%s) - t0 )) s"; cp /tmp/check/summary.md $OUT/gpu_check_summary.md; grep -E '^\| |m.*verify' $OUT/gpu_check_summary.md
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 150 $B/bench/attention_bench --verify-shapes ${VSHAPES:-32:20:750,32:32:738,16:20:750,64:20:750} \
  --verify-ctas 1x1,2x2,2x3 --iters 20 --json $OUT/verify_bench.json > $OUT/verify_bench.md 2>&1
echo "verify bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/verify_bench.md
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 90 $NCU --kernel-name regex:flash_attention_kernel --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
  $B/bench/attention_bench --verify-shapes 32:20:750 --verify-ctas 2x3 --iters 2 --warmup 1 > $OUT/ncu_2x3.txt 2>&1
echo "ncu rc=$?"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per" $OUT/ncu_2x3.txt
timeout 330 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots ${SLOTS:-1,16,32} --per-iter 4 --repeats 1 --json $OUT/floor.json > $OUT/floor.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\|" $OUT/floor.md
echo "elapsed $(( $(date +%s) - t0 )) s"
