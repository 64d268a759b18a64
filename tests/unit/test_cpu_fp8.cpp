// The CPU backend's FP8 ops (backend.h: matmul_fp8, QkvExtras::weight_scale / kv_scale), the oracle
// the CUDA FP8 GEMMs will be tested against:
//  * matmul_fp8 against a direct double-precision evaluation of its formula (activations quantised
//    per token and 1 x 128 group, weights dequantised per 128 x 128 block; partial blocks in both
//    dimensions), within fp32 accumulation error; and against the unquantised product within the
//    bound 3 mantissa bits give each factor (2^-4 relative, half a subnormal step absolute);
//  * qkv_rope_store with a block-FP8 wqkv equals the fp32 op on the dequantised operands, and with
//    per-head K/V scales stores exactly e4m3_round(value, scale of its head).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "common/host_tensors.h"
#include "common/expect_error.h"
#include "core/fp8.h"

namespace flashdllm {
namespace {

using test::host;
using test::randn;

/// A block-FP8 weight made from fp32 values.
struct Fp8Weight {
  int64_t N, K;
  std::vector<uint8_t> q;
  std::vector<float> scale;
  Fp8Weight(const std::vector<float>& w, int64_t n, int64_t k)
      : N(n), K(k), q(w.size()), scale(static_cast<size_t>(fp8_blocks(n) * fp8_blocks(k))) {
    quantize_fp8_blocks(w.data(), N, K, q.data(), scale.data());
  }
  Tensor tensor() { return Tensor(q.data(), DType::kF8E4M3, DeviceKind::kCPU, {N, K}); }
  Tensor scales() { return Tensor(scale.data(), DType::kF32, DeviceKind::kCPU, {fp8_blocks(N), fp8_blocks(K)}); }
  double value(int64_t n, int64_t k) const {
    return double(e4m3_to_f32(q[n * K + k])) * scale[(n / 128) * fp8_blocks(K) + k / 128];
  }
};

/// |quantised − x| for a value of a group / block of scale s: 2^-4 relative, or half a subnormal step.
double quant_bound(double x, double s) { return std::max(std::ldexp(std::fabs(x), -4), s * std::ldexp(1.0, -10)); }

TEST(CpuFp8, MatmulIsTheBlockScaledFormula) {
  const int64_t T = 5, K = 300, N = 200;  // 2 x 3 weight blocks and 3 activation groups, the last ones partial
  std::vector<float> x = randn(T * K, 1, 1.0f), w = randn(N * K, 2, 0.05f);
  for (int64_t k = 128; k < 256; ++k) x[k] *= 40.0f;  // groups of different scales in row 0
  Fp8Weight fw(w, N, K);
  auto be = make_cpu_backend(2);
  std::vector<float> out(T * N, 0.0f), plain(T * N);
  be->matmul_fp8(host(x, T, K), fw.tensor(), fw.scales(), host(out, T, N), false);
  be->matmul(host(x, T, K), host(w, N, K), host(plain, T, N), false);
  int64_t differ = 0;
  for (int64_t t = 0; t < T; ++t) {
    // The row's groups, quantised as the formula says (scale = amax / 448 per 128 columns).
    std::vector<double> xq(K), sx(K);
    for (int64_t g = 0; g < K; g += 128) {
      float amax = 0;
      for (int64_t k = g; k < std::min(K, g + 128); ++k) amax = std::max(amax, std::fabs(x[t * K + k]));
      const float s = amax / 448.0f;
      for (int64_t k = g; k < std::min(K, g + 128); ++k) {
        xq[k] = double(e4m3_to_f32(f32_to_e4m3(x[t * K + k] / s))) * s;
        sx[k] = s;
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0, mag = 0, exact = 0, bound = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double wq = fw.value(n, k), xv = x[t * K + k], wv = w[n * K + k];
        ref += xq[k] * wq;
        mag += std::fabs(xq[k] * wq);
        exact += xv * wv;
        const double ew = quant_bound(wv, fw.scale[(n / 128) * 3 + k / 128]), ex = quant_bound(xv, sx[k]);
        bound += std::fabs(xv) * ew + ex * (std::fabs(wv) + ew);
      }
      const double got = out[t * N + n];
      // fp32 products summed in fp32 (any order): at most K roundings of the running magnitude.
      ASSERT_LE(std::fabs(got - ref), K * std::ldexp(1.0, -24) * mag + 1e-30) << t << "," << n;
      ASSERT_LE(std::fabs(got - exact), bound + K * std::ldexp(1.0, -24) * mag) << t << "," << n;
      differ += got != plain[t * N + n];
    }
  }
  EXPECT_GT(differ, T * N / 2) << "the operands were not quantised";
  // accumulate: out += product.
  std::vector<float> acc(T * N, 3.0f);
  be->matmul_fp8(host(x, T, K), fw.tensor(), fw.scales(), host(acc, T, N), true);
  for (int64_t i = 0; i < T * N; ++i) ASSERT_NEAR(acc[i], 3.0f + out[i], 1e-5f * (3.0f + std::fabs(out[i])));
}

TEST(CpuFp8, MatmulRefusesBadOperands) {
  const int64_t T = 2, K = 256, N = 128;
  std::vector<float> x(T * K, 1.0f), w(N * K, 0.5f), out(T * N);
  Fp8Weight fw(w, N, K);
  auto be = make_cpu_backend(1);
  std::vector<float> s3(3, 1.0f);
  test::expect_error(
      [&] {
        be->matmul_fp8(host(x, T, K), fw.tensor(), Tensor(s3.data(), DType::kF32, DeviceKind::kCPU, {1, 3}),
                       host(out, T, N), false);
      },
      ErrorCode::kInvalidArgument, {"matmul_fp8", "w_scale", "[1, 2]"});
  test::expect_error([&] { be->matmul_fp8(host(x, T, K), host(w, N, K), fw.scales(), host(out, T, N), false); },
                     ErrorCode::kInvalidArgument, {"matmul_fp8", "w"});
}

TEST(CpuFp8, QkvRopeStoreWithFp8WeightsAndKvScales) {
  const int64_t T = 3, D = 256, H = 2, Dh = 64, HD = H * Dh, KD = H * Dh, W = HD + 2 * KD, N = 4, P = 16;
  std::vector<float> x = randn(T * D, 3, 1.0f), w = randn(W * D, 4, 0.1f);
  Fp8Weight fw(w, W, D);
  // The operands matmul_fp8 multiplies, for the fp32 op: x per-group quantised, W dequantised.
  std::vector<float> xq(x.size()), wd(w.size());
  for (int64_t t = 0; t < T; ++t) fake_quantize_fp8_groups(&x[t * D], D, &xq[t * D]);
  dequantize_fp8_blocks(fw.q.data(), fw.scale.data(), W, D, wd.data());
  std::vector<float> cs(P * Dh / 2), sn(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) cs[i] = std::cos(0.1f * i), sn[i] = std::sin(0.1f * i);
  RopeTable rope{host(cs, P, Dh / 2), host(sn, P, Dh / 2)};
  std::vector<int32_t> pos = {3, 7, 11}, rows = {2, 0, 3};
  Tensor tpos(pos.data(), DType::kI32, DeviceKind::kCPU, {T}), trows(rows.data(), DType::kI32, DeviceKind::kCPU, {T});
  std::vector<float> kv_scale = {0.5f, 0.002f, 2.0f, 0.01f};  // K heads 0, 1, then V heads 0, 1
  auto be = make_cpu_backend(1);
  struct Out {
    std::vector<float> q, k, v, scratch;
  } got{std::vector<float>(T * HD), std::vector<float>(N * KD, 9.f), std::vector<float>(N * KD, 9.f),
        std::vector<float>(T * W)},
      want = got;
  QkvExtras fp8;
  fp8.weight_scale = fw.scales();
  fp8.kv_scale = Tensor(kv_scale.data(), DType::kF32, DeviceKind::kCPU, {2 * H});
  be->qkv_rope_store(host(x, T, D), fw.tensor(), fp8, tpos, trows, rope, H, host(got.q, T, HD), host(got.k, N, KD),
                     host(got.v, N, KD), host(got.scratch, T, W));
  be->qkv_rope_store(host(xq, T, D), host(wd, W, D), QkvExtras{}, tpos, trows, rope, H, host(want.q, T, HD),
                     host(want.k, N, KD), host(want.v, N, KD), host(want.scratch, T, W));
  EXPECT_EQ(got.q, want.q);  // the same SGEMM operands: the same bits
  int64_t rounded = 0;
  for (const int64_t r : {2, 0, 3})  // the rows written
    for (int64_t c = 0; c < KD; ++c) {
      const int64_t h = c / Dh;
      ASSERT_EQ(got.k[r * KD + c], e4m3_round(want.k[r * KD + c], kv_scale[h])) << r << "," << c;
      ASSERT_EQ(got.v[r * KD + c], e4m3_round(want.v[r * KD + c], kv_scale[H + h])) << r << "," << c;
      rounded += got.k[r * KD + c] != want.k[r * KD + c];
    }
  EXPECT_EQ(got.k[1 * KD], 9.f) << "store row 1 is written by no query row";
  EXPECT_GT(rounded, 0);
  std::vector<float> short_scale(3, 1.0f);
  fp8.kv_scale = Tensor(short_scale.data(), DType::kF32, DeviceKind::kCPU, {3});
  test::expect_error(
      [&] {
        be->qkv_rope_store(host(x, T, D), fw.tensor(), fp8, tpos, trows, rope, H, host(got.q, T, HD),
                           host(got.k, N, KD), host(got.v, N, KD), host(got.scratch, T, W));
      },
      ErrorCode::kInvalidArgument, {"qkv_rope_store", "kv_scale"});
}

}  // namespace
}  // namespace flashdllm
