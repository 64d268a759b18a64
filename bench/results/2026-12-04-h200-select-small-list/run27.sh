#!/bin/bash
# Session 18, last call: build, the rmsnorm / forward twin tests, sanitizers on the small rmsnorm cases,
# pass_breakdown at 1 and 32 slots. Usage: bash .carry/run27.sh <tree> <commit>
set -u
# Ran on an NVIDIA H200 on 2026-12-04 (the folder's README.md: commit, command, results). Its inline start (tree
# check, data restore, deps, build, environment) is now bench/device_prelude.sh; as it ran:
# git show 6ce2943:bench/results/2026-12-04-h200-select-small-list/run27.sh
BUILD_BUDGET=140  # seconds for the build (default 200)
source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" "$@"
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
