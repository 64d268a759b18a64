// Grouped-query attention and q/k/v biases on the CPU backend (backend.h: query head h reads K/V
// head h / (H / Hkv)), at H / Hkv = 1, 4 and 7 (Dream-7B: 28 / 4):
//  * attention against an independent naive softmax(q·kᵀ)·v in double, and bit-identical to the
//    multi-head call on K/V with every K/V head repeated for its query heads (repeat_kv upstream);
//  * attention_verify and attention_importance (raw and probability mass) bit-identical to that
//    repeated multi-head call;
//  * qkv_rope_store with a narrower K/V store and a bias against the bias-free op on an input with
//    a column of ones and a weight with the bias as its last column (x·Wᵀ + b = [x 1]·[W b]ᵀ: the
//    bias must be added before RoPE).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "common/host_tensors.h"
#include "common/numerics.h"

namespace flashdllm {
namespace {

/// qkv_rope_store's extras with a q/k/v bias only.
QkvExtras bias_only(Tensor bias) {
  QkvExtras e;
  e.bias = bias;
  return e;
}

constexpr int64_t kDh = 24;  // not a multiple of 8: the blocked kernel's column tail runs too

using test::host;
using test::randn;
template <typename Tile>
Tensor table_of(std::vector<Tile>& t, int64_t ints) {
  return Tensor(t.data(), DType::kI32, DeviceKind::kCPU, {static_cast<int64_t>(t.size()), ints});
}

/// [rows, Hkv·Dh] -> [rows, H·Dh]: K/V head j copied to query heads j·group .. (j+1)·group - 1.
std::vector<float> repeat_kv(const std::vector<float>& kv, int64_t rows, int64_t hkv, int64_t group) {
  std::vector<float> out(static_cast<size_t>(rows * hkv * group * kDh));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < hkv * group; ++h)
      std::memcpy(&out[static_cast<size_t>((r * hkv * group + h) * kDh)],
                  &kv[static_cast<size_t>((r * hkv + h / group) * kDh)], kDh * sizeof(float));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Ratio {
  int heads, kv_heads;
};
class CpuGqa : public ::testing::TestWithParam<Ratio> {};

TEST_P(CpuGqa, AttentionMatchesNaiveAndRepeatedKv) {
  const auto [H, Hkv] = GetParam();
  const int64_t group = H / Hkv, HD = H * kDh, KD = Hkv * kDh, N = 90, Tq = 40;
  auto q = randn(static_cast<size_t>(Tq * HD), 1, 2.0f), k = randn(static_cast<size_t>(N * KD), 2),
       v = randn(static_cast<size_t>(N * KD), 3);
  std::vector<AttentionTile> tiles = {{0, 17, 0, 50}, {17, 40, 30, 90}};
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDh));
  auto be = make_cpu_backend(2);
  std::vector<float> got(q.size()), mha(q.size());
  be->attention(host(q, Tq, HD), host(k, N, KD), host(v, N, KD), table_of(tiles, 4), H, scale, host(got, Tq, HD));
  auto k_rep = repeat_kv(k, N, Hkv, group), v_rep = repeat_kv(v, N, Hkv, group);
  be->attention(host(q, Tq, HD), host(k_rep, N, HD), host(v_rep, N, HD), table_of(tiles, 4), H, scale,
                host(mha, Tq, HD));
  EXPECT_TRUE(same_bits(got, mha)) << "GQA differs from MHA over repeated K/V";
  // Naive: per row and query head, softmax over the tile's keys of K/V head h / group, in double.
  std::vector<float> want(q.size());
  for (const AttentionTile& t : tiles)
    for (int64_t r = t.q_start; r < t.q_end; ++r)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / group;
        std::vector<double> s;
        double m = -INFINITY, sum = 0.0;
        for (int64_t j = t.k_start; j < t.k_end; ++j) {
          double d = 0.0;
          for (int64_t i = 0; i < kDh; ++i) d += double(q[r * HD + h * kDh + i]) * k[j * KD + kh * kDh + i];
          s.push_back(d * scale);
          m = std::max(m, s.back());
        }
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int64_t i = 0; i < kDh; ++i) {
          double acc = 0.0;
          for (int64_t j = t.k_start; j < t.k_end; ++j) acc += s[j - t.k_start] * v[j * KD + kh * kDh + i];
          want[r * HD + h * kDh + i] = static_cast<float>(acc / sum);
        }
      }
  EXPECT_LE(test::rel_max_err(got, want), 1e-6);  // both double inside, one fp32 rounding each
}

TEST_P(CpuGqa, VerifyAndImportanceMatchRepeatedKv) {
  const auto [H, Hkv] = GetParam();
  const int64_t group = H / Hkv, HD = H * kDh, KD = Hkv * kDh, N = 60, Tq = 20;
  auto q = randn(static_cast<size_t>(Tq * HD), 4, 2.0f), k = randn(static_cast<size_t>(N * KD), 5),
       v = randn(static_cast<size_t>(N * KD), 6), kt = randn(static_cast<size_t>(Tq * KD), 7),
       vt = randn(static_cast<size_t>(Tq * KD), 8);
  auto k_rep = repeat_kv(k, N, Hkv, group), v_rep = repeat_kv(v, N, Hkv, group);
  auto kt_rep = repeat_kv(kt, Tq, Hkv, group), vt_rep = repeat_kv(vt, Tq, Hkv, group);
  std::vector<int32_t> keys = {3, 9, 0, 41, 59, 17, 22};
  Tensor key_rows(keys.data(), DType::kI32, DeviceKind::kCPU, {static_cast<int64_t>(keys.size())});
  // [kept T | drafts S | masks S | sources]: the second tile has the source rows of a shifted-logit model.
  std::vector<VerifyTile> vtiles = {{0, 8, 0, 4, 2, 0}, {8, 20, 2, 7, 3, 3}};
  auto be = make_cpu_backend(2);
  std::vector<float> got(q.size()), mha(q.size());
  be->attention_verify(host(q, Tq, HD), host(k, N, KD), host(v, N, KD), key_rows, host(kt, Tq, KD), host(vt, Tq, KD),
                       table_of(vtiles, kVerifyTileInts), H, 0.3f, host(got, Tq, HD));
  be->attention_verify(host(q, Tq, HD), host(k_rep, N, HD), host(v_rep, N, HD), key_rows, host(kt_rep, Tq, HD),
                       host(vt_rep, Tq, HD), table_of(vtiles, kVerifyTileInts), H, 0.3f, host(mha, Tq, HD));
  EXPECT_TRUE(same_bits(got, mha)) << "verify: GQA differs from MHA over repeated K/V";

  std::vector<AttentionTile> tiles = {{0, 5, 0, 30}, {5, 20, 25, 60}};
  for (bool mass : {false, true}) {
    std::vector<float> s_gqa(static_cast<size_t>(N), 0.5f), s_mha(static_cast<size_t>(N), 0.5f);
    be->attention_importance(host(q, Tq, HD), host(k, N, KD), table_of(tiles, 4), H, 0.2f, mass, 0.7f,
                             Tensor(s_gqa.data(), DType::kF32, DeviceKind::kCPU, {N}));
    be->attention_importance(host(q, Tq, HD), host(k_rep, N, HD), table_of(tiles, 4), H, 0.2f, mass, 0.7f,
                             Tensor(s_mha.data(), DType::kF32, DeviceKind::kCPU, {N}));
    EXPECT_TRUE(same_bits(s_gqa, s_mha)) << "importance (probability mass " << mass << ")";
  }
}

TEST_P(CpuGqa, QkvRopeStoreAddsTheBiasBeforeRope) {
  const auto [H, Hkv] = GetParam();
  const int64_t HD = H * kDh, KD = Hkv * kDh, W = HD + 2 * KD, D = 32, T = 9, N = 12, P = 64;
  auto x = randn(static_cast<size_t>(T * D), 9), w = randn(static_cast<size_t>(W * D), 10, 0.2f);
  auto b = randn(static_cast<size_t>(W), 11);
  std::vector<float> cos(static_cast<size_t>(P * kDh / 2)), sin(cos.size());
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < kDh / 2; ++i) {
      const float a = static_cast<float>(p) / std::pow(1e4f, static_cast<float>(2 * i) / kDh);
      cos[p * kDh / 2 + i] = std::cos(a);
      sin[p * kDh / 2 + i] = std::sin(a);
    }
  const RopeTable rope{host(cos, P, kDh / 2), host(sin, P, kDh / 2)};
  std::vector<int32_t> pos = {0, 5, 63, 7, 7, 1, 30, 2, 11}, rows = {11, 0, 3, 4, 5, 6, 7, 8, 1};
  Tensor tpos(pos.data(), DType::kI32, DeviceKind::kCPU, {T}), trows(rows.data(), DType::kI32, DeviceKind::kCPU, {T});
  // [x 1] and [W b]: the same affine map without a bias operand.
  std::vector<float> x1(static_cast<size_t>(T * (D + 1)), 1.0f), wb(static_cast<size_t>(W * (D + 1)));
  for (int64_t t = 0; t < T; ++t) std::memcpy(&x1[t * (D + 1)], &x[t * D], D * sizeof(float));
  for (int64_t r = 0; r < W; ++r) {
    std::memcpy(&wb[r * (D + 1)], &w[r * D], D * sizeof(float));
    wb[r * (D + 1) + D] = b[r];
  }
  auto be = make_cpu_backend(1);
  struct Out {
    std::vector<float> q, k, v, scratch;
  } got{std::vector<float>(T * HD), std::vector<float>(N * KD, 9.f), std::vector<float>(N * KD, 9.f),
        std::vector<float>(T * W)},
      want = got;
  be->qkv_rope_store(host(x, T, D), host(w, W, D), bias_only(Tensor(b.data(), DType::kF32, DeviceKind::kCPU, {W})),
                     tpos, trows, rope, H, host(got.q, T, HD), host(got.k, N, KD), host(got.v, N, KD),
                     host(got.scratch, T, W));
  be->qkv_rope_store(host(x1, T, D + 1), host(wb, W, D + 1), QkvExtras{}, tpos, trows, rope, H, host(want.q, T, HD),
                     host(want.k, N, KD), host(want.v, N, KD), host(want.scratch, T, W));
  // One fp32 GEMM each, summed in different orders: a few ulps of the |b| ~ 1 values.
  EXPECT_LE(test::rel_max_err(got.q, want.q), 1e-6);
  EXPECT_LE(test::rel_max_err(got.k, want.k), 1e-6);
  EXPECT_LE(test::rel_max_err(got.v, want.v), 1e-6);
  EXPECT_EQ(got.k[2 * KD], 9.f) << "store row 2 is written by no query row";
  // Wrong shapes are refused naming the op: a bias of the wrong length, K/V heads not dividing H.
  EXPECT_THROW(
      be->qkv_rope_store(host(x, T, D), host(w, W, D),
                         bias_only(Tensor(b.data(), DType::kF32, DeviceKind::kCPU, {W - 1})), tpos, trows, rope, H,
                         host(got.q, T, HD), host(got.k, N, KD), host(got.v, N, KD), host(got.scratch, T, W)),
      Error);
}

INSTANTIATE_TEST_SUITE_P(Ratios, CpuGqa, ::testing::Values(Ratio{3, 3}, Ratio{8, 2}, Ratio{7, 1}),
                         [](const auto& info) {
                           return "H" + std::to_string(info.param.heads) + "_Hkv" + std::to_string(info.param.kv_heads);
                         });

TEST(CpuGqaErrors, KvHeadsMustDivideQueryHeads) {
  auto be = make_cpu_backend(1);
  std::vector<float> q(4 * 6 * kDh), k(4 * 4 * kDh), out(q.size());  // 6 query heads over 4 K/V heads
  std::vector<AttentionTile> tiles = {{0, 4, 0, 4}};
  try {
    be->attention(host(q, 4, 6 * kDh), host(k, 4, 4 * kDh), host(k, 4, 4 * kDh), table_of(tiles, 4), 6, 1.f,
                  host(out, 4, 6 * kDh));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashdllm
