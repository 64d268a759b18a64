# shellcheck shell=bash disable=SC2034  # variables are used by the scripts that source this file
# Shared by scripts/gpu_check.sh and scripts/gpu_bench.sh (sourced, never run): the GPU machine's
# environment, carried Debian dependencies, the one CMake configure command (so both scripts share
# one build folder without reconfiguring or rebuilding), the commit id, and the step runner with
# its time budget.
#
# The sourcing script sets before sourcing:
#   ROOT          repository root
#   FDLLM_TAG     message prefix (gpu_check, gpu_bench)
# and before calling the functions below:
#   LOG, BUDGET   log file, total seconds allowed
# Provides:
#   DEPS_DIR, DEB_PACKAGES        where the .deb files are carried, and which
#   JOBS, T0, SUMMARY, FAILED, STEP_OUT
#   fdllm_fetch_deps              download the .deb files (Debian 12 machine with apt)
#   fdllm_commit                  export FLASHDLLM_COMMIT (given, or git short hash, "-dirty")
#   fdllm_print_env               nvidia-smi, nvcc, cmake, ninja, cores -> stdout and $LOG
#   fdllm_use_carried_deps        unpack carried packages into /tmp/fdllm-deps; sets CMAKE_DEP_ARGS
#   fdllm_configure_cmd BUILD     sets CONFIGURE_CMD (cmake configure of BUILD, CUDA on, sm_90)
#   elapsed, step_detail, run_step NAME MAX_SECONDS CMD...
#
# Dependencies: the project needs fmt, spdlog, nlohmann-json, CLI11, GoogleTest, OpenBLAS, PCRE2,
# utf8proc, cpp-httplib (with the OpenSSL, zlib and Brotli headers its pkg-config file names) and
# pkg-config. A GPU machine without package access gets them as Debian .deb files
# made by --fetch-deps (carry .carry/gpudeps with the device tool): they are unpacked into
# /tmp/fdllm-deps and CMake / pkg-config / the loader are pointed there. Packages already installed
# on the machine are used when no .deb files are carried.

DEPS_DIR="${FLASHDLLM_GPU_DEPS_DIR:-$ROOT/.carry/gpudeps}"
DEB_PACKAGES=(libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 nlohmann-json3-dev libcli11-dev libgtest-dev
  libopenblas-openmp-dev libopenblas0-openmp libgfortran5 libpcre2-dev libpcre2-8-0 libpcre2-16-0
  libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2 pkgconf-bin libpkgconf3
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libbrotli-dev libbrotli1 zlib1g-dev)
# (libssl3 and zlib1g, which libcpp-httplib0.11 links, are on every CUDA image; not carried.)
JOBS="$(nproc)"
T0=$(date +%s)
SUMMARY=()
FAILED=0
STEP_OUT=""

fdllm_fetch_deps() {
  local d t
  mkdir -p "$DEPS_DIR" && cd "$DEPS_DIR" || return 1
  apt-get download "${DEB_PACKAGES[@]}" || return 1
  # -dev packages carry static libraries we never link (OpenBLAS's alone is 50 MB): keep headers,
  # the .so links, pkg-config and CMake files only (the device tool carries 64 MiB at most).
  for d in *-dev_*.deb; do
    [[ $d == libgtest-dev_* ]] && continue  # GoogleTest is linked statically: keep its .a
    t=$(mktemp -d) && dpkg-deb -x "$d" "$t" && find "$t" -name '*.a' -delete && rm -rf "${t:?}/usr/share/doc" &&
      tar -czf "${d%%_*}-min.tar.gz" -C "$t" usr && rm -rf "$t" "$d"
  done
  echo "downloaded $(find . -name '*.deb' | wc -l) packages ($(du -sh . | cut -f1)) into $DEPS_DIR"
  echo "run the check with the device tool carrying .carry (e.g. carry: [\".carry\"])"
}

fdllm_commit() {
  if [[ -z "${FLASHDLLM_COMMIT:-}" ]]; then
    FLASHDLLM_COMMIT=unknown
    local c
    if c=$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null); then
      FLASHDLLM_COMMIT=$c
      git -C "$ROOT" diff --quiet HEAD 2> /dev/null || FLASHDLLM_COMMIT="$c-dirty"
    fi
  fi
  export FLASHDLLM_COMMIT
}

fdllm_print_env() {
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
}

fdllm_use_carried_deps() {
  CMAKE_DEP_ARGS=()
  local DEBS TARS f
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
    export LD_LIBRARY_PATH="$A:$A/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LIBRARY_PATH="$A:$A/openblas-openmp${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export PKG_CONFIG_LIBDIR="$A/pkgconfig:$P/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR="$P"
    export PATH="$P/usr/bin:$PATH"
    # CMake finds OpenBLAS (OpenMP flavour) under $P/usr/lib/x86_64-linux-gnu/openblas-openmp through
    # CMAKE_PREFIX_PATH; named explicitly so a stale cache entry cannot point elsewhere.
    CMAKE_DEP_ARGS=(-DCMAKE_PREFIX_PATH="$P/usr" -DCMAKE_LIBRARY_PATH="$A"
      -DOPENBLAS_OPENMP_LIBRARY="$A/openblas-openmp/libopenblas.so"
      -DOPENBLAS_OPENMP_INCLUDE_DIR="$P/usr/include/x86_64-linux-gnu/openblas-openmp" -DPKG_CONFIG_EXECUTABLE="$P/usr/bin/pkgconf")
    echo "[$FDLLM_TAG] using ${#DEBS[@]} carried .deb packages unpacked in $P" | tee -a "$LOG"
  fi
}

# The configure command of the GPU build folder. Both scripts use exactly these arguments, so a
# folder built by one is reused by the other without reconfiguring or recompiling.
fdllm_configure_cmd() {
  local build=$1
  mkdir -p "$build"
  # CMake < 3.26 does not know nvcc's C++20 flag (the project sets CMAKE_CUDA_STANDARD 20): teach it.
  printf 'set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")\nset(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")\n' \
    > "$build/cuda20_flags.cmake"
  local gen=()
  command -v ninja > /dev/null && gen=(-G Ninja)
  [[ -f "$build/CMakeCache.txt" ]] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${gen[1]:-Unix Makefiles}" "$build/CMakeCache.txt" &&
    rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
  # cuDNN for the cuDNN attention route: the toolkit's if it has cudnn.h, else the pip wheel
  # nvidia-cudnn-cu13 that PyTorch brings (the GPU machine's image); the frontend headers travel in
  # .deps/cudnn-frontend (scripts/setup.sh or --fetch-deps puts them there; carry .deps).
  local cudnn=()
  if [[ ! -f "$(dirname "$(command -v nvcc)")/../include/cudnn.h" && ! -f /usr/include/cudnn.h &&
        ! -f /usr/include/x86_64-linux-gnu/cudnn.h ]]; then
    local wheel
    wheel=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null) &&
      [[ -f "$wheel/include/cudnn.h" ]] && cudnn=(-DCUDNN_ROOT="$wheel")
  fi
  CONFIGURE_CMD=(cmake -S "$ROOT" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHDLLM_CUDA=ON
    -DFLASHDLLM_CUDA_ARCHS="${FLASHDLLM_CUDA_ARCHS:-90}" -DFLASHDLLM_PTXAS_VERBOSE=ON -DCMAKE_POLICY_VERSION_MINIMUM=3.5
    -DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA="$build/cuda20_flags.cmake" "${CMAKE_DEP_ARGS[@]}" "${cudnn[@]}")
}

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
  [[ -n "$STEP_OUT" ]] || STEP_OUT="$(mktemp "/tmp/${FDLLM_TAG}_step.XXXXXX")"
  local left=$((BUDGET - $(elapsed)))
  if ((left < 20)); then
    SUMMARY+=("| $name | SKIP | 0 | time budget spent |")
    echo "[$FDLLM_TAG] $name: skipped (time budget spent)"
    FAILED=1
    return 3
  fi
  local lim=$((max < left ? max : left)) t rc status dt
  t=$(date +%s)
  echo "[$FDLLM_TAG] $(elapsed)s: $name (limit ${lim}s)"
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
  echo "[$FDLLM_TAG] $name: $status in ${dt}s"
  if [[ $status != PASS ]]; then
    FAILED=1
    echo "----- last 40 lines of $name -----"
    tail -n 40 "$STEP_OUT"
    echo "-----"
  fi
  return $rc
}
