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
#   OUT                           output folder (default ./out); gets at most 6 files:
#                                 summary.md, gpu_check.log, attention_vs_sdpa.json,
#                                 attention_vs_sdpa.ours.json (or attention_bench.json), gemm_bench.json
#   FLASHDLLM_GPU_BUILD_DIR       build folder (default ./build-gpu)
#   FLASHDLLM_GPU_CHECK_BUDGET    total seconds allowed (default 470); later steps are skipped
#                                 rather than overrunning
#   FLASHDLLM_PEAK_TFLOPS         dense bf16 peak used for "% of peak" (default 989.4, H200 datasheet)
#   FLASHDLLM_GPU_DEPS_DIR        where --fetch-deps puts / the check looks for .deb files
#                                 (default ./.carry/gpudeps)
#
# Dependencies: the project needs fmt, spdlog, nlohmann-json, CLI11, GoogleTest, OpenBLAS, PCRE2,
# utf8proc and pkg-config. A GPU machine without package access can get them as Debian .deb files
# made by --fetch-deps (carry .carry/gpudeps with the device tool): they are unpacked into
# /tmp/fdllm-deps and CMake / pkg-config / the loader are pointed there. Packages already installed
# on the machine are used when no .deb files are carried.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS_DIR="${FLASHDLLM_GPU_DEPS_DIR:-$ROOT/.carry/gpudeps}"
DEB_PACKAGES=(libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 nlohmann-json3-dev libcli11-dev libgtest-dev
  libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libpcre2-dev libpcre2-8-0 libpcre2-16-0
  libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2 pkgconf-bin libpkgconf3)

TESTS=(test_cuda_ops test_cuda_attention test_cuda_select test_cuda_forward)

# Internal: --sanitize TOOL BUILD SANITIZER runs every test binary's Small set under
# compute-sanitizer TOOL (a separate process so that `timeout` can bound it).
if [[ "${1:-}" == --sanitize ]]; then
  tool=$2 build=$3 san=$4 rc=0
  for t in "${TESTS[@]}"; do
    filter='Small*'
    [[ $t == test_cuda_attention ]] && filter='CudaAttention.Small*'
    [[ $t == test_cuda_forward ]] && filter='CudaForward.Golden*'
    echo "### compute-sanitizer --tool $tool $t --gtest_filter=$filter"
    FLASHDLLM_CUDA_SYNC=1 "$san" --tool "$tool" --error-exitcode 86 --print-limit 30 --report-api-errors no \
      "$build/tests/$t" --gtest_color=no --gtest_filter="$filter" || rc=1
  done
  exit $rc
fi

MODE=all
case "${1:-}" in
  --fetch-deps)
    mkdir -p "$DEPS_DIR" && cd "$DEPS_DIR" || exit 1
    apt-get download "${DEB_PACKAGES[@]}" || exit 1
    # The OpenBLAS -dev package is mostly a 50 MB static library we never link: keep headers,
    # the .so link, pkg-config and CMake files only (the device tool carries 64 MiB at most).
    for d in libopenblas-pthread-dev_*.deb; do
      t=$(mktemp -d) && dpkg-deb -x "$d" "$t" && find "$t" -name '*.a' -delete && rm -rf "$t/usr/share" &&
        tar -czf libopenblas-pthread-dev-min.tar.gz -C "$t" usr && rm -rf "$t" "$d"
    done
    echo "downloaded $(find . -name '*.deb' | wc -l) packages ($(du -sh . | cut -f1)) into $DEPS_DIR"
    echo "run the check with the device tool carrying .carry (e.g. carry: [\".carry\"])"
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
JOBS="$(nproc)"
T0=$(date +%s)
STEP_OUT="$(mktemp /tmp/gpu_check_step.XXXXXX)"
SUMMARY=()
FAILED=0
if [[ -z "${FLASHDLLM_COMMIT:-}" ]]; then
  FLASHDLLM_COMMIT=unknown
  if c=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null); then
    FLASHDLLM_COMMIT=$c
    git -C "$ROOT" diff --quiet HEAD 2> /dev/null || FLASHDLLM_COMMIT="$c-dirty"
  fi
fi
export FLASHDLLM_COMMIT

elapsed() { echo $(($(date +%s) - T0)); }

# One-line result of a step from its output.
step_detail() {
  local f=$1 d
  d=$(grep -E "^\[  PASSED  \]|^\[  SKIPPED \] [0-9]+ test|^\[  FAILED  \] [0-9]+ test|ERROR SUMMARY|RACECHECK SUMMARY|acceptance .*FAIL" "$f" | tr '\n' ' ' | cut -c1-160)
  [[ -z "$d" ]] && d=$(grep -v '^\s*$' "$f" | tail -n 1 | cut -c1-160)
  echo "${d//|//}"
}

# run_step NAME MAX_SECONDS CMD... : runs CMD under a timeout (the smaller of MAX_SECONDS and the
# budget left), appends its output to the log, records PASS / FAIL / TIMEOUT / SKIP.
run_step() {
  local name=$1 max=$2
  shift 2
  local left=$((BUDGET - $(elapsed)))
  if ((left < 20)); then
    SUMMARY+=("| $name | SKIP | 0 | time budget spent |")
    echo "[gpu_check] $name: skipped (time budget spent)"
    FAILED=1
    return 3
  fi
  local lim=$((max < left ? max : left)) t rc status dt
  t=$(date +%s)
  echo "[gpu_check] $(elapsed)s: $name (limit ${lim}s)"
  printf '\n===== %s: %s =====\n' "$name" "$*" >> "$LOG"
  timeout --kill-after=10 "$lim" "$@" > "$STEP_OUT" 2>&1
  rc=$?
  cat "$STEP_OUT" >> "$LOG"
  dt=$(($(date +%s) - t))
  status=PASS
  if ((rc == 124 || rc == 137)); then status=TIMEOUT; elif ((rc != 0)); then status="FAIL(rc=$rc)"; fi
  # A GoogleTest binary whose every test skipped did not test anything (no GPU visible?).
  if [[ $status == PASS ]] && grep -q "^\[  PASSED  \] 0 tests" "$STEP_OUT"; then status="ALL-SKIPPED"; fi
  SUMMARY+=("| $name | $status | $dt | $(step_detail "$STEP_OUT") |")
  echo "[gpu_check] $name: $status in ${dt}s"
  if [[ $status != PASS ]]; then
    FAILED=1
    echo "----- last 40 lines of $name -----"
    tail -n 40 "$STEP_OUT"
    echo "-----"
  fi
  return $rc
}

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
    grep -A3 "Compiling entry function.*flash_attention_kernel" "$LOG" | grep -E "Compiling|Used|spill" |
      sed -E 's/.*flash_attention_kernelILi([0-9]+)ELi([0-9]+)E.*/m\1n\2:/' | paste - - - | sed 's/^/    /' || true
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
{
  echo "===== environment ====="
  date -u
  echo "commit: $FLASHDLLM_COMMIT"
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 || echo "nvcc: not found"
  cmake --version 2>&1 | head -n 1
  command -v ninja > /dev/null && echo "ninja $(ninja --version)"
  echo "cores: $JOBS"
} 2>&1 | tee -a "$LOG"

# ---------------------------------------------------------------------------- dependencies
CMAKE_DEP_ARGS=()
shopt -s nullglob
DEBS=("$DEPS_DIR"/*.deb)
TARS=("$DEPS_DIR"/*.tar.gz)  # trimmed packages (e.g. openblas -dev without its 50 MB static library)
shopt -u nullglob
if ((${#DEBS[@]})); then
  P=/tmp/fdllm-deps
  A="$P/usr/lib/x86_64-linux-gnu"
  rm -rf "$P" && mkdir -p "$P"
  unpack() {  # dpkg-deb where present, else ar + tar
    if command -v dpkg-deb > /dev/null; then dpkg-deb -x "$1" "$P"; return; fi
    local d
    d=$(mktemp -d) && (cd "$d" && ar x "$1" && tar -xf data.tar.* -C "$P") && rm -rf "$d"
  }
  for f in "${DEBS[@]}"; do unpack "$f" || { echo "cannot unpack $f" | tee -a "$LOG"; FAILED=1; }; done
  for f in "${TARS[@]}"; do tar -xzf "$f" -C "$P" || { echo "cannot unpack $f" | tee -a "$LOG"; FAILED=1; }; done
  export LD_LIBRARY_PATH="$A:$A/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LIBRARY_PATH="$A:$A/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export PKG_CONFIG_LIBDIR="$A/pkgconfig:$P/usr/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR="$P"
  export PATH="$P/usr/bin:$PATH"
  CMAKE_DEP_ARGS=(-DCMAKE_PREFIX_PATH="$P/usr" -DCMAKE_LIBRARY_PATH="$A/openblas-pthread;$A"
    -DCBLAS_INCLUDE_DIR="$P/usr/include/x86_64-linux-gnu/openblas-pthread" -DPKG_CONFIG_EXECUTABLE="$P/usr/bin/pkgconf")
  echo "[gpu_check] using ${#DEBS[@]} carried .deb packages unpacked in $P" | tee -a "$LOG"
fi

# ---------------------------------------------------------------------------- configure + build
mkdir -p "$BUILD"
# CMake < 3.26 does not know nvcc's C++20 flag (the project sets CMAKE_CUDA_STANDARD 20): teach it.
printf 'set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")\nset(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")\n' \
  > "$BUILD/cuda20_flags.cmake"
GEN=()
command -v ninja > /dev/null && GEN=(-G Ninja)
[[ -f "$BUILD/CMakeCache.txt" ]] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${GEN[1]:-Unix Makefiles}" "$BUILD/CMakeCache.txt" &&
  rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
run_step configure 180 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHDLLM_CUDA=ON \
  -DFLASHDLLM_CUDA_ARCHS=90 -DFLASHDLLM_PTXAS_VERBOSE=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
  -DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA="$BUILD/cuda20_flags.cmake" "${CMAKE_DEP_ARGS[@]}" || finish
run_step build 330 cmake --build "$BUILD" -j "$JOBS" --target "${TESTS[@]}" flashdllm attention_bench gemm_bench || finish
[[ $MODE == build ]] && finish

# ---------------------------------------------------------------------------- tests
for t in "${TESTS[@]}"; do
  run_step "$t" 240 "$BUILD/tests/$t" --gtest_color=no
done

run_step cli_generate_cuda 60 "$BUILD/flashdllm" generate --device cuda -m "$ROOT/tests/data/golden/g1" \
  --prompt-ids 1,2,3,4,5,6,7,8 --gen-length 32 --block-length 8 --steps 32 --json

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
