// FP8 E4M3 ("e4m3fn", OCP 8-bit floating point spec v1.0): 1 sign, 4 exponent (bias 7), 3 mantissa
// bits; no infinities, S.1111.111 is NaN, the largest finite value is 448 = 1.75·2^8, the smallest
// normal 2^-6, subnormals m·2^-9 (m = 1..7). Conversions as CUDA's __nv_fp8_e4m3 from float with
// __NV_SATFINITE does them: round to nearest even, finite values (and ±inf) beyond ±448 saturate to
// ±448, NaN becomes 0x7F.
//
// Block-scaled FP8 as Hugging Face's "fp8" quantization (DeepSeek-V3, Qwen3-FP8, LLaDA2 FP8 uploads)
// stores it: a weight [N, K] in e4m3 with one fp32 `weight_scale_inv` per 128 x 128 block (a grid of
// ceil(N/128) x ceil(K/128); edge blocks are partial), dequantised as w = e4m3 · scale_inv; the
// activations of a W8A8 product are quantised per token in 1 x 128 groups of K ("dynamic" scheme:
// scale = amax / 448 per group, DeepSeek-V3's act_quant / vLLM's per_token_group_quant_fp8).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace flashdllm {

inline constexpr float kE4M3Max = 448.0f;
/// Rows and columns of a weight block, and columns of an activation group.
inline constexpr int64_t kFp8Block = 128;

/// ceil(n / kFp8Block): block rows / columns of a dimension of n.
constexpr int64_t fp8_blocks(int64_t n) noexcept { return (n + kFp8Block - 1) / kFp8Block; }

/// e4m3 bits -> float (exact; NaN for S.1111.111).
float e4m3_to_f32(uint8_t b) noexcept;

/// float -> e4m3 bits: round to nearest even, saturating to ±448 (±inf too); NaN -> 0x7F.
uint8_t f32_to_e4m3(float f) noexcept;

/// e4m3(x / scale) · scale, the value an e4m3 store with that scale gives back. scale > 0.
inline float e4m3_round(float x, float scale) noexcept { return e4m3_to_f32(f32_to_e4m3(x / scale)) * scale; }

/// The scale of a group or block whose largest magnitude is `amax`: amax / 448, or 1 where that is
/// not positive: an all-zero group, and one so small (amax < 448 · 2^-149 ~ 6.3e-43) that amax / 448
/// underflows to 0, whose values all round to 0 in e4m3 at scale 1 (e4m3's least step is 2^-9).
inline float fp8_scale_of(float amax) noexcept {
  const float s = amax / kE4M3Max;
  return s > 0.0f ? s : 1.0f;
}

/// The multiplier that quantises the activation group whose largest magnitude is `amax`: 448 / amax
/// (IEEE division, once per group), 1 where fp8_scale_of is 1 (an all-zero or underflowing group),
/// and 0 when 448 / amax overflows fp32 (amax below 448 / FLT_MAX ~ 1.3e-36), which tells
/// fp8_act_encode to divide by the scale instead.
/// A multiplication per value instead of a division (TransformerEngine's scale / scale_inv pair):
/// DeepSeek-V3's act_quant divides, and x · (448 / amax) differs from x / (amax / 448) by at most an
/// ulp before the e4m3 rounding, so the two agree except at e4m3 rounding ties.
inline float fp8_act_multiplier(float amax) noexcept {
  if (!(amax / kE4M3Max > 0.0f)) return 1.0f;
  const float r = kE4M3Max / amax;
  return r <= std::numeric_limits<float>::max() ? r : 0.0f;
}

/// e4m3 bits of activation value x in a group of scale s = fp8_scale_of(amax) and multiplier
/// r = fp8_act_multiplier(amax): f32_to_e4m3(x · r), or f32_to_e4m3(x / s) when r is 0. The CPU
/// oracle and the device quantisers (kernels/cuda/fp8.cu) compute exactly this.
inline uint8_t fp8_act_encode(float x, float s, float r) noexcept { return f32_to_e4m3(r != 0.0f ? x * r : x / s); }

/// Quantises weight w (fp32 [N, K], row-major) in 128 x 128 blocks: scale_inv [fp8_blocks(N),
/// fp8_blocks(K)] = fp8_scale_of(block amax), q [N, K] = f32_to_e4m3(w / scale_inv) (what
/// transformers' FP8 quantiser stores; partial edge blocks take the amax of their own elements).
/// Runs bands of 128 rows on OpenMP threads (from 2^20 elements); the bytes do not depend on the
/// thread count.
void quantize_fp8_blocks(const float* w, int64_t N, int64_t K, uint8_t* q, float* scale_inv) noexcept;

/// w [N, K] = e4m3_to_f32(q) · scale_inv[n / 128, k / 128] (fp32 products).
void dequantize_fp8_blocks(const uint8_t* q, const float* scale_inv, int64_t N, int64_t K, float* w) noexcept;

/// The dynamic 1 x 128 activation quantisation of one row x [K], returned dequantised:
/// out[k] = e4m3_to_f32(fp8_act_encode(x[k], s_g, r_g)) · s_g with s_g = fp8_scale_of(amax_g) and
/// r_g = fp8_act_multiplier(amax_g), amax_g = max |x| over k's group g = k / 128.
/// A non-finite group amax makes the group NaN (the product then turns non-finite, as on the device).
/// out may alias x.
void fake_quantize_fp8_groups(const float* x, int64_t K, float* out) noexcept;

}  // namespace flashdllm
