// Element types and their conversions.
//
// DType names follow safetensors' dtype strings ("BF16", "F16", "F32", "F8_E4M3", ...).
// bf16/f16 <-> f32 conversions are bit-exact IEEE / round-to-nearest-even, matching
// PyTorch's `tensor.to(torch.bfloat16)` and `.float()`.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace flashdllm {

/// kF8E4M3: OCP FP8 E4M3 ("e4m3fn": bias 7, no infinities, max 448; core/fp8.h has its conversions),
/// safetensors "F8_E4M3", block-scaled weights (ModelConfig::fp8).
enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI32, kI64, kU8, kI8, kBool, kF8E4M3 };

/// Bytes per element.
size_t dtype_size(DType t) noexcept;
/// safetensors spelling ("F32", "BF16", ...).
const char* dtype_name(DType t) noexcept;
/// Parses a safetensors dtype string; nullopt for unknown strings.
std::optional<DType> parse_dtype(std::string_view s) noexcept;

/// bfloat16 bits -> float (exact).
inline float bf16_to_f32(uint16_t b) noexcept {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// float -> bfloat16 bits, round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) noexcept {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// IEEE half bits -> float (exact, handles subnormals, inf, NaN).
float f16_to_f32(uint16_t h) noexcept;
/// float -> IEEE half bits, round to nearest even.
uint16_t f32_to_f16(float f) noexcept;

/// Widens `n` elements of `src` (dtype F32, F16 or BF16) into float `dst`.
/// Throws Error(kUnsupported) for other dtypes.
void convert_to_f32(DType src_dtype, const void* src, float* dst, size_t n);

/// Rounds `n` floats to bf16 bits (RNE).
void convert_f32_to_bf16(const float* src, uint16_t* dst, size_t n) noexcept;

}  // namespace flashdllm
