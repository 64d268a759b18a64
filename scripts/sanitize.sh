#!/usr/bin/env bash
# Builds flashdllm and its C++ tests with AddressSanitizer + UndefinedBehaviorSanitizer (g++, CUDA off)
# into ./build-asan and runs the C++ suite there. Any sanitizer report fails its test
# (-fno-sanitize-recover, halt_on_error). The Python oracles are left out (-LE python): they test the
# normal build's outputs, not memory safety.
# Built at -O1 -g1 (ASan's recommended level: about half the compile time of -O3, line numbers in
# reports). The golden sweeps (denoise/*TeacherForced* and *FreeRun*, 512 recorded runs through the
# same sampler and cache code) run one in five, the runs whose number ends in 0 or 5: their subject is
# numerics, which the normal suite checks in full. BatchInvariance.SameTokensAloneAndAmong31Others...
# (95 s normally, 11 min here) is left out too: its paths (32 slots, refills of very different
# lengths, per-request parameters) run here in FlashBatching.Refill*, Scheduler.* and
# BatchInvariance.PerRequestTemperatureAndSeed. Every other C++ test runs (measured: docs/robustness.md).
#   scripts/sanitize.sh [ctest args...]     e.g. -R '^io/' to filter
#   FLASHDLLM_SANITIZE_ALL=1                every golden run and every test (a longer campaign)
#   FLASHDLLM_SANITIZE=address,undefined    the sanitizer list (CMake option of the same name)
set -euo pipefail
cd "$(dirname "$0")/.."
SAN="${FLASHDLLM_SANITIZE:-address,undefined}"
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# Cores, read without OMP_NUM_THREADS (GNU nproc honours it; the tests below run with it set to 1).
JOBS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
start=$(date +%s)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DFLASHDLLM_CUDA=OFF -DFLASHDLLM_SANITIZE="$SAN" \
  -DFLASHDLLM_WERROR="${FLASHDLLM_WERROR:-OFF}" "${LAUNCHER[@]}" >/dev/null
cmake --build build-asan -j "$JOBS"
built=$(date +%s)
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
SAMPLE=(-E '/run[0-9]*[1-46-9]_|^engine/BatchInvariance\.SameTokensAloneAndAmong31Others')
[[ "${FLASHDLLM_SANITIZE_ALL:-0}" == 1 ]] && SAMPLE=()
ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE python "${SAMPLE[@]}" --timeout 1500 "$@"
echo "[sanitize] build $((built - start)) s, tests $(($(date +%s) - built)) s"
