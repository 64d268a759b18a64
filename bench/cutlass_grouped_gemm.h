// CUTLASS's sm_90 grouped GEMM (KernelPtrArrayTmaWarpSpecializedCooperative: a persistent kernel
// walking every group's 128 x 128 output tiles, TMA loads, wgmma, fp32 accumulation) over the row
// groups of a mixture-of-experts layer, for moe_bench: issue 47 asks for CUTLASS's sm90 grouped GEMM
// or a cuBLASLt route "with a measured choice", and the engine's WMMA grouped kernel is 1.9-5x
// slower than one cuBLASLt GEMM per expert at 16-64 slots (bench/results/2026-12-07-fp8-fused/).
//   out[r, n] = Σ_k a[r, k] · w[g, n, k]   for the rows r in [offsets[g], offsets[g + 1]) of group g
// a [M, K] bf16 row-major with each group's rows contiguous (the sorted, gathered rows); w [G, N, K]
// bf16 (nn.Linear layout per expert: K-major B); out [M, N] bf16 row-major. The group sizes are read
// on the device (offsets [G + 1] int32 device memory): one small kernel writes CUTLASS's per-group
// problem shapes, pointers and strides, then the grouped kernel runs; nothing waits for the host, so
// a captured layer replays it. Groups of zero rows have no tiles. Bench-only; built with the sm_90
// kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashdllm::bench {

/// Whether this build has it.
bool cutlass_grouped_built() noexcept;

/// Bytes of device workspace for `groups` groups: the per-group arguments plus CUTLASS's own (its
/// per-SM tensor maps), 256-byte aligned.
size_t cutlass_grouped_workspace(int groups);

/// Runs it. K % 8 == 0 and N % 8 == 0 (16-byte TMA rows), 16-byte aligned a / w / out, offsets
/// non-decreasing from 0; `workspace` of cutlass_grouped_workspace(groups) bytes. Throws
/// std::runtime_error when CUTLASS cannot implement it or the launch fails.
void cutlass_grouped_gemm_bf16(const __nv_bfloat16* a, const __nv_bfloat16* w, const int32_t* offsets, int groups,
                               int N, int K, __nv_bfloat16* out, void* workspace, cudaStream_t stream);

}  // namespace flashdllm::bench
