// Block-FP8 (W8A8, DeepSeek-V3's block FP8; core/fp8.h) on the device: the dynamic 1 x 128
// activation quantisation that feeds cuBLASLt's block-scaled FP8 GEMM (GemmLt::matmul_fp8), and the
// dequantising kernels of the route for GPUs without it (Ampere, Ada: their cuBLASLt scales FP8
// per tensor only), which then runs the bf16 GEMM on the dequantised operands.
//
// Every value matches the CPU oracle's (core/fp8.cpp) bit for bit before the GEMM: scale =
// amax / 448 in IEEE fp32 (1 for an all-zero group), q = fp8_act_encode(x, scale, 448 / amax): e4m3
// of x times the multiplier, rounded to nearest even and saturated to ±448 (cvt.rn.satfinite), a
// group whose amax is not finite NaN (0x7F, the CPU's fake_quantize_fp8_groups makes it NaN too).
// Rows whose K is a multiple of 8 on 16-byte-aligned operands take 16-byte loads, two groups per warp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Where the activation scales of token t and K group g go: `outer_major` puts them at g·ld + t
/// (ld >= T: the tokens of one group together, cuBLASLt's VEC128_32F layout for a K-major operand),
/// otherwise at t·groups + g (row-major [T, groups], the layout of the CPU oracle).
struct Fp8ActScaleLayout {
  bool outer_major = true;
  int64_t ld = 0;  ///< outer_major only: the stride between groups (>= T)
};

/// q[T, K] (e4m3 bytes, row-major) and scales (F32, ceil(K/128) per token, `layout`) of x[T, K]
/// (bf16, row-major): per token and 1 x 128 group of K (the last one partial when K % 128 != 0).
/// T, K >= 0 (no-op when either is 0). Throws Error(kDevice) on launch failure.
void quantize_fp8_groups_bf16(const __nv_bfloat16* x, uint8_t* q, float* scales, int64_t T, int64_t K,
                              Fp8ActScaleLayout layout, cudaStream_t stream);

/// quantize_fp8_groups_bf16 of SwiGLU(gate_up) (gate_up bf16 [T, 2F], gate in columns [0, F); the
/// values swiglu_bf16 writes) into q [T, F] and scales, without writing them in bf16 when F % 8 == 0
/// and gate_up is 16-byte aligned (the MLP's down-projection input, fused into its producer);
/// otherwise swiglu_bf16 into act [T, F] first (act is scratch: unspecified afterwards). Throws
/// Error(kDevice) on launch failure.
void swiglu_quantize_fp8_groups_bf16(const __nv_bfloat16* gate_up, int64_t T, int64_t F, __nv_bfloat16* act, uint8_t* q,
                                     float* scales, Fp8ActScaleLayout layout, cudaStream_t stream);

/// out[T, K] = bf16(e4m3_to_f32(fp8_act_encode(x, s, r)) · s) per token and 1 x 128 group (the quantise-dequantise of
/// the activations for the dequantising route; the product e4m3 · s is rounded once, to bf16). out may alias x. Throws
/// Error(kDevice) on launch failure.
void fake_quantize_fp8_groups_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t T, int64_t K,
                                   cudaStream_t stream);

/// w[N, K] = bf16(e4m3_to_f32(q[n, k]) · scale[n / 128, k / 128]) (scale F32 row-major
/// [ceil(N/128), ceil(K/128)], the checkpoint's weight_scale_inv). Throws Error(kDevice) on launch
/// failure.
void dequantize_fp8_blocks_bf16(const uint8_t* q, const float* scale, int64_t N, int64_t K, __nv_bfloat16* w,
                                cudaStream_t stream);

/// dst[i] (+)= src[i] for i < n, both bf16 (f32 = false) or both f32, the sum in fp32 (a bf16 dst
/// rounded once): the block-scaled FP8 GEMM's padded-row output into the caller's out. Throws
/// Error(kDevice) on launch failure.
void add_into(const void* src, void* dst, int64_t n, bool f32, bool accumulate, cudaStream_t stream);

}  // namespace flashdllm::kernels
