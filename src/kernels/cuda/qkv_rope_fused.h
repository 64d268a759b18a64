// Fused QKV projection + RoPE + K/V cache write (Flash-Cache part 1; reference-algorithms §D.5
// step 2, Flash-dLLM's fused cache-update kernel): the Backend::qkv_rope_store of the CUDA backend
// without the [T, 3·H·Dh] intermediate. One CTA computes a 64-token × head_dim tile of the product
// xn · wqkvᵀ on the tensor cores (WMMA 16×16×16 BF16, FP32 accumulators, cp.async double-buffered
// 64×32 / head_dim×32 operand tiles) — a tile is exactly one head of q, k or v, so both halves of
// every rotation pair are on chip — and its epilogue rotates q and k with the RoPE table and writes
// q to the dense output and k, v straight into their store rows.
//
// Numerics equal the unfused path (cuBLASLt GEMM to bf16, then rope_store_bf16): the FP32 sum is
// rounded to bf16 first, then rotated with separately rounded fp32 products and sums. Only the
// summation order of the dot products differs (last-bit differences where a sum lies on a bf16
// rounding boundary).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Arguments of qkv_rope_store_fused_bf16. All pointers are device memory.
struct FusedQkvArgs {
  const __nv_bfloat16* xn = nullptr;    ///< [T, d_model] normalised hidden rows
  const __nv_bfloat16* wqkv = nullptr;  ///< [3·H·Dh, d_model]: rows of q_proj | k_proj | v_proj
  const int32_t* positions = nullptr;   ///< [T] RoPE positions, each in [0, max_positions)
  const int32_t* rows = nullptr;        ///< [T] destination rows of the K/V stores, each in [0, store_rows)
  const float* cos = nullptr;           ///< [max_positions, Dh/2]
  const float* sin = nullptr;           ///< [max_positions, Dh/2]
  __nv_bfloat16* q_out = nullptr;       ///< [T, H·Dh]
  __nv_bfloat16* k_store = nullptr;     ///< [store_rows, H·Dh]
  __nv_bfloat16* v_store = nullptr;     ///< [store_rows, H·Dh]
  int64_t tokens = 0;                   ///< T
  int64_t d_model = 0;
  int n_heads = 0;   ///< H
  int head_dim = 0;  ///< Dh
  int64_t max_positions = 0;
  int64_t store_rows = 0;
  int* error_flags = nullptr;  ///< device int or null; kErrRopePosition / kErrStoreRow
};

/// Whether the fused kernel handles these operands: head_dim 64 or 128, d_model a positive multiple
/// of 32, H·Dh and the row pitches 16-byte aligned, every pointer 16-byte aligned.
bool qkv_rope_fused_supported(const FusedQkvArgs& args) noexcept;

/// Same contract as rope_store_bf16 after the GEMM (see rope_store.h): q_out[t] = rotated q, k_store
/// and v_store rows rows[t] = rotated k and v; a position out of range poisons q_out[t] with NaN and
/// skips the store rows; a store row out of range skips them; both set their bit in *error_flags.
/// tokens == 0 is a no-op. Throws Error(kUnsupported) if !qkv_rope_fused_supported(args),
/// Error(kDevice) on launch failure.
void qkv_rope_store_fused_bf16(const FusedQkvArgs& args, cudaStream_t stream);

}  // namespace flashdllm::kernels
