#!/bin/bash
# Session 18, last call: build, the rmsnorm / forward twin tests, sanitizers on the small rmsnorm cases,
# pass_breakdown at 1 and 32 slots. Usage: bash .carry/run27.sh <tree> <commit>
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
(FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
for t in test_cuda_ops test_cuda_forward; do
  timeout 60 $B/tests/$t > $OUT/$t.txt 2>&1; echo "$t rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "PASSED|FAILED|Failure" $OUT/$t.txt | head -8
done
for tool in memcheck racecheck; do
  timeout 40 compute-sanitizer --tool $tool $B/tests/test_cuda_ops --gtest_filter='Small/*Rmsnorm*' > /tmp/san_$tool.txt 2>&1
  echo "$tool rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "PASSED|SUMMARY" /tmp/san_$tool.txt | head -3
done
for s in 1 32; do
  timeout 60 python3 bench/pass_breakdown.py --bin $B/flashdllm --slots $s --json /tmp/pb_s$s.json > $OUT/pass_breakdown_s$s.md 2>&1
  echo "pass breakdown $s rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "pass ms|rmsnorm|ln_f|verify /" $OUT/pass_breakdown_s$s.md
done
echo "elapsed $(( $(date +%s) - t0 )) s"
