#!/usr/bin/env bash
# Builds what ./build does not have yet (the test executables, tools and benches; incremental: after
# scripts/setup.sh only the tests are compiled) and runs the whole test suite (C++ GoogleTest +
# Python oracles). GPU tests skip themselves when no CUDA device is present.
#   scripts/test.sh [ctest args...]     e.g. -R '^io/' to filter (the build is still the whole tree)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/CMakeCache.txt ]] || { echo "build/ is not configured: run scripts/setup.sh first" >&2; exit 2; }
# Test processes run in parallel, one per core: each uses one compute thread. The core count is read
# without OMP_NUM_THREADS: GNU nproc honours it, and with it set to 1 the suite ran one test at a time.
JOBS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
echo "[test] building the tests with $JOBS jobs"
cmake --build build -j "$JOBS"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j "$JOBS" "$@"
