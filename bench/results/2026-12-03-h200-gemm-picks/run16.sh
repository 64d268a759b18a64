#!/bin/bash
# GemmLt picks on the device after the review fixes: build, test_cuda_gemm, the Gemm tests, the
# built-in table applying. Usage (repo root): bash .carry/run16.sh <tree> <commit>
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
FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu --target test_gemm_picks > /dev/null 2>&1
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
timeout 40 $B/tests/test_cuda_gemm > $OUT/test_cuda_gemm.txt 2>&1; echo "test_cuda_gemm rc=$?"; grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|actual" $OUT/test_cuda_gemm.txt | head -30
timeout 40 $B/tests/test_cuda_ops --gtest_filter='Gemm*:*Matmul*' > $OUT/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc=$?"; grep -E "PASSED|FAILED" $OUT/test_cuda_ops.txt
timeout 20 $B/tests/test_gemm_picks > $OUT/test_gemm_picks.txt 2>&1; echo "test_gemm_picks rc=$?"; grep -E "PASSED|FAILED" $OUT/test_gemm_picks.txt
timeout 30 $B/flashdllm generate -v --device cuda -m tests/data/golden/g1 --prompt-ids 1,2,3,4 --gen-length 16 --json > /dev/null 2> $OUT/picks_log.txt
echo "generate rc=$?"; grep -i "picks" $OUT/picks_log.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
