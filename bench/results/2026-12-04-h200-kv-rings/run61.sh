#!/bin/bash
# Session 23, call 4: two Q buffers in the wgmma attention (branch qbuf). Build; attention and importance
# twins with FLASHDLLM_WGMMA_QBUF=2 and =k2; window attention at 16 / 32 slots for modes 0 / k2 / 2,
# alternating, three rounds.
# Usage: bash .carry/run61.sh <tree> <commit>
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
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
for m in 2 k2; do
  for t in test_cuda_attention test_cuda_importance; do
    FLASHDLLM_WGMMA_QBUF=$m timeout 100 $B/tests/$t --gtest_color=no > /tmp/$t.txt 2>&1
    echo "QBUF=$m $t rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" /tmp/$t.txt | head -4
  done
done
for r in 1 2 3; do
  for m in 0 k2 2; do
    FLASHDLLM_WGMMA_QBUF=$m timeout 60 $B/bench/attention_bench --window-shapes 16:128:768,32:128:768 --variants wgmma128 \
      --iters 30 --json /tmp/w_${m}_$r.json > /tmp/w.md 2>&1; cat /tmp/w.md >> $OUT/window_rounds.md
    echo "round $r QBUF=$m rc=$?"; grep "^| wgmma128" /tmp/w.md | awk -F'|' '{print $3, $8, $9}' | tr '\n' ';'; echo
  done
done
echo "elapsed $(( $(date +%s) - t0 )) s"
