#!/bin/bash
# qkv_bench on a few shapes + ncu of the fused 128x256 kernel and cuBLASLt's GEMM at 32 slots.
set -u
cd "$(dirname "$0")/.."
tree=$(git add -A >/dev/null 2>&1; git write-tree 2>/dev/null)
if [[ "$tree" == "${2:-}" ]]; then export FLASHDLLM_COMMIT=$3; echo "tree matches commit $3"; else echo "tree $tree: dirty"; fi
git reset -q 2>/dev/null
[[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]] || tar -xJf .carry/cudnn-frontend.tar.xz
[[ -f .deps/cutlass/include/cute/tensor.hpp ]] || tar -xJf .carry/cutlass.tar.xz
t0=$(date +%s)
FLASHDLLM_GPU_CHECK_BUDGET=120 bash scripts/gpu_check.sh --build-only > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
cmake --build build-gpu -j16 --target qkv_bench >> $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built $(( $(date +%s) - t0 )) s"
export LD_LIBRARY_PATH=/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu/openblas-openmp:/tmp/fdllm-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
timeout 120 build-gpu/bench/qkv_bench --slots 1,16,32 --prefill-tokens 8192 --iters 5 --json $OUT/qkv_bench.json | grep -E "gemm|unfused|128x256 s1 M|auto"
[[ "${1:-}" == ncu ]] || exit 0
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
timeout 120 $NCU --kernel-name regex:device_kernel --launch-skip 4 --launch-count 1 $S --section SourceCounters \
  build-gpu/bench/qkv_bench --slots 32 --prefill-tokens 4096 --iters 1 --warmup 0 > $OUT/ncu_fused.txt 2>&1; echo "ncu fused rc=$?"
timeout 120 $NCU --kernel-name regex:"nvjet|xmma|gemm|cutlass" --launch-count 1 $S \
  build-gpu/bench/qkv_bench --slots 32 --prefill-tokens 4096 --iters 1 --warmup 0 > $OUT/ncu_cublas.txt 2>&1; echo "ncu cublas rc=$?"
for f in $OUT/ncu_fused.txt $OUT/ncu_cublas.txt; do grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|L2 Hit|Registers" $f | head -14; done
echo "elapsed $(( $(date +%s) - t0 )) s"
