#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang under ASan + UBSan into ./build-fuzz and runs
# each on its corpus. Any crash, sanitizer report, leak, escaped non-flashdllm exception, timeout
# (> 10 s on one input) or memory blow-up (> 2 GB RSS) fails the run; libFuzzer writes the input to
# build-fuzz/artifacts/<target>/ (copy it to tests/fuzz/corpus/<target>/crash_<what> with the fix).
#   scripts/fuzz.sh [TARGET...]   targets: safetensors safetensors_index config tokenizer_load
#                                 tokenizer_encode chat_template openai_request (default: all, one
#                                 after another)
#   FUZZ_SECONDS=60               seconds per target (CI: 60)
#   FUZZ_RUNS=N                   stop after N executions instead (a long campaign: docs/robustness.md)
# Needs clang and libFuzzer (Debian: clang, libclang-rt-dev; FLASHDLLM_DEV_TOOLS=1 scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ALL=(safetensors safetensors_index config tokenizer_load tokenizer_encode chat_template openai_request)
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=("${ALL[@]}")
SECONDS_PER="${FUZZ_SECONDS:-60}"
command -v clang++ >/dev/null || { echo "[fuzz] clang++ not found (apt-get install clang libclang-rt-dev)" >&2; exit 2; }
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DFLASHDLLM_CUDA=OFF -DFLASHDLLM_BUILD_TESTS=OFF -DFLASHDLLM_FUZZ=ON -DFLASHDLLM_SANITIZE=address,undefined \
  "${LAUNCHER[@]}" >/dev/null
cmake --build build-fuzz -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target "${TARGETS[@]/#/fuzz_}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for t in "${TARGETS[@]}"; do
  work="build-fuzz/corpus/$t" artifacts="build-fuzz/artifacts/$t/"
  mkdir -p "$work" "$artifacts"
  limit=(-max_total_time="$SECONDS_PER")
  [[ -n "${FUZZ_RUNS:-}" ]] && limit=(-runs="$FUZZ_RUNS")
  echo "[fuzz] $t: ${limit[*]}"
  log="build-fuzz/fuzz_$t.log" status=0
  build-fuzz/fuzz/fuzz_"$t" "${limit[@]}" -dict=tests/fuzz/fuzz.dict -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" "$work" "tests/fuzz/corpus/$t" \
    >"$log" 2>&1 || status=$?
  # libFuzzer's progress lines are left out of the output (they stay in the log); its exit status decides.
  grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)|^[[:space:]]+NEW_FUNC' "$log" || true
  ((status == 0)) || { echo "[fuzz] $t FAILED (exit $status): reproducer in $artifacts, log $log" >&2; exit 1; }
done
echo "[fuzz] all targets clean"
