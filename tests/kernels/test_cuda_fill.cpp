// Backend::fill_normal (the device-side generator of dummy weights, `--load-format dummy`):
//   CpuFillNormal/...   the CPU backend against the definition in backend.h, its moments, seed and
//                       stream separation, argument checks, and make_dummy_weights on it;
//   Small/Sweep CudaFill/...  the CUDA backend against the CPU backend (twin, skip without a GPU),
//                       whole tensors, windows of a parent (FillWindow) and a tensor-parallel shard.
//
// Agreement rule of the twin: both backends evaluate the same double-precision expression, but
// the device's log/sin/cos may differ from glibc's by an ulp or two of a double. After rounding to
// fp32 that changes a value only when the double lies within those few ulps of an fp32 rounding
// midpoint (probability ~1e-8 per element), and then by exactly one fp32 ulp. So:
//   F32 output:  |cuda − cpu| ≤ 1 fp32 ulp, bitwise equal almost everywhere;
//   BF16 output: bits equal to RNE(cpu fp32), except where the cpu fp32 value lies within
//                kMidpointUlps fp32 ulps of the midpoint between two adjacent bf16 values — there a
//                1-ulp fp32 difference flips the rounding, and the device may give the other of the
//                two neighbours (never anything else).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>

#include "common/test_paths.h"
#include "core/check.h"
#include "core/philox.h"
#include "kernels/cuda_twin.h"
#include "model/model.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

using twin::Dev;
using twin::make;

/// fp32 ulps from a bf16 rounding midpoint within which a CPU/CUDA bf16 difference is accepted
/// (1 ulp is what a libm difference can cause; 2 for margin).
constexpr double kMidpointUlps = 2.0;

float ulp_of(float x) {
  const float a = std::fabs(x);
  return std::nextafter(a, std::numeric_limits<float>::infinity()) - a;
}

/// The definition of Backend::fill_normal for element i (backend.h), evaluated here directly.
float reference_value(uint64_t seed, uint64_t stream, int64_t i, float mean, float std) {
  const int64_t even = i & ~int64_t{1};
  const auto hi = static_cast<uint32_t>(static_cast<uint64_t>(even) >> 32), lo = static_cast<uint32_t>(even);
  const double u1 = philox_uniform(seed, stream, hi, lo);
  const double u2 = philox_uniform(seed ^ 0x9e3779b97f4a7c15ull, stream, hi, lo);
  const double r = std::sqrt(-2.0 * std::log(u1)) * static_cast<double>(std);
  const double a = 6.283185307179586 * u2;
  return static_cast<float>((i & 1 ? r * std::sin(a) : r * std::cos(a)) + static_cast<double>(mean));
}

std::vector<float> host_f32(Backend& be, const Tensor& t) { return twin::get(be, t); }

std::vector<uint16_t> host_bits(Backend& be, const Tensor& t) {
  std::vector<uint16_t> b(static_cast<size_t>(t.numel()));
  be.copy_to_host(b.data(), t);
  return b;
}

struct Moments {
  double mean = 0, std = 0, within_one_sigma = 0, pair_corr = 0;
};

Moments moments(const std::vector<float>& v, double mu, double sigma) {
  Moments m;
  double s = 0, ss = 0, inside = 0;
  for (float x : v) {
    s += x;
    inside += std::fabs(x - mu) <= sigma ? 1.0 : 0.0;
  }
  const double n = static_cast<double>(v.size());
  m.mean = s / n;
  for (float x : v) ss += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(ss / n);
  m.within_one_sigma = inside / n;
  // Correlation of the two halves of each Box-Muller pair (cos and sin of the same radius).
  double sxy = 0;
  for (size_t i = 0; i + 1 < v.size(); i += 2) sxy += (v[i] - m.mean) * (v[i + 1] - m.mean);
  m.pair_corr = sxy / std::floor(n / 2) / (m.std * m.std);
  return m;
}

/// Compares the twin's output of fill_normal with the CPU's by the rule in the file comment.
::testing::AssertionResult twin_agrees(Backend& cpu, Backend& tw, const Tensor& ref_t, const Tensor& got_t,
                                       const std::string& what) {
  const std::vector<float> ref = host_f32(cpu, ref_t);
  if (got_t.dtype == DType::kF32) {
    const std::vector<float> got = host_f32(tw, got_t);
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (std::memcmp(&got[i], &ref[i], 4) == 0) continue;
      ++differ;
      if (!(std::fabs(got[i] - ref[i]) <= ulp_of(ref[i])))
        return ::testing::AssertionFailure() << what << ": element " << i << " is " << got[i] << ", cpu " << ref[i]
                                             << " (more than 1 fp32 ulp apart)";
    }
    if (differ) std::printf("  %s: %zu of %zu F32 values 1 ulp from the CPU's\n", what.c_str(), differ, ref.size());
    return ::testing::AssertionSuccess();
  }
  if (got_t.dtype != DType::kBF16) return ::testing::AssertionFailure() << what << ": unexpected dtype";
  const std::vector<uint16_t> got = host_bits(tw, got_t);
  size_t flips = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const uint16_t want = f32_to_bf16(ref[i]);
    if (got[i] == want) continue;
    const bool neighbour = got[i] == static_cast<uint16_t>(want + 1) || got[i] == static_cast<uint16_t>(want - 1);
    const float mid = 0.5f * (bf16_to_f32(want) + bf16_to_f32(got[i]));  // exact: one more bit than bf16
    if (!neighbour || std::fabs(ref[i] - mid) > kMidpointUlps * ulp_of(ref[i]))
      return ::testing::AssertionFailure() << what << ": element " << i << " is bf16 " << bf16_to_f32(got[i])
                                           << ", expected RNE(" << ref[i] << ") = " << bf16_to_f32(want)
                                           << " (not a rounding-midpoint flip)";
    ++flips;
  }
  if (flips) std::printf("  %s: %zu of %zu bf16 values rounded the other way at a midpoint\n", what.c_str(), flips,
                         ref.size());
  return ::testing::AssertionSuccess();
}

// ------------------------------------------------------------------------------ CPU backend

TEST(CpuFillNormal, MatchesDefinitionBitForBit) {
  auto cpu = make_cpu_backend(2);
  // Odd length (last element takes the cosine half), a stream above 2^32, a mean and a std.
  for (auto [seed, stream, n, mean, std] : {std::tuple<uint64_t, uint64_t, int64_t, float, float>{0, 0, 7, 0.f, 0.02f},
                                           {0xdeadbeefcafebabeull, 5000000001ull, 1001, -0.25f, 3.0f},
                                           {42, 3, 2, 1.0f, 0.0f}}) {
    Dev d = make(*cpu, DType::kF32, n);
    cpu->fill_normal(d.t, seed, stream, mean, std);
    const std::vector<float> v = host_f32(*cpu, d.t);
    for (int64_t i = 0; i < n; ++i) {
      const float want = reference_value(seed, stream, i, mean, std);
      ASSERT_EQ(std::memcmp(&v[static_cast<size_t>(i)], &want, 4), 0)
          << "seed " << seed << " stream " << stream << " element " << i << ": " << v[static_cast<size_t>(i)]
          << " vs " << want;
    }
  }
}

TEST(CpuFillNormal, HasTheRequestedMeanAndStd) {
  auto cpu = make_cpu_backend(0);
  const int64_t n = (1 << 20) + 1;
  for (auto [mean, std] : {std::pair<float, float>{0.0f, 0.02f}, {0.5f, 2.0f}}) {
    Dev d = make(*cpu, DType::kF32, n);
    cpu->fill_normal(d.t, 7, 1, mean, std);
    const Moments m = moments(host_f32(*cpu, d.t), mean, std);
    const double sn = std::sqrt(static_cast<double>(n));
    // 5-sigma bounds of the sample statistics of n independent N(mean, std²) values.
    EXPECT_NEAR(m.mean, mean, 5.0 * std / sn) << "mean " << mean << " std " << std;
    EXPECT_NEAR(m.std, std, 5.0 * std / std::sqrt(2.0 * n)) << "mean " << mean << " std " << std;
    // P(|z| <= 1) = 0.682689 for a normal; binomial 5-sigma bound.
    EXPECT_NEAR(m.within_one_sigma, 0.682689, 5.0 * std::sqrt(0.682689 * 0.317311 / n));
    EXPECT_NEAR(m.pair_corr, 0.0, 5.0 / std::sqrt(n / 2.0)) << "Box-Muller halves correlated";
  }
}

TEST(CpuFillNormal, SeedsAndStreamsGiveDifferentValuesSameKeySameValues) {
  auto cpu = make_cpu_backend(0);
  const int64_t n = 4096;
  auto fill = [&](uint64_t seed, uint64_t stream) {
    Dev d = make(*cpu, DType::kF32, n);
    cpu->fill_normal(d.t, seed, stream, 0.0f, 1.0f);
    return host_f32(*cpu, d.t);
  };
  auto equal_count = [](const std::vector<float>& a, const std::vector<float>& b) {
    size_t e = 0;
    for (size_t i = 0; i < a.size(); ++i) e += a[i] == b[i];
    return e;
  };
  const std::vector<float> a = fill(1, 0);
  EXPECT_EQ(a, fill(1, 0)) << "same (seed, stream) must reproduce";
  EXPECT_EQ(equal_count(a, fill(2, 0)), 0u) << "seeds 1 and 2 share values";
  EXPECT_EQ(equal_count(a, fill(1, 1)), 0u) << "streams 0 and 1 share values";
  EXPECT_EQ(equal_count(a, fill(1, uint64_t{1} << 32)), 0u) << "streams 0 and 2^32 share values";
}

TEST(CpuFillNormal, StdZeroIsExactlyTheMean) {
  auto cpu = make_cpu_backend(1);
  Dev d = make(*cpu, DType::kF32, 33);
  cpu->fill_normal(d.t, 3, 9, 1.0f, 0.0f);
  for (float x : host_f32(*cpu, d.t)) ASSERT_EQ(x, 1.0f);
}

TEST(CpuFillNormal, RejectsBadArguments) {
  auto cpu = make_cpu_backend(1);
  Dev f = make(*cpu, DType::kF32, 8), i = make(*cpu, DType::kI32, 8);
  EXPECT_TRUE(twin::throws_error(*cpu, [&] { cpu->fill_normal(i.t, 0, 0, 0.f, 1.f); },
                                 ErrorCode::kInvalidArgument, "fill_normal"));
  EXPECT_TRUE(twin::throws_error(*cpu, [&] { cpu->fill_normal(f.t, 0, 0, 0.f, -1.f); },
                                 ErrorCode::kInvalidArgument, "std"));
  EXPECT_TRUE(twin::throws_error(*cpu, [&] { cpu->fill_normal(f.t, 0, 0, std::nanf(""), 1.f); },
                                 ErrorCode::kInvalidArgument, "mean"));
}

TEST(CpuFillNormal, DummyWeightsAreNormalMatricesAndUnitNorms) {
  auto cpu = make_cpu_backend(0);
  const ModelConfig cfg = load_model_config(test::golden_dir() / "config.json");
  const ModelWeights w = make_dummy_weights(*cpu, cfg, 5);
  const ModelWeights w2 = make_dummy_weights(*cpu, cfg, 6);
  ASSERT_EQ(w.layers.size(), static_cast<size_t>(cfg.n_layers));
  for (const Tensor* norm : {&w.ln_f, &w.layers[0].attn_norm, &w.layers.back().ff_norm})
    for (float x : host_f32(*cpu, *norm)) ASSERT_EQ(x, 1.0f) << "norm weights must be exactly 1";
  const std::vector<float> wte = host_f32(*cpu, w.wte), head = host_f32(*cpu, w.lm_head);
  const Moments m = moments(wte, 0.0, 0.02);
  const double n = static_cast<double>(wte.size());
  EXPECT_NEAR(m.mean, 0.0, 5 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(m.std, 0.02, 5 * 0.02 / std::sqrt(2 * n));
  EXPECT_NE(wte, head) << "tensors of one seed must differ (stream = tensor index)";
  EXPECT_NE(host_f32(*cpu, w.layers[0].wqkv), host_f32(*cpu, w.layers[1].wqkv));
  EXPECT_NE(wte, host_f32(*cpu, w2.wte)) << "seeds 5 and 6 gave the same embedding";
  // Element 0 of the embedding (stream 0) as the definition gives it.
  EXPECT_EQ(wte[0], reference_value(5, 0, 0, 0.0f, 0.02f));
}

// A window of a parent tensor (a tensor-parallel rank's slice of a dummy weight) takes the parent's
// values: a [3, 4] block from parent index 10 with parent rows of 7 (its rows start at 10, 17, 24:
// odd starts split Box-Muller pairs), a contiguous run from the odd index 3, a column at stride 9.
TEST(CpuFillNormal, WindowsTakeTheParentsValues) {
  auto cpu = make_cpu_backend(2);
  for (auto [rows, cols, offset, parent_cols] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{3, 4, 10, 7},
                                                 {1, 5, 3, 0},
                                                 {4, 1, 0, 9}}) {
    Dev d = make(*cpu, DType::kF32, rows * cols);
    const Tensor t = d.t.reshape({rows, cols});
    cpu->fill_normal(t, 77, 4, 0.5f, 2.0f, FillWindow{offset, parent_cols});
    const std::vector<float> v = host_f32(*cpu, t);
    const int64_t pc = parent_cols > 0 ? parent_cols : cols;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float want = reference_value(77, 4, offset + r * pc + c, 0.5f, 2.0f);
        ASSERT_EQ(std::memcmp(&v[static_cast<size_t>(r * cols + c)], &want, 4), 0) << r << "," << c;
      }
  }
  Dev f = make(*cpu, DType::kF32, 8);
  const Tensor m = f.t.reshape({2, 4});
  EXPECT_TRUE(twin::throws_error(*cpu, [&] { cpu->fill_normal(m, 0, 0, 0.f, 1.f, FillWindow{-1, 0}); },
                                 ErrorCode::kInvalidArgument, "offset"));
  EXPECT_TRUE(twin::throws_error(*cpu, [&] { cpu->fill_normal(m, 0, 0, 0.f, 1.f, FillWindow{0, 3}); },
                                 ErrorCode::kInvalidArgument, "parent_cols"));
}

// The agreement rule itself (host data standing in for a device): only a neighbouring bf16 value
// of a CPU value within kMidpointUlps of a rounding midpoint passes.
TEST(CpuFillNormal, TwinRuleAcceptsOnlyMidpointFlips) {
  auto cpu = make_cpu_backend(1);
  const float mid = 1.0f + 0x1p-8f;  // halfway between bf16 1.0 (0x3F80) and 1 + 2^-7 (0x3F81)
  auto check = [&](float ref_value, uint16_t got_bits) {
    Dev ref = make(*cpu, DType::kF32, 1), got = make(*cpu, DType::kBF16, 1);
    cpu->copy_from_host(ref.t, &ref_value);
    cpu->copy_from_host(got.t, &got_bits);
    return static_cast<bool>(twin_agrees(*cpu, *cpu, ref.t, got.t, "rule"));
  };
  EXPECT_TRUE(check(mid + 0x1p-23f, 0x3F81));   // exact RNE
  EXPECT_TRUE(check(mid + 0x1p-23f, 0x3F80));   // 1 fp32 ulp above the midpoint: flip accepted
  EXPECT_FALSE(check(mid + 0x1p-20f, 0x3F80));  // 8 ulps away: a real difference
  EXPECT_FALSE(check(1.0f, 0x3F82));            // two bf16 ulps away
}

// ------------------------------------------------------------------------------ CUDA twin

enum class Size { kSmall, kSweep };
void PrintTo(Size s, std::ostream* os) { *os << (s == Size::kSmall ? "small" : "sweep"); }
std::string size_name(const ::testing::TestParamInfo<Size>& i) { return i.param == Size::kSmall ? "small" : "sweep"; }

class CudaFill : public twin::TwinTest, public ::testing::WithParamInterface<Size> {
 protected:
  bool small() const { return GetParam() == Size::kSmall; }
};

TEST_P(CudaFill, MatchesCpuAfterRounding) {
  const std::vector<int64_t> sizes =
      small() ? std::vector<int64_t>{1, 2, 7, 1001} : std::vector<int64_t>{4097, (1 << 22) + 1};
  std::vector<DType> dtypes = {twin_->weight_dtype()};
  if (twin_->weight_dtype() != DType::kF32) dtypes.push_back(DType::kF32);  // CUDA also writes F32
  for (int64_t n : sizes)
    for (DType dt : dtypes)
      for (auto [seed, stream, mean, std] : {std::tuple<uint64_t, uint64_t, float, float>{0, 0, 0.f, 0.02f},
                                             {0xdeadbeefcafebabeull, 5000000001ull, -0.25f, 3.0f},
                                             {11, 2, 1.0f, 0.0f}}) {
        Dev ref = make(*cpu_, DType::kF32, n), got = make(*twin_, dt, n);
        twin::poison(*twin_, got.t);
        cpu_->fill_normal(ref.t, seed, stream, mean, std);
        twin_->fill_normal(got.t, seed, stream, mean, std);
        EXPECT_TRUE(twin_agrees(*cpu_, *twin_, ref.t, got.t,
                                "n " + std::to_string(n) + " " + dtype_name(dt) + " seed " + std::to_string(seed) +
                                    " stream " + std::to_string(stream)));
      }
}

TEST_P(CudaFill, DummyWeightsMatchCpu) {
  const ModelConfig cfg = load_model_config(test::golden_dir() / "config.json");
  const ModelWeights a = make_dummy_weights(*cpu_, cfg, 1234);
  const ModelWeights b = make_dummy_weights(*twin_, cfg, 1234);
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.wte, b.wte, "wte"));
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.lm_head, b.lm_head, "lm_head"));
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.ln_f, b.ln_f, "ln_f"));
  const size_t last = a.layers.size() - 1;
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[last].w_gate_up, b.layers[last].w_gate_up, "w_gate_up"));
  if (!small()) {
    for (size_t l = 0; l < a.layers.size(); ++l) {
      const std::string L = "layer " + std::to_string(l) + " ";
      EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[l].attn_norm, b.layers[l].attn_norm, L + "attn_norm"));
      EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[l].wqkv, b.layers[l].wqkv, L + "wqkv"));
      EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[l].attn_out, b.layers[l].attn_out, L + "attn_out"));
      EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[l].ff_norm, b.layers[l].ff_norm, L + "ff_norm"));
      EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[l].ff_out, b.layers[l].ff_out, L + "ff_out"));
    }
  }
}

TEST_P(CudaFill, WindowsMatchCpu) {
  const int64_t rows = small() ? 3 : 257, cols = small() ? 5 : 1001, pc = small() ? 11 : 4096;
  std::vector<DType> dtypes = {twin_->weight_dtype()};
  if (twin_->weight_dtype() != DType::kF32) dtypes.push_back(DType::kF32);
  for (DType dt : dtypes)
    for (int64_t offset : {int64_t{0}, int64_t{7}, int64_t{3} << 32}) {
      Dev ref = make(*cpu_, DType::kF32, rows * cols), got = make(*twin_, dt, rows * cols);
      const Tensor r2 = ref.t.reshape({rows, cols}), g2 = got.t.reshape({rows, cols});
      twin::poison(*twin_, got.t);
      cpu_->fill_normal(r2, 5, 3, 0.0f, 0.02f, FillWindow{offset, pc});
      twin_->fill_normal(g2, 5, 3, 0.0f, 0.02f, FillWindow{offset, pc});
      EXPECT_TRUE(twin_agrees(*cpu_, *twin_, r2, g2, std::string(dtype_name(dt)) + " offset " + std::to_string(offset)));
    }
  // A tensor-parallel rank's dummy shard (windows of every split tensor).
  const ModelConfig cfg = load_model_config(test::golden_dir() / "config.json");
  const TensorParallel tp{1, 2, nullptr};
  const ModelWeights a = make_dummy_weights(*cpu_, cfg, 99, tp), b = make_dummy_weights(*twin_, cfg, 99, tp);
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.lm_head, b.lm_head, "rank 1 lm_head"));
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[0].wqkv, b.layers[0].wqkv, "rank 1 wqkv"));
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[0].attn_out, b.layers[0].attn_out, "rank 1 attn_out"));
  EXPECT_TRUE(twin_agrees(*cpu_, *twin_, a.layers[0].ff_out, b.layers[0].ff_out, "rank 1 ff_out"));
}

TEST_P(CudaFill, EmptyTensorAndBadArguments) {
  Dev e = make(*twin_, twin_->weight_dtype(), 0);
  twin_->fill_normal(e.t, 1, 2, 0.f, 1.f);  // no-op
  twin_->synchronize();
  Dev f = make(*twin_, twin_->weight_dtype(), 8), i = make(*twin_, DType::kI32, 8);
  EXPECT_TRUE(twin::throws_error(*twin_, [&] { twin_->fill_normal(i.t, 0, 0, 0.f, 1.f); },
                                 ErrorCode::kInvalidArgument, "fill_normal"));
  EXPECT_TRUE(twin::throws_error(*twin_, [&] { twin_->fill_normal(f.t, 0, 0, 0.f, -1.f); },
                                 ErrorCode::kInvalidArgument, "std"));
  EXPECT_TRUE(twin::throws_error(*twin_, [&] { twin_->fill_normal(f.t, 0, 0, 0.f, INFINITY); },
                                 ErrorCode::kInvalidArgument, "std"));
}

INSTANTIATE_TEST_SUITE_P(Small, CudaFill, ::testing::Values(Size::kSmall), size_name);
INSTANTIATE_TEST_SUITE_P(Sweep, CudaFill, ::testing::Values(Size::kSweep), size_name);

}  // namespace
}  // namespace flashdllm
