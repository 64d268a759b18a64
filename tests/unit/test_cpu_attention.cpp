// The CPU backend's blocked attention (src/backend/cpu/cpu_attention.h) against the row-by-row
// definition cpu::attend_row (cpu_ops.h): bit-identical outputs, not merely close, on every vector
// instruction set this CPU runs (the oracle's results must not depend on the machine), over
// head_dim not a multiple of 8, 1-9 query rows (every block remainder), single keys, key ranges not
// starting at 0, several heads; and CpuBackend::attention over block tables of very different tile
// lengths, with rows that no tile covers left untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_ops.h"

namespace flashdllm {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

/// attend_row over rows [r0, r1) of every head, into out (row stride H·Dh).
void reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int heads,
               int64_t Dh, int64_t r0, int64_t r1, int64_t k_begin, int64_t k_end, float scale, std::vector<float>& out) {
  const int64_t HD = heads * Dh;
  std::vector<double> scores, acc(static_cast<size_t>(Dh));
  for (int64_t r = r0; r < r1; ++r)
    for (int h = 0; h < heads; ++h)
      cpu::attend_row(q.data() + r * HD + h * Dh, k.data() + h * Dh, v.data() + h * Dh, HD, k_begin, k_end, Dh, scale,
                      scores, acc, out.data() + r * HD + h * Dh);
}

std::vector<cpu::SimdLevel> supported_levels() {
  std::vector<cpu::SimdLevel> v;
  for (auto l : {cpu::SimdLevel::kBaseline, cpu::SimdLevel::kAvx2, cpu::SimdLevel::kAvx512})
    if (cpu::simd_supported(l)) v.push_back(l);
  return v;
}

TEST(CpuAttention, BaselineAlwaysSupportedAndBestIsSupported) {
  EXPECT_TRUE(cpu::simd_supported(cpu::SimdLevel::kBaseline));
  EXPECT_TRUE(cpu::simd_supported(cpu::best_simd_level()));
}

TEST(CpuAttention, BlockedRowsAreBitIdenticalToAttendRowOnEveryInstructionSet) {
  struct Shape {
    int heads;
    int64_t Dh, nq, k_begin, k_end;
  };
  const std::vector<Shape> shapes = {
      {1, 128, 4, 0, 176}, {2, 128, 9, 0, 177}, {2, 64, 3, 5, 70},  {1, 24, 5, 0, 67},  {3, 17, 7, 2, 200},
      {1, 8, 1, 0, 1},     {1, 7, 2, 3, 4},     {2, 1, 6, 0, 33},   {1, 40, 16, 10, 311}, {1, 128, 2, 100, 101},
  };
  for (cpu::SimdLevel level : supported_levels()) {
    for (const Shape& s : shapes) {
      SCOPED_TRACE(::testing::Message() << cpu::simd_level_name(level) << " heads " << s.heads << " Dh " << s.Dh
                                        << " nq " << s.nq << " keys [" << s.k_begin << ", " << s.k_end << ")");
      const int64_t HD = s.heads * s.Dh, rows = std::max(s.nq, s.k_end);
      const auto seed = static_cast<uint32_t>(s.Dh * 1000 + s.nq);
      // Wide score range (sd 3 and scale 1): large exponent differences in the softmax.
      const auto q = randn(static_cast<size_t>(rows * HD), seed, 3.0f), k = randn(q.size(), seed + 1),
                 v = randn(q.size(), seed + 2);
      std::vector<float> want(q.size(), 0.0f), got(q.size(), 0.0f);
      reference(q, k, v, s.heads, s.Dh, 0, s.nq, s.k_begin, s.k_end, 1.0f, want);
      std::vector<double> scratch(static_cast<size_t>(cpu::kAttnScratchRows * (s.k_end - s.k_begin)));
      for (int h = 0; h < s.heads; ++h)
        cpu::attend_rows(level, q.data() + h * s.Dh, HD, s.nq, k.data() + h * s.Dh, v.data() + h * s.Dh, HD, s.k_begin,
                         s.k_end, s.Dh, 1.0f, scratch.data(), got.data() + h * s.Dh, HD);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
    }
  }
}

TEST(CpuAttention, BackendOpMatchesAttendRowAndLeavesUncoveredRowsAlone) {
  const int heads = 2;
  const int64_t Dh = 40, HD = heads * Dh, N = 300, Tq = 120;
  // Tiles of very different lengths, one key range not starting at 0, a single key, an empty
  // query range; rows [110, 120) are in no tile.
  const std::vector<AttentionTile> tiles = {
      {0, 1, 0, 1}, {1, 18, 1, 18}, {18, 70, 37, 290}, {70, 70, 0, 5}, {70, 100, 100, 101}, {100, 110, 0, 300}};
  const auto q = randn(static_cast<size_t>(Tq * HD), 7), k = randn(static_cast<size_t>(N * HD), 8),
             v = randn(static_cast<size_t>(N * HD), 9);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  const float sentinel = 12345.0f;
  std::vector<float> want(q.size(), sentinel);
  for (const AttentionTile& t : tiles) reference(q, k, v, heads, Dh, t.q_start, t.q_end, t.k_start, t.k_end, scale, want);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    auto be = make_cpu_backend(threads);
    std::vector<float> got(q.size(), sentinel);
    std::vector<AttentionTile> table = tiles;
    be->attention(Tensor(const_cast<float*>(q.data()), DType::kF32, DeviceKind::kCPU, {Tq, HD}),
                  Tensor(const_cast<float*>(k.data()), DType::kF32, DeviceKind::kCPU, {N, HD}),
                  Tensor(const_cast<float*>(v.data()), DType::kF32, DeviceKind::kCPU, {N, HD}),
                  Tensor(table.data(), DType::kI32, DeviceKind::kCPU, {static_cast<int64_t>(table.size()), 4}), heads,
                  scale, Tensor(got.data(), DType::kF32, DeviceKind::kCPU, {Tq, HD}));
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
    for (int64_t i = 110 * HD; i < Tq * HD; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], sentinel) << "element " << i;
  }
}

// plan_attention's host copy (HostAttentionPlan, what the CUDA backend routes tiles by) must describe
// the table: one tile per table row, no more score tiles; empty is always accepted.
TEST(CpuAttention, PlanAttentionChecksTheHostCopyOfTheTable) {
  auto be = make_cpu_backend(1);
  std::vector<AttentionTile> tiles = {{0, 4, 0, 8}, {4, 6, 8, 9}};
  const Tensor table(tiles.data(), DType::kI32, DeviceKind::kCPU, {2, 4});
  EXPECT_NO_THROW(be->plan_attention(table, 6, 9, 1));
  EXPECT_NO_THROW(be->plan_attention(table, 6, 9, 1, HostAttentionPlan{tiles.data(), 2, tiles.data(), 1, 40, 0.1f}));
  for (const HostAttentionPlan& bad : {HostAttentionPlan{tiles.data(), 1, nullptr, 0, 40, 0.1f},
                                       HostAttentionPlan{tiles.data(), 2, tiles.data(), 3, 40, 0.1f},
                                       HostAttentionPlan{nullptr, 2, nullptr, 0, 40, 0.1f}}) {
    try {
      be->plan_attention(table, 6, 9, 1, bad);
      ADD_FAILURE() << "a host plan of " << bad.n_tiles << " tiles / " << bad.n_score_tiles << " score tiles passed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("host plan"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace flashdllm
