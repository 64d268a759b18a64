// core/fp8.h: e4m3 conversions against a brute-force nearest-value search over the 254 finite e4m3
// values (ties to the even mantissa), the edge values __nv_fp8_e4m3 (SATFINITE) defines, and the
// block / group quantisers against the per-element error bound of 3 mantissa bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/fp8.h"

namespace flashdllm {
namespace {

/// The e4m3 value of bits b, computed from the format's definition (not through the library).
double reference_value(int b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (b & 0x80) != 0 ? -v : v;
}

/// The bits RNE-with-saturation gives for x, by search: the nearest finite value, ties to the even
/// code (an even mantissa), beyond 448 the largest.
uint8_t reference_encode(float x) {
  if (std::isnan(x)) return 0x7f;
  const double a = std::fabs(static_cast<double>(x));
  const int sign = std::signbit(x) ? 0x80 : 0;
  if (a >= 448.0) return static_cast<uint8_t>(sign | 0x7e);
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int b = 0; b <= 0x7e; ++b) {
    const double d = std::fabs(reference_value(b) - a);
    if (d < best_d || (d == best_d && (b & 1) == 0)) best = b, best_d = d;
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8, DTypeIsTheSafetensorsF8E4M3) {
  EXPECT_EQ(parse_dtype("F8_E4M3"), DType::kF8E4M3);
  EXPECT_STREQ(dtype_name(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
}

TEST(Fp8, DecodesEveryCodeAsTheFormatDefines) {
  for (int b = 0; b < 256; ++b) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(b));
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), reference_value(b)) << b;
    EXPECT_EQ(f32_to_e4m3(v), b) << "round trip of code " << b;
  }
}

TEST(Fp8, EdgeValues) {
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-448.0f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(463.99f), 0x7e);  // would round to 480, which does not exist: saturates
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);  // SATFINITE
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half of it: tie to even (0)
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0001f, -10)), 0x01);
  EXPECT_EQ(f32_to_e4m3(3.0f * std::ldexp(1.0f, -10)), 0x02);   // 1.5 subnormal steps: tie to even (2)
  EXPECT_EQ(f32_to_e4m3(15.0f * std::ldexp(1.0f, -10)), 0x08);  // 7.5 steps: up to the smallest normal
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);                        // 1 + 1/16: tie between 1 and 1.125 -> 1 (mantissa 0)
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);                        // 1 + 3/16: tie -> 1.25 (mantissa 2)
  EXPECT_EQ(f32_to_e4m3(432.0f), 0x7e);                         // tie between 416 and 448 -> 448 (mantissa 6)
  EXPECT_EQ(f32_to_e4m3(424.0f), 0x7d);                         // 416
  EXPECT_EQ(f32_to_e4m3(15.5f), 0x58);                          // tie between 15 and 16 -> 16 (carry into the exponent)
}

TEST(Fp8, RoundsLikeTheNearestValueSearch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-14, 10);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), expo(rng)) * (i % 2 ? -1.0f : 1.0f);
    ASSERT_EQ(f32_to_e4m3(x), reference_encode(x)) << x;
  }
  // Every midpoint between neighbouring codes (the ties) and its two float neighbours.
  for (int b = 0; b < 0x7e; ++b) {
    const float mid = static_cast<float>((reference_value(b) + reference_value(b + 1)) / 2);
    for (const float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)})
      ASSERT_EQ(f32_to_e4m3(x), reference_encode(x)) << x;
  }
}

/// |e4m3_round(x, s) − x| ≤ 2^-4·|x| in the normal range, ≤ s·2^-10 (half a subnormal step) below.
double element_bound(double x, double s) { return std::max(std::ldexp(std::fabs(x), -4), s * std::ldexp(1.0, -10)); }

TEST(Fp8, WeightBlocksHavePartialEdgesAndThreeBitError) {
  const int64_t N = 200, K = 300;  // 2 x 3 blocks, the last row and column blocks partial
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(N * K)), back(w.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = nd(rng) * (i % 7 == 0 ? 30.0f : 0.05f);
  std::vector<uint8_t> q(w.size());
  std::vector<float> s(static_cast<size_t>(fp8_blocks(N) * fp8_blocks(K)));
  ASSERT_EQ(s.size(), 6u);
  quantize_fp8_blocks(w.data(), N, K, q.data(), s.data());
  dequantize_fp8_blocks(q.data(), s.data(), N, K, back.data());
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t bj = 0; bj < 3; ++bj) {
      double amax = 0;
      for (int64_t r = bi * 128; r < std::min(N, bi * 128 + 128); ++r)
        for (int64_t c = bj * 128; c < std::min(K, bj * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(double(w[r * K + c])));
      EXPECT_FLOAT_EQ(s[bi * 3 + bj], static_cast<float>(amax / 448.0)) << bi << "," << bj;
    }
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c) {
      const double sc = s[(r / 128) * 3 + c / 128];
      ASSERT_LE(std::fabs(double(back[r * K + c]) - w[r * K + c]), element_bound(w[r * K + c], sc)) << r << "," << c;
      ASSERT_EQ(back[r * K + c], e4m3_to_f32(q[r * K + c]) * static_cast<float>(sc));
    }
}

TEST(Fp8, ActivationGroupsAreOneTokenBy128) {
  const int64_t K = 300;
  std::vector<float> x(K), out(K);
  for (int64_t k = 0; k < K; ++k) x[k] = std::sin(0.37f * k) * (k < 128 ? 100.0f : k < 256 ? 0.01f : 3.0f);
  fake_quantize_fp8_groups(x.data(), K, out.data());
  for (int64_t g = 0; g < 3; ++g) {
    float amax = 0;
    for (int64_t k = g * 128; k < std::min(K, g * 128 + 128); ++k) amax = std::max(amax, std::fabs(x[k]));
    const float s = amax / 448.0f, r = 448.0f / amax;  // the values are multiplied by 448 / amax
    for (int64_t k = g * 128; k < std::min(K, g * 128 + 128); ++k) {
      ASSERT_EQ(out[k], e4m3_to_f32(reference_encode(x[k] * r)) * s) << k;
      ASSERT_LE(std::fabs(double(out[k]) - x[k]), element_bound(x[k], s)) << k;
    }
  }
  std::vector<float> zeros(K, 0.0f), zout(K, 1.0f);
  fake_quantize_fp8_groups(zeros.data(), K, zout.data());
  for (float v : zout) EXPECT_EQ(v, 0.0f);
  // A group so small that 448 / amax overflows fp32: its values are divided by the scale instead.
  std::vector<float> tiny(K), tout(K);
  for (int64_t k = 0; k < K; ++k) tiny[k] = 1e-37f * static_cast<float>((k % 9) - 4);
  ASSERT_EQ(fp8_act_multiplier(4e-37f), 0.0f);
  fake_quantize_fp8_groups(tiny.data(), K, tout.data());
  for (int64_t k = 0; k < 128; ++k) {
    const float s = fp8_scale_of(4e-37f);
    ASSERT_EQ(tout[k], e4m3_to_f32(reference_encode(tiny[k] / s)) * s) << k;
    ASSERT_LE(std::fabs(double(tout[k]) - tiny[k]), element_bound(tiny[k], s)) << k;
  }
  // A group whose amax / 448 underflows to 0 (amax ~1e-43): scale 1, every value rounds to 0, none NaN.
  std::vector<float> under{0.0f, 1e-43f, -5e-44f, 0.0f}, uout(4, 1.0f);
  EXPECT_EQ(fp8_scale_of(1e-43f), 1.0f);
  EXPECT_EQ(fp8_act_multiplier(1e-43f), 1.0f);
  fake_quantize_fp8_groups(under.data(), 4, uout.data());
  for (float v : uout) EXPECT_EQ(v, 0.0f);
  x[5] = std::numeric_limits<float>::infinity();  // a non-finite group turns NaN, the others stay
  fake_quantize_fp8_groups(x.data(), K, out.data());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_FALSE(std::isnan(out[200]));
}

}  // namespace
}  // namespace flashdllm
