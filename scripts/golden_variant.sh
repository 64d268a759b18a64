#!/usr/bin/env bash
# Runs the golden-fixture tests on a variant of G1 with other shapes, ids and run order
# (tests/tools/make_golden_variant.py): every test that reads FLASHDLLM_GOLDEN_DIR must derive its
# expectations from the fixture, so all of them must pass on it too. Needs a configured ./build
# (scripts/setup.sh); builds the test executables it runs.
#   scripts/golden_variant.sh [DIR]   where to write the variant (default build/golden-variant)
#   GOLDEN_LAYERS=N                    the variant's block count (make_golden_variant.py --layers; fewer
#                                      than G1's 3 drops the recordings: tests needing them skip)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/CMakeCache.txt ]] || { echo "build/ is not configured: run scripts/setup.sh first" >&2; exit 2; }
dir="${1:-build/golden-variant}"
python3 tests/tools/make_golden_variant.py --out "$dir" ${GOLDEN_LAYERS:+--layers "$GOLDEN_LAYERS"}
export FLASHDLLM_GOLDEN_DIR="$PWD/$dir" FLASHDLLM_BINARY_DIR="$PWD/build" FLASHDLLM_SOURCE_DIR="$PWD"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# The test executables run whole (CTest's case names come from G1's run indices), two at a time.
TESTS=(test_forward_golden test_sampler_golden test_fastdllm_golden test_flash_cache_golden test_flash_verify
       test_sampler_options test_llada_config test_llada_checkpoint test_safetensors test_make_checkpoint test_cli)
cmake --build build -j "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --target flashdllm flashdllm-make-checkpoint flashdllm-ckpt-info \
  "${TESTS[@]}"
printf '%s\n' "${TESTS[@]}" | xargs -P 2 -I{} sh -c 'build/tests/{} --gtest_brief=1 > "$0/{}.log" 2>&1' "$dir" || true
status=0
for t in "${TESTS[@]}"; do
  if grep -q "^\[  PASSED  \]" "$dir/$t.log" && ! grep -q "^\[  FAILED  \]" "$dir/$t.log"; then
    echo "[variant] $t: $(grep '^\[  PASSED  \]' "$dir/$t.log")"
  else
    echo "[variant] $t FAILED (log: $dir/$t.log)"; status=1
  fi
done
python3 -m pytest -q -p no:cacheprovider tests/python/test_cli_cache_modes.py tests/python/test_cli_verify.py \
  tests/python/test_cli_checkpoint_formats.py tests/python/test_safetensors_interop.py || status=1
exit $status
