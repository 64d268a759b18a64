#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine and builds the flashdllm command into ./build.
#   scripts/setup.sh            install dependencies (apt + pip) if missing, configure, build the
#                               `flashdllm` target (and what it links): what the README's first
#                               command runs. The tests, tools and benches are built by
#                               scripts/test.sh (or `cmake --build build`), incrementally.
#   FLASHDLLM_CUDA=ON|OFF       force the CUDA backend on/off (default: on when nvcc is found)
#   FLASHDLLM_SKIP_DEPS=1       skip package installation (dependencies already present)
#   FLASHDLLM_DEV_TOOLS=1       also install clang, libFuzzer, clang-format, chromium (fuzzing, format
#                               check, the live-page test; CI sets it)
#   FLASHDLLM_WERROR=ON         compiler warnings are errors (CI)
# ccache, when installed, is the compiler launcher (C, C++, CUDA): rebuilds of unchanged files on a
# kept machine come from its cache. CCACHE_DISABLE=1 builds without it.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(cmake g++ make pkg-config python3 python3-pip
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libpcre2-dev libutf8proc-dev
  libopenblas-openmp-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev)
PIP_PACKAGES=(-r requirements-test.txt)
# FLASHDLLM_DEV_TOOLS=1 (set by .ci/run): also the hardening tools, clang + libFuzzer + the sanitizer
# runtimes (scripts/fuzz.sh) and clang-format (scripts/check_format.sh), and the headless browser of
# the live-page test (tests/python/test_server_page.py; skipped without it).
if [[ "${FLASHDLLM_DEV_TOOLS:-0}" == 1 ]]; then
  APT_PACKAGES+=(clang libclang-rt-dev clang-format ccache chromium chromium-driver)
fi

if [[ "${FLASHDLLM_SKIP_DEPS:-0}" != 1 ]]; then
  missing=()
  for p in "${APT_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if ((${#missing[@]})); then
    echo "[setup] installing Debian packages: ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! python3 -c "import tokenizers, safetensors, numpy, pytest, jinja2, matplotlib, math_verify, openai, httpx, prometheus_client, lm_eval, selenium" 2>/dev/null; then
    echo "[setup] installing Python test oracles (pip): $(tr '\n' ' ' < requirements-test.txt)"
    python3 -m pip install -q "${PIP_PACKAGES[@]}" 2>/dev/null ||
      python3 -m pip install -q --break-system-packages "${PIP_PACKAGES[@]}"
  fi
fi

# minja (Google's header-only C++ Jinja engine for LLM chat templates, MIT; what llama.cpp renders
# chat templates with): src/io/jinja.cpp renders the checkpoint's own `chat_template` with it. Debian
# has no C++ Jinja engine; PyPI's only copy of minja is the one the llama-cpp-python sdist vendors
# (vendor/llama.cpp/vendor/minja, last in 0.3.16: later releases dropped minja). The sdist is pinned
# by sha256 and only minja.hpp (pinned too) is kept, in .deps/minja/include/minja. docs/decisions.md
# says why this library. Without it the build stops at configure (CMakeLists.txt names this script).
MINJA_SDIST=llama_cpp_python-0.3.16.tar.gz
MINJA_SDIST_SHA256=34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6
MINJA_HPP_SHA256=abb5e1378834908ec8ae3035fae0a82b7b36e214f5808c7df50ccf0048acbcd1
if [[ "${FLASHDLLM_SKIP_DEPS:-0}" != 1 && ! -f .deps/minja/include/minja/minja.hpp ]]; then
  echo "[setup] fetching the minja header (pip sdist llama-cpp-python==0.3.16, vendor/minja)"
  rm -rf .deps/sdist && mkdir -p .deps/sdist
  python3 -m pip download -q --no-deps --no-binary :all: -d .deps/sdist "llama-cpp-python==0.3.16"
  echo "$MINJA_SDIST_SHA256  .deps/sdist/$MINJA_SDIST" | sha256sum -c --quiet
  python3 - ".deps/sdist/$MINJA_SDIST" .deps/minja/include/minja "$MINJA_HPP_SHA256" <<'PY'
import hashlib, os, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    data = t.extractfile("llama_cpp_python-0.3.16/vendor/llama.cpp/vendor/minja/minja.hpp").read()
if hashlib.sha256(data).hexdigest() != sys.argv[3]:
    sys.exit("[setup] minja.hpp in the sdist does not have the pinned sha256")
os.makedirs(sys.argv[2], exist_ok=True)
with open(os.path.join(sys.argv[2], "minja.hpp"), "wb") as f:
    f.write(data)
PY
  rm -rf .deps/sdist
fi

CUDA="${FLASHDLLM_CUDA:-}"
if [[ -z "$CUDA" ]]; then
  if command -v nvcc >/dev/null 2>&1; then CUDA=ON; else CUDA=OFF; fi
fi
# The cuDNN frontend's C++ headers (header-only, pinned; PyPI has no other source of them): the
# cuDNN attention path of the CUDA backend (src/kernels/cuda/attention_cudnn.h). Only the wheel's
# include/ folder is kept, in .deps/cudnn-frontend; without it the build has no cuDNN path.
CUDNN_FRONTEND_VERSION=1.32.0
if [[ "$CUDA" == ON && "${FLASHDLLM_SKIP_DEPS:-0}" != 1 && ! -f .deps/cudnn-frontend/include/cudnn_frontend.h ]]; then
  echo "[setup] fetching the cuDNN frontend headers (pip wheel nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION)"
  rm -rf .deps/wheels && mkdir -p .deps/wheels
  if python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
      --platform manylinux_2_28_x86_64 -d .deps/wheels "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"; then
    python3 - .deps/wheels/nvidia_cudnn_frontend-*.whl .deps/cudnn-frontend <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [m for m in z.namelist() if m.startswith("include/")])
PY
  else
    echo "[setup] warning: could not download nvidia-cudnn-frontend; building without the cuDNN attention path"
  fi
  rm -rf .deps/wheels
fi

# CUTLASS / CuTe headers (header-only, pinned; the pip wheel nvidia-cutlass carries the C++ include
# tree): the Hopper (wgmma) attention kernel (src/kernels/cuda/attention_wgmma.cu). Only
# cutlass_library/source/include is kept, in .deps/cutlass/include; without it the build has no
# wgmma kernel and runs the mma.sync one everywhere.
CUTLASS_VERSION=4.2.0.0
if [[ "$CUDA" == ON && "${FLASHDLLM_SKIP_DEPS:-0}" != 1 && ! -f .deps/cutlass/include/cute/tensor.hpp ]]; then
  echo "[setup] fetching the CUTLASS/CuTe headers (pip wheel nvidia-cutlass==$CUTLASS_VERSION)"
  rm -rf .deps/wheels && mkdir -p .deps/wheels
  if ! { python3 -m pip download -q --no-deps --only-binary=:all: -d .deps/wheels "nvidia-cutlass==$CUTLASS_VERSION" &&
         python3 - .deps/wheels/nvidia_cutlass-*.whl .deps/cutlass <<'PY'
import os, sys, zipfile
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for m in z.namelist():
        if m.startswith(prefix) and not m.endswith("/"):
            dst = os.path.join(sys.argv[2], "include", m[len(prefix):])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(m) as src, open(dst, "wb") as out:
                out.write(src.read())
PY
  }; then
    echo "[setup] warning: could not fetch nvidia-cutlass; building without the wgmma attention kernel"
    rm -rf .deps/cutlass
  fi
  rm -rf .deps/wheels
fi

LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  [[ "$CUDA" == ON ]] && LAUNCHER+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
echo "[setup] configuring (CUDA backend: $CUDA${LAUNCHER[*]:+, ccache})"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFLASHDLLM_CUDA="$CUDA" -DFLASHDLLM_WERROR="${FLASHDLLM_WERROR:-OFF}" \
  "${LAUNCHER[@]}" >/dev/null
JOBS=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # all cores (GNU nproc honours OMP_NUM_THREADS)
echo "[setup] building flashdllm with $JOBS jobs (the tests are built by scripts/test.sh)"
cmake --build build -j "$JOBS" --target flashdllm
echo "[setup] done: ./build/flashdllm"
