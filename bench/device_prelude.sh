#!/bin/bash
# shellcheck disable=SC2034  # B and t0 are used by the scripts that source this file
# The common start of a device-tool run script (bench/results/*/run*.sh), sourced so that each script
# holds only its measurements:
#
#   source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/device_prelude.sh" <tree> <label>
#
# It
#   - cds to the repository root and restores every tracked file missing from the copy (the large
#     ones are left out to fit the device tool's 64 MiB) from the copy's git objects where it has them,
#     saying how many are still missing;
#   - exports FLASHDLLM_COMMIT=<label> (results are labelled with it) only if the copy's `git
#     write-tree` equals <tree>, else prints "dirty" (compare with `git rev-parse <commit>^{tree}`);
#   - unpacks the carried .carry/{cudnn-frontend,cutlass,minja}.tar.xz into .deps/ and builds
#     with `scripts/gpu_check.sh --build-only` (exits 1 with the log's tail on failure) within
#     BUILD_BUDGET seconds (default 200), its gpu_check.sh output going to BUILD_OUT (default $OUT);
#     PRELUDE_BUILD=0 leaves the build to the script (one that builds two trees, or extra targets:
#     `prelude_build_targets TARGET...` configures build-gpu and builds just those, exiting 1 with
#     the errors on failure);
#   - exports LD_LIBRARY_PATH for the carried Debian packages (/tmp/fdllm-deps, scripts/gpu_env.sh)
#     and .carry/dw (libdw/libelf for Nsight's importer), and sets B=build-gpu, t0 (start, epoch s) and
#     left() (seconds left of LIMIT, default 300).
# Carry .carry with the device tool: `carry: [".carry"]`.
set -u
cd "$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)" || exit 1
_missing=$(git ls-files -d | wc -l)
if ((_missing > 0)); then
  git ls-files -d -z | xargs -0 git checkout -- 2>/dev/null
  echo "restored $((_missing - $(git ls-files -d | wc -l))) of $_missing missing tracked files from git"
fi
_tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$_tree" == "${1:-}" ]]; then
  export FLASHDLLM_COMMIT=$2
  echo "tree matches $2"
else
  echo "tree $_tree != ${1:-}: dirty"
fi
git reset -q 2>/dev/null
mkdir -p .deps
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz -C .deps
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz -C .deps
[[ -f .deps/minja/include/minja/minja.hpp ]] || tar -xJf .carry/minja.tar.xz -C .deps
t0=$(date +%s)
left() { echo $((${LIMIT:-300} - ($(date +%s) - t0))); }
if [[ "${PRELUDE_BUILD:-1}" != 0 ]]; then
  (OUT=${BUILD_OUT:-${OUT:-}} FLASHDLLM_GPU_CHECK_BUDGET=${BUILD_BUDGET:-200} bash scripts/gpu_check.sh --build-only \
    >/tmp/build.log 2>&1) || {
    tail -30 /tmp/build.log
    exit 1
  }
  echo "built $(($(date +%s) - t0)) s on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
fi
export LD_LIBRARY_PATH=$PWD/.carry/dw:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
B=build-gpu
prelude_build_targets() {
  local ROOT=$PWD FDLLM_TAG=prelude LOG=/tmp/prelude_build.log
  source scripts/gpu_env.sh
  fdllm_use_carried_deps > /dev/null 2>&1
  fdllm_configure_cmd build-gpu
  "${CONFIGURE_CMD[@]}" > /tmp/cfg.log 2>&1 || { tail -20 /tmp/cfg.log; exit 1; }
  cmake --build build-gpu -j16 --target "$@" > /tmp/b.log 2>&1 || { grep -E "error" /tmp/b.log | head -20; exit 1; }
  echo "built $* at $(($(date +%s) - t0)) s on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
}
