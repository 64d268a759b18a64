#include "core/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace flashdllm {
namespace {

float decode(uint8_t b) noexcept {
  const int e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(static_cast<float>(m), -9);  // subnormal: m · 2^-9
  else
    v = std::ldexp(static_cast<float>(8 + m), e - 10);  // (1 + m/8) · 2^(e-7)
  return (b & 0x80) != 0 ? -v : v;
}

const std::array<float, 256>& table() noexcept {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int i = 0; i < 256; ++i) a[static_cast<size_t>(i)] = decode(static_cast<uint8_t>(i));
    return a;
  }();
  return t;
}

}  // namespace

float e4m3_to_f32(uint8_t b) noexcept { return table()[b]; }

uint8_t f32_to_e4m3(float f) noexcept {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7f;          // NaN
  if (abs >= 0x43e00000u) return sign | 0x7e;  // >= 448 (inf included): saturate to 448
  if (abs < 0x3c800000u) {                     // below 2^-6: subnormal, m = RNE(|f| · 2^9) in [0, 8]
    float a;
    std::memcpy(&a, &abs, 4);
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 512.0f)));
  }
  // Normal: keep 3 of fp32's 23 mantissa bits, round to nearest even (a carry moves the exponent up;
  // below 448 the result stays <= 448 = S.1111.110).
  const uint32_t r = abs + 0x7ffffu + ((abs >> 20) & 1u);
  const uint32_t e = (r >> 23) - 120u;  // fp32 bias 127 -> e4m3 bias 7
  return static_cast<uint8_t>(sign | (e << 3) | ((r >> 20) & 7u));
}

void quantize_fp8_blocks(const float* w, int64_t N, int64_t K, uint8_t* q, float* scale_inv) noexcept {
  const int64_t bn = fp8_blocks(N), bk = fp8_blocks(K);
  // Blocks are independent: one band of 128 rows per iteration, the same bytes at any thread count
  // (an 8B checkpoint's ~7G weights took ~50 s on one thread at --quantization fp8).
#pragma omp parallel for schedule(static) if (N * K >= (int64_t{1} << 20))
  for (int64_t i = 0; i < bn; ++i)
    for (int64_t j = 0; j < bk; ++j) {
      const int64_t r0 = i * kFp8Block, r1 = std::min(N, r0 + kFp8Block);
      const int64_t c0 = j * kFp8Block, c1 = std::min(K, c0 + kFp8Block);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * K + c]));
      const float s = fp8_scale_of(amax);
      scale_inv[i * bk + j] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) q[r * K + c] = f32_to_e4m3(w[r * K + c] / s);
    }
}

void dequantize_fp8_blocks(const uint8_t* q, const float* scale_inv, int64_t N, int64_t K, float* w) noexcept {
  const std::array<float, 256>& t = table();
  const int64_t bk = fp8_blocks(K);
  for (int64_t r = 0; r < N; ++r) {
    const float* s = scale_inv + (r / kFp8Block) * bk;
    for (int64_t c = 0; c < K; ++c) w[r * K + c] = t[q[r * K + c]] * s[c / kFp8Block];
  }
}

void fake_quantize_fp8_groups(const float* x, int64_t K, float* out) noexcept {
  for (int64_t c0 = 0; c0 < K; c0 += kFp8Block) {
    const int64_t c1 = std::min(K, c0 + kFp8Block);
    float amax = 0.0f;
    bool finite = true;
    for (int64_t c = c0; c < c1; ++c) {
      finite = finite && std::isfinite(x[c]);
      amax = std::max(amax, std::fabs(x[c]));
    }
    if (!finite) {
      for (int64_t c = c0; c < c1; ++c) out[c] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float s = fp8_scale_of(amax), r = fp8_act_multiplier(amax);
    for (int64_t c = c0; c < c1; ++c) out[c] = e4m3_to_f32(fp8_act_encode(x[c], s, r)) * s;
  }
}

}  // namespace flashdllm
