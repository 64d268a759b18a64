// Half-rotation ("rotate_half" / NeoX) RoPE on q and k, and the K/V scatter into store rows
// (Backend::qkv_rope_store after its GEMM; reference-algorithms §A.3 and §D.5 step 2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Arguments of rope_store_bf16. All pointers are device memory.
struct RopeStoreArgs {
  const __nv_bfloat16* qkv = nullptr;     ///< [T, (H + 2·Hkv)·Dh]: q | k | v columns (the GEMM output, bf16)
  const __nv_bfloat16* bias = nullptr;    ///< [(H + 2·Hkv)·Dh] q | k | v biases (weight dtype bf16), or null
  const __nv_bfloat16* q_norm = nullptr;  ///< [Dh] per-head QK-norm weight of q (bf16), or null (both or neither)
  const __nv_bfloat16* k_norm = nullptr;  ///< [Dh] per-head QK-norm weight of k (bf16), or null
  float norm_eps = 0.0f;                  ///< the QK-norm's epsilon (rms_norm_eps)
  const int32_t* positions = nullptr;     ///< [T] RoPE positions, each in [0, max_positions)
  const int32_t* rows = nullptr;          ///< [T] destination rows of the K/V stores, each in [0, store_rows)
  const float* cos = nullptr;             ///< [max_positions, Dh/2]
  const float* sin = nullptr;             ///< [max_positions, Dh/2]
  __nv_bfloat16* q_out = nullptr;         ///< [T, H·Dh]
  __nv_bfloat16* k_store = nullptr;       ///< [store_rows, Hkv·Dh]
  __nv_bfloat16* v_store = nullptr;       ///< [store_rows, Hkv·Dh]
  int64_t tokens = 0;                     ///< T
  int n_heads = 0;                        ///< H
  int n_kv_heads = 0;                     ///< Hkv (dividing H; 0 means H: multi-head attention)
  int head_dim = 0;                       ///< Dh (even)
  int64_t max_positions = 0;
  int64_t store_rows = 0;
  int* error_flags = nullptr;  ///< device int or null; kErrRopePosition / kErrStoreRow
};

/// For every token t, head h and i < Dh/2, with c = cos[pos_t, i], s = sin[pos_t, i]:
///   q_out[t, h, i]      = bf16(q1·c − q2·s),  q_out[t, h, i + Dh/2] = bf16(q2·c + q1·s)
/// where q1 = q[t, h, i], q2 = q[t, h, i + Dh/2] are the fp32 values of the bf16 GEMM output plus,
/// with `bias`, the fp32 value of its bf16 bias (one fp32 add, unrounded before the rotation); the
/// products and the sum are rounded separately in fp32 (no FMA), exactly as upstream's
/// `q*cos + rotate_half(q)*sin` in fp32. Same for the Hkv heads of k, written to k_store[rows[t]];
/// v (+ bias, rounded to bf16) is copied to v_store[rows[t]]. The bias thus costs no extra pass; the
/// GEMM's bf16 rounding comes before the bias add (upstream's bf16 nn.Linear adds it in the GEMM's
/// fp32 epilogue: at most one bf16 ulp of the sum apart). With q_norm / k_norm (LLaDA-MoE / OLMoE
/// `q_norm(q.reshape(-1, head_dim))`), each q (k) head vector u (bias added) is first normalised as
/// Backend::rmsnorm does, n = bf16(bf16(u·r)·w) with r = 1/sqrt(mean(u²) + norm_eps) in fp32 (the
/// sum of squares over the head, one warp per head), and n is rotated instead of u. A position out of range poisons
/// q_out[t] with NaN and skips the store rows; a row out of range skips the store rows; both set their bit in
/// *error_flags. tokens == 0 is a no-op. Throws Error(kDevice) on launch failure.
void rope_store_bf16(const RopeStoreArgs& args, cudaStream_t stream);

}  // namespace flashdllm::kernels
