#!/bin/bash
# Session 24, call 3: wgmma attention experiment flags (unit order, no store, evict hint)
# window attention against cuDNN on both K/V layouts, graph-timed (7ba9fc0's window_attention.py).
# Usage: bash .carry/run66.sh <tree> <label>
set -u
cd "$(dirname "$0")/.."
git checkout -- data/gsm8k_train.jsonl 2>/dev/null && echo "restored data/gsm8k_train.jsonl from git"
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "$1" ]]; then export FLASHDLLM_COMMIT=$2; echo "tree matches $2"; else echo "tree $tree != $1: dirty"; fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
t0=$(date +%s)
(OUT=/tmp/chk FLASHDLLM_GPU_CHECK_BUDGET=200 bash scripts/gpu_check.sh --build-only > /tmp/build.log 2>&1) || { tail -30 /tmp/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
grep -A3 -E "Compiling entry function.*wgmma_attention_kernel" /tmp/chk/gpu_check.log | grep -E "Used|spill" | tee $OUT/ptxas.txt
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
for f in 0 1 5; do
  for t in test_cuda_attention test_cuda_importance; do
    FLASHDLLM_WGMMA_EXP=$f timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1
    echo "EXP=$f $t rc=$?" | tee -a $OUT/tests.txt; grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4 | tee -a $OUT/tests.txt
  done
done
for r in 1 2 3; do
  for f in 0 1 2 4 5; do
    FLASHDLLM_WGMMA_EXP=$f timeout 60 $B/bench/attention_bench --window-shapes 16:128:768,32:128:768 --variants wgmma128 \
      --iters 30 > /tmp/w.md 2>&1; echo "## round $r EXP=$f" >> $OUT/window_rounds.md; cat /tmp/w.md >> $OUT/window_rounds.md
    echo -n "round $r EXP=$f: "; grep "^| wgmma128" /tmp/w.md | awk -F'|' '{print $3, $8, $9}' | tr '\n' ';'; echo
  done
done 2>&1 | tee $OUT/window_summary.txt
echo "elapsed $(( $(date +%s) - t0 )) s"
