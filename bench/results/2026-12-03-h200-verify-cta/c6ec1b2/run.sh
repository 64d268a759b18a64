#!/bin/bash
# Verify attention configurations + ncu of the verify kernel (issue 13). Usage: bash .carry/run18.sh <tree> <commit>
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
FLASHDLLM_GPU_CHECK_BUDGET=140 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
grep -A3 -E "Compiling entry function.*flash_attention_kernelILi(32|64)ELi64ELb1" /tmp/build.log | grep -E "Compiling|Used" | sed -E 's/.*kernelILi([0-9]+)ELi([0-9]+)ELb1ELi([0-9])ELb([01])E.*/m\1 stages \3 head \4:/' | paste - - | cut -c1-90
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
{
timeout 90 $B/tests/test_cuda_verify; echo "test_cuda_verify rc=$?"
FLASHDLLM_ATTENTION=reference timeout 90 $B/tests/test_cuda_verify --gtest_filter='*CudaVerify.*'; echo "test_cuda_verify (reference attention: the scalar kernel at head_dim 128) rc=$?"
} > $OUT/tests.txt 2>&1
grep -E "rc=|FAILED|Failure" $OUT/tests.txt | head
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  FLASHDLLM_CUDA_SYNC=1 timeout 150 $SAN --tool $tool --error-exitcode 86 --print-limit 10 --report-api-errors no \
    $B/tests/test_cuda_verify --gtest_filter='CudaVerifyLaunch.*' > /tmp/san_$tool.txt 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" /tmp/san_$tool.txt | head -4
done
echo "tests done $(( $(date +%s) - t0 )) s"
timeout 150 $B/bench/attention_bench --verify-shapes ${VSHAPES:-32:20:750,32:32:738,16:20:750} \
  --verify-block-m 64,32 --verify-stages 2,3 --verify-orders item,head --iters 20 --json $OUT/verify_bench.json > $OUT/verify_bench.md 2>&1
echo "verify bench rc=$? at $(( $(date +%s) - t0 )) s"; cat $OUT/verify_bench.md
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for cfg in "64 2 item" "32 2 item"; do
  set -- $cfg
  timeout 120 $NCU --kernel-name regex:flash_attention_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
    $B/bench/attention_bench --verify-shapes 32:20:750 --verify-block-m $1 --verify-stages $2 --verify-orders $3 --iters 2 --warmup 1 \
    > $OUT/ncu_m$1_s$2_$3.txt 2>&1
  echo "ncu $cfg rc=$?"
done
echo "elapsed $(( $(date +%s) - t0 )) s"
