// A plain CUTLASS sm_90 GEMM (out[M, N] = x[M, K] · w[N, K]ᵀ, bf16 in and out, fp32 accumulation)
// with the same main loop as the fused QKV kernel (128×256 tiles, cooperative, persistent) and one
// of CUTLASS's own epilogues, for qkv_bench: it separates the main loop's speed from the fused
// epilogue's. Bench-only; built when the sm_90 kernels are (CUTLASS headers, sm_90 in the archs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace flashdllm::bench {

/// Whether this build has the reference GEMM.
bool cutlass_gemm_ref_built() noexcept;

/// The reference's epilogue: CUTLASS's TMA warp-specialised epilogue (shared-memory staging, TMA
/// stores); the same with the main loop given the fused 128x256b kernel's stage count (its staging
/// tile's shared memory carved out as well); CUTLASS's no-shared-memory epilogue (registers to
/// global memory).
enum class RefEpilogue { kTma, kTmaCarved, kNoSmem };

/// Runs it. Needs an sm_90 device, K % 8 == 0, 16-byte aligned pointers. Throws
/// std::runtime_error on failure.
void cutlass_gemm_ref(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out, int M, int N, int K,
                      RefEpilogue epilogue, cudaStream_t stream);

/// The main loop's pipeline stages of that configuration.
int cutlass_gemm_ref_stages(RefEpilogue epilogue) noexcept;

}  // namespace flashdllm::bench
