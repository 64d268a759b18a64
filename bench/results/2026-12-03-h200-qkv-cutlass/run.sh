#!/bin/bash
# Fused QKV device run: build, the ops / forward twin tests, memcheck + racecheck of the qkv tests,
# qkv_bench (every tile, bare GEMM, unfused), iterations default vs FLASHDLLM_QKV=unfused.
# Usage (repo root): bash .carry/run4.sh <expected tree hash> <commit> [quick]
set -u
# Ran on an NVIDIA H200 on 2026-12-03 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-03-h200-qkv-cutlass/run.sh
PRELUDE_BUILD=0  # this script builds by itself, below
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu -j16 --target qkv_bench >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
rc=0
for t in test_cuda_ops test_cuda_forward; do
  timeout 120 $B/tests/$t > /tmp/$t.log 2>&1; r=$?; echo "$t rc=$r $(grep -E '^\[  (PASSED|FAILED) ' /tmp/$t.log | tr '\n' ' ')"
  [[ $r == 0 ]] || { rc=1; grep -B3 -A12 "Failure\|FAILED" /tmp/$t.log | head -40; }
done
grep -E "note" /tmp/test_cuda_ops.log | sort | uniq -c | head
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
timeout 90 $CS --tool memcheck $B/tests/test_cuda_ops --gtest_filter='*Qkv*' 2>&1 | grep -E "ERROR SUMMARY|PASSED|FAILED" | tr '\n' ' '; echo
timeout 90 $CS --tool racecheck $B/tests/test_cuda_ops --gtest_filter='*Qkv*small' 2>&1 | grep -E "RACECHECK SUMMARY|PASSED|FAILED" | tr '\n' ' '; echo
echo "checks done $(( $(date +%s) - t0 )) s"
[[ "${3:-}" == quick ]] && { timeout 120 $B/bench/qkv_bench --slots 1,16,32 --prefill-tokens 2048,8192 --iters 5 --json $OUT/qkv_bench.json; exit $rc; }
timeout 180 $B/bench/qkv_bench --slots 1,2,4,8,16,32,64 --prefill-tokens 256,1024,2048,4096,8192 --iters 10 \
  --json $OUT/qkv_bench.json; echo "qkv_bench rc=$?"
timeout 90 python3 bench/iteration_floor.py --a-bin $B/flashdllm --b-env FLASHDLLM_QKV=fused --slots 1,16,32 \
  --repeats 1 --json $OUT/floor_default_vs_fused.json > /tmp/floor.log 2>&1; echo "floor rc=$?"; tail -7 /tmp/floor.log
echo "elapsed $(( $(date +%s) - t0 )) s"
exit $rc
