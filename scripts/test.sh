#!/usr/bin/env bash
# Runs the whole test suite (C++ GoogleTest + Python oracles) of an existing ./build.
# GPU tests skip themselves when no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/flashdllm ]] || { echo "build/ is missing: run scripts/setup.sh first" >&2; exit 2; }
# Test processes run in parallel, one per core: each uses one compute thread.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
