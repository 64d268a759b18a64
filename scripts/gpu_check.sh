#!/usr/bin/env bash
# The one-call validation of the CUDA backend on a GPU machine (written for an H200, sm_90):
#   environment (nvidia-smi, nvcc) -> configure (-DFLASHDLLM_CUDA=ON -DFLASHDLLM_CUDA_ARCHS=90, Ninja
#   if present) -> build (all cores; ptxas register/shared-memory report) -> CUDA-vs-CPU twin tests ->
#   compute-sanitizer memcheck + racecheck on the Small test sets -> attention bench vs PyTorch SDPA
#   (flash and cuDNN backends; plain attention_bench if torch is missing) -> cuBLASLt GEMM bench ->
#   summary table.
#
# Usage
#   scripts/gpu_check.sh                 run everything (on the GPU machine); ~5-8 minutes
#   scripts/gpu_check.sh --build-only    configure + build only (any machine with nvcc)
#   scripts/gpu_check.sh --tests-only    everything but the benchmarks (safe beside other GPU work)
#   scripts/gpu_check.sh --fetch-deps    (on a Debian 12 machine with apt) download the build
#                                        dependencies as .deb files into .carry/gpudeps/ (~15 MB)
#
# Environment
#   OUT                           output folder (default ./out); gets at most 8 files:
#                                 summary.md, gpu_check.log, attention_vs_sdpa.json,
#                                 attention_vs_sdpa.ours.json (or attention_bench.json), gemm_bench.json,
#                                 batch_invariance.json, batch_invariance_cudnn_all.json
#   FLASHDLLM_GPU_BUILD_DIR       build folder (default ./build-gpu)
#   FLASHDLLM_CUDA_ARCHS          CUDA archs of the build (default 90); 80-virtual or 89-virtual runs
#                                 the Ampere / Ada code paths on an H100 (compute_80/89 PTX compiled by
#                                 the driver, no wgmma kernels), e.g. FLASHDLLM_CUDA_ARCHS=80-virtual
#                                 FLASHDLLM_GPU_BUILD_DIR=build-c80 scripts/gpu_check.sh --tests-only
#   FLASHDLLM_GPU_CHECK_BUDGET    total seconds allowed (default 470); later steps are skipped
#                                 rather than overrunning
#   FLASHDLLM_PEAK_TFLOPS         dense bf16 peak used for "% of peak" (default 989.4, H200 datasheet)
#   FLASHDLLM_GPU_DEPS_DIR        where --fetch-deps puts / the check looks for .deb files
#                                 (default ./.carry/gpudeps)
#
# Dependencies (carried Debian packages, see scripts/gpu_env.sh, shared with scripts/gpu_bench.sh):
# made by --fetch-deps (carry .carry/gpudeps with the device tool), unpacked into /tmp/fdllm-deps;
# packages already installed on the machine are used when no .deb files are carried.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FDLLM_TAG=gpu_check
# shellcheck source=scripts/gpu_env.sh
source "$ROOT/scripts/gpu_env.sh"

# The GPU tests: the binaries of every CTest test labelled "kernels" (tests/CMakeLists.txt gives the
# label; each is a CUDA-vs-CPU twin test that skips without a GPU), read from the built tree, so no
# list is kept here. The `gpu_tests` target builds them.
gpu_tests() {
  (cd "$1" && ctest -L '^kernels$' --show-only=json-v1) | python3 -c '
import json, os, sys
seen = []
for t in json.load(sys.stdin)["tests"]:
    exe = os.path.basename(t["command"][0])
    if exe not in seen:
        seen.append(exe)
print("\n".join(seen))'
}

# Internal: --sanitize TOOL BUILD SANITIZER runs every test binary's Small set under
# compute-sanitizer TOOL (a separate process so that `timeout` can bound it).
if [[ "${1:-}" == --sanitize ]]; then
  tool=$2 build=$3 san=$4 rc=0
  mapfile -t TESTS < <(gpu_tests "$build")
  for t in "${TESTS[@]}"; do
    filter='Small*'
    [[ $t == test_cuda_attention ]] && filter='CudaAttention.Small*'
    [[ $t == test_cuda_forward ]] && filter='CudaForward.Golden*'
    [[ $t == test_cuda_importance ]] && filter='*/Small'
    [[ $t == test_cuda_verify ]] && filter='*/Small:CudaVerifyLaunch.*'  # both CTA shapes
    [[ $t == test_cuda_gemm ]] && filter='CudaGemm.*'  # small shapes only
    [[ $t == test_cuda_moe ]] && filter='CudaMoe.Small*'
    # racecheck does not follow the TMA / mbarrier synchronisation of cuDNN's Hopper attention kernel
    # (it reports hazards inside cudnn_generated_*_sdpa_sm90_* that memcheck and every result check
    # contradict): racecheck runs our kernels only, memcheck includes the cuDNN route (its offsets).
    local_env=()
    if [[ $tool == racecheck ]]; then
      local_env=(FLASHDLLM_CUDNN_ATTENTION=off)
      [[ $t == test_cuda_importance ]] && filter='*/Small:-*Cudnn*'
    fi
    # A binary with no Small cases (test_nccl_comm) has nothing to sanitize: compute-sanitizer would
    # fail with "terminated before first instrumented API call".
    if ! "$build/tests/$t" --gtest_list_tests --gtest_filter="$filter" | grep -q '^  '; then
      echo "### $t: no test matches $filter, not sanitized"
      continue
    fi
    echo "### compute-sanitizer --tool $tool $t --gtest_filter=$filter"
    env FLASHDLLM_CUDA_SYNC=1 "${local_env[@]}" "$san" --tool "$tool" --error-exitcode 86 --print-limit 30 --report-api-errors no \
      "$build/tests/$t" --gtest_color=no --gtest_filter="$filter" || rc=1
  done
  exit $rc
fi

MODE=all
case "${1:-}" in
  --fetch-deps)
    fdllm_fetch_deps || exit 1
    exit 0 ;;
  --build-only) MODE=build ;;
  --tests-only) MODE=tests ;;
  "") ;;
  *) echo "usage: $0 [--build-only | --fetch-deps]" >&2; exit 2 ;;
esac

OUT="${OUT:-$ROOT/out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
: > "$LOG"
BUILD="${FLASHDLLM_GPU_BUILD_DIR:-$ROOT/build-gpu}"
BUDGET="${FLASHDLLM_GPU_CHECK_BUDGET:-470}"
PEAK="${FLASHDLLM_PEAK_TFLOPS:-989.4}"
fdllm_commit

finish() {
  local s="$OUT/summary.md"
  {
    echo "# gpu_check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $FLASHDLLM_COMMIT, $(elapsed)s)"
    echo
    echo "| step | status | seconds | detail |"
    echo "|---|---|---|---|"
    printf '%s\n' "${SUMMARY[@]}"
    echo
    echo "## Flash attention kernels (ptxas, sm_90)"
    grep -A3 -E "Compiling entry function.*(flash|wgmma)_attention_kernel" "$LOG" | grep -E "Compiling|Used|spill" |
      sed -E -e 's/.*flash_attention_kernelILi([0-9]+)ELi([0-9]+)ELb0E.*/m\1n\2:/' \
        -e 's/.*flash_attention_kernelILi([0-9]+)ELi([0-9]+)ELb1ELi([0-9])ELi([0-9])E.*/m\1n\2 verify, key split \3, \4 CTAs per SM:/' \
        -e 's/.*wgmma_attention_kernelILi([0-9]+)ELi([0-9]+)ELi([0-9]+)ELi([0-9]+)E.*/wgmma n\1, \2 K + \3 V stages, \4 consumers (sm_90a):/' |
      paste - - - | sed 's/^/    /' || true
    if grep -q "^## Attention" "$LOG"; then
      echo
      sed -n '/^## Attention/,/^wrote /p' "$LOG" | grep -v '^wrote '
    fi
    if grep -q "^| shape | T |" "$LOG"; then
      echo
      echo "## cuBLASLt GEMM"
      echo
      sed -n '/^| shape | T |/,/^$/p' "$LOG"
    fi
  } > "$s"
  echo
  cat "$s"
  rm -f "$STEP_OUT"
  echo
  echo "[gpu_check] outputs in $OUT: $(find "$OUT" -maxdepth 1 -type f -printf '%f ')"
  exit "$FAILED"
}

# ---------------------------------------------------------------------------- environment
fdllm_print_env

# ---------------------------------------------------------------------------- dependencies
fdllm_use_carried_deps

# ---------------------------------------------------------------------------- configure + build
fdllm_configure_cmd "$BUILD"
run_step configure 180 "${CONFIGURE_CMD[@]}" || finish
run_step build 330 cmake --build "$BUILD" -j "$JOBS" --target gpu_tests flashdllm attention_bench gemm_bench \
  batch_invariance attention_variants_bench || finish
[[ $MODE == build ]] && finish
mapfile -t TESTS < <(gpu_tests "$BUILD")
if ((${#TESTS[@]} == 0)); then
  SUMMARY+=("| gpu tests | FAIL | 0 | no CTest test is labelled kernels |")
  FAILED=1
  finish
fi

# ---------------------------------------------------------------------------- tests
skipped_all=0
for t in "${TESTS[@]}"; do
  run_step "$t" 240 "$BUILD/tests/$t" --gtest_color=no
  grep -q "^\[  PASSED  \] 0 tests" "$STEP_OUT" && skipped_all=$((skipped_all + 1))
done
# A GPU is there but no GPU test ran: the check tested nothing.
if nvidia-smi > /dev/null 2>&1 && ((skipped_all == ${#TESTS[@]})); then
  SUMMARY+=("| gpu tests | FAIL | 0 | a GPU is present but every GPU test skipped |")
  FAILED=1
fi

# The tile shapes no policy picks (bench/kernels/) against the reference kernel, so they stay correct.
run_step attention_variants_check 120 "$BUILD/bench/attention_variants_bench" --check-only
run_step cli_generate_cuda 60 "$BUILD/flashdllm" generate --device cuda -m "$ROOT/tests/data/golden/g1" --cache none \
  --prompt-ids 1,2,3,4,5,6,7,8 --gen-length 32 --block-length 8 --steps 32 --json
run_step cli_generate_cuda_flash 60 "$BUILD/flashdllm" generate --device cuda -m "$ROOT/tests/data/golden/g1" \
  --prompt-ids 1,2,3,4,5,6,7,8 --prompt-ids 9,10,11 --gen-length 32 --json
# Batch invariance on the device (answers alone vs among others; the CPU gives 100%): a measurement.
run_step batch_invariance 150 "$BUILD/bench/batch_invariance" --device cuda --json "$OUT/batch_invariance.json"
# The cuDNN attention route on every tile (the windows too; by default only the >= 256-row prefill
# tiles, which the small golden prompts do not reach): whole forwards against the goldens and the
# CPU, recorded-graph replays, and batch invariance.
run_step cuda_forward_cudnn_all 240 env FLASHDLLM_CUDNN_ATTENTION=all "$BUILD/tests/test_cuda_forward" --gtest_color=no
run_step batch_invariance_cudnn_all 150 env FLASHDLLM_CUDNN_ATTENTION=all "$BUILD/bench/batch_invariance" \
  --device cuda --json "$OUT/batch_invariance_cudnn_all.json"

# ---------------------------------------------------------------------------- sanitizers (Small sets)
SAN="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [[ -x "$SAN" ]]; then
  run_step memcheck 150 bash "$ROOT/scripts/gpu_check.sh" --sanitize memcheck "$BUILD" "$SAN"
  run_step racecheck 150 bash "$ROOT/scripts/gpu_check.sh" --sanitize racecheck "$BUILD" "$SAN"
else
  SUMMARY+=("| sanitizers | SKIP | 0 | compute-sanitizer not found |")
  FAILED=1
fi

[[ $MODE == tests ]] && finish

# ---------------------------------------------------------------------------- benchmarks
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" > /dev/null 2>&1; then
  run_step attention_vs_sdpa 240 env PYTHONUNBUFFERED=1 python3 "$ROOT/bench/attention_vs_sdpa.py" \
    --bench "$BUILD/bench/attention_bench" --peak-tflops "$PEAK" --json "$OUT/attention_vs_sdpa.json"
else
  echo "[gpu_check] torch with CUDA not available: timing our kernel alone" | tee -a "$LOG"
  run_step attention_bench 180 "$BUILD/bench/attention_bench" --peak-tflops "$PEAK" --json "$OUT/attention_bench.json"
fi
run_step gemm_bench 150 "$BUILD/bench/gemm_bench" --peak-tflops "$PEAK" --iters 5 --json "$OUT/gemm_bench.json"

finish
