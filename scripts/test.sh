#!/usr/bin/env bash
# Runs the whole test suite (C++ GoogleTest + Python oracles) of an existing ./build.
# GPU tests skip themselves when no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/flashdllm ]] || { echo "build/ is missing: run scripts/setup.sh first" >&2; exit 2; }
# Test processes run in parallel, one per core: each uses one compute thread. The core count is read
# without OMP_NUM_THREADS: GNU nproc honours it, and with it set to 1 the suite ran one test at a time.
JOBS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j "$JOBS" "$@"
