#!/bin/bash
# Session 23, call 5 (final): cbec470. Build; attention / importance / forward / verify / ops twins;
# memcheck + racecheck on the attention Small set and the fused importance Small test; then the targets
# in one run: A = flash, B = flash + verify (--verify-kept commits), 1 / 16 / 32 slots.
# Usage: bash .carry/run62.sh <tree> <commit>
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
(OUT=/tmp/chk FLASHDLLM_GPU_CHECK_BUDGET=250 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Compiling|Used|spill" |
  sed -E 's/.*wgmma_attention_kernelILi([0-9]+)ELi([0-9]+)ELi([0-9]+)ELi([0-9]+)E.*/wgmma n\1 K\2 V\3 consumers \4:/' > $OUT/ptxas.txt
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
: > $OUT/tests.txt
for t in test_cuda_attention test_cuda_importance test_cuda_forward test_cuda_verify test_cuda_ops; do
  timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
  grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -6 | tee -a $OUT/tests.txt
done
for tool in memcheck racecheck; do
  for t in test_cuda_attention:CudaAttention.Small* test_cuda_importance:*FusedWithAttentionMatchesCpu/Small; do
    FLASHDLLM_CUDA_SYNC=1 FLASHDLLM_CUDNN_ATTENTION=off timeout 100 compute-sanitizer --tool $tool --error-exitcode 86 \
      --print-limit 10 $B/tests/${t%%:*} --gtest_color=no --gtest_filter="${t#*:}" > /tmp/san.txt 2>&1
    echo "$tool $t rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/tests.txt
    grep -E "PASSED|SUMMARY" /tmp/san.txt | head -2 | tee -a $OUT/tests.txt
  done
done
timeout 200 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-bin $B/flashdllm --b-args="--verify --verify-kept commits" \
  --slots 1,16,32 --per-iter 4 --repeats 2 --json $OUT/floor_targets.json > $OUT/floor_targets.md 2>&1
echo "floor rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^\||measured" $OUT/floor_targets.md
echo "elapsed $(( $(date +%s) - t0 )) s"
