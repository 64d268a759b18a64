// Backend::attention_importance (Flash-dLLM a_t, reference §D.6):
//  * CpuImportance: the CPU oracle against the formula written out naively in the test (raw q·k
//    and the probability-mass variant), accumulation into existing values, untouched keys.
//  * CudaImportance (twin): CUDA vs CPU on bf16-rounded inputs over Flash-Cache-like window tiles
//    (16-row windows over long per-slot key ranges, windows shorter than 16, more than 16 rows,
//    key ranges not starting at 0, a single key, empty query ranges), 1–3 and 32 heads, both
//    variants; keys outside every tile must keep their initial value exactly; invalid tiles are
//    reported as errors. Skips without a GPU (see kernels/cuda_twin.h).
//  * attention_with_importance (twin): the flash kernel's fused raw importance and its attention
//    output against the CPU's two separate ops, with further (tracked) tiles after the scored ones
//    that must not contribute, on the same cases (head_dim 128: the attention op's flash kernel).
#include <cmath>
#include <functional>
#include <random>

#include "kernels/cuda_twin.h"

namespace flashdllm {
namespace {

using twin::close;
using twin::Dev;
using twin::get;
using twin::make;
using twin::put;
using twin::put_i32;
using twin::randn_bf16;

/// CUDA sums the dot products in fp32 and adds per head / per 16-row pass with float atomics; the
/// CPU sums everything in double: the fp32 rounding of a few thousand terms, relative to max|ref|.
constexpr double kImportanceRelTol = 10 * test::kFp32OpRelTol;

struct ImpCase {
  std::string name;
  int64_t q_rows = 0, kv_rows = 0;
  int heads = 1;
  int head_dim = 128;
  std::vector<AttentionTile> tiles;
};

/// Per slot j a window tile of rows_per_slot[j] query rows over keys [j·l_max, j·l_max + seqlen_j).
ImpCase windows(const std::string& name, const std::vector<int32_t>& seqlens, const std::vector<int32_t>& rows,
                int32_t l_max, int heads, int head_dim = 128) {
  ImpCase c;
  c.name = name;
  c.heads = heads;
  c.head_dim = head_dim;
  int32_t q = 0;
  for (size_t j = 0; j < seqlens.size(); ++j) {
    const int32_t k0 = static_cast<int32_t>(j) * l_max;
    c.tiles.push_back({q, q + rows[j], k0, k0 + seqlens[j]});
    q += rows[j];
  }
  c.q_rows = q + 5;  // rows no tile lists (tracked rows) must not contribute
  c.kv_rows = static_cast<int64_t>(seqlens.size()) * l_max;
  return c;
}

/// The formula of backend.h, naively, in double.
std::vector<double> naive(const ImpCase& c, const std::vector<float>& q, const std::vector<float>& k, bool prob,
                          float scale, float weight, const std::vector<float>& init) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  std::vector<double> out(init.begin(), init.end());
  for (const AttentionTile& t : c.tiles)
    for (int32_t r = t.q_start; r < t.q_end; ++r)
      for (int h = 0; h < c.heads; ++h) {
        std::vector<double> s;
        for (int32_t key = t.k_start; key < t.k_end; ++key) {
          double d = 0;
          for (int i = 0; i < c.head_dim; ++i)
            d += static_cast<double>(q[r * HD + h * c.head_dim + i]) * k[key * HD + h * c.head_dim + i];
          s.push_back(d);
        }
        double m = -INFINITY, z = 0;
        for (double d : s) m = std::max(m, d * scale);
        for (double d : s) z += std::exp(d * scale - m);
        for (int32_t key = t.k_start; key < t.k_end; ++key) {
          const double d = s[static_cast<size_t>(key - t.k_start)];
          out[static_cast<size_t>(key)] += weight * (prob ? std::exp(d * scale - m) / z : d);
        }
      }
  return out;
}

/// Runs the op on `be`; scores start at `init`; returns them.
std::vector<float> run(Backend& be, const ImpCase& c, const std::vector<float>& q, const std::vector<float>& k,
                       bool prob, float scale, float weight, const std::vector<float>& init) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const DType at = be.activation_dtype();
  Dev qd = make(be, at, c.q_rows, HD), kd = make(be, at, c.kv_rows, HD);
  Dev sd = make(be, DType::kF32, c.kv_rows);
  Dev td = make(be, DType::kI32, std::max<int64_t>(1, static_cast<int64_t>(c.tiles.size())), 4);
  put(be, qd.t, q);
  put(be, kd.t, k);
  put(be, sd.t, init);
  std::vector<int32_t> table;
  for (const AttentionTile& t : c.tiles) table.insert(table.end(), {t.q_start, t.q_end, t.k_start, t.k_end});
  if (table.empty()) table.assign(4, 0);
  put_i32(be, td.t, table);
  Tensor tt = td.t.slice_rows(0, static_cast<int64_t>(c.tiles.size()));
  be.attention_importance(qd.t, kd.t, tt, c.heads, scale, prob, weight, sd.t);
  return get(be, sd.t);
}

/// attention_with_importance on `be` over the case's tiles (all scored) followed by one unscored tile
/// per slot-sized range over the extra query rows; returns {scores, attention output}.
std::pair<std::vector<float>, std::vector<float>> run_fused(Backend& be, const ImpCase& c, const std::vector<float>& q,
                                                            const std::vector<float>& k, const std::vector<float>& v,
                                                            float scale, float weight, const std::vector<float>& init) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const DType at = be.activation_dtype();
  Dev qd = make(be, at, c.q_rows, HD), kd = make(be, at, c.kv_rows, HD), vd = make(be, at, c.kv_rows, HD);
  Dev od = make(be, at, c.q_rows, HD), sd = make(be, DType::kF32, c.kv_rows);
  std::vector<int32_t> table;
  int32_t last_row = 0;
  for (const AttentionTile& t : c.tiles) {
    table.insert(table.end(), {t.q_start, t.q_end, t.k_start, t.k_end});
    last_row = std::max(last_row, t.q_end);
  }
  // Unscored tiles: the remaining query rows against the whole store (they touch every key).
  const auto n_scored = static_cast<int64_t>(c.tiles.size());
  if (last_row < c.q_rows) table.insert(table.end(), {last_row, static_cast<int32_t>(c.q_rows), 0, static_cast<int32_t>(c.kv_rows)});
  Dev td = make(be, DType::kI32, static_cast<int64_t>(table.size() / 4), 4);
  put(be, qd.t, q);
  put(be, kd.t, k);
  put(be, vd.t, v);
  put(be, od.t, std::vector<float>(static_cast<size_t>(c.q_rows * HD), 0.f));
  put(be, sd.t, init);
  put_i32(be, td.t, table);
  be.attention_with_importance(qd.t, kd.t, vd.t, td.t, c.heads, scale, od.t, n_scored, weight, sd.t);
  return {get(be, sd.t), get(be, od.t)};
}

struct Inputs {
  std::vector<float> q, k, init;
};

std::vector<bool> covered_keys(const ImpCase& c);

/// CUDA scores against CPU scores: the accumulated part (got − init vs ref − init) of the keys some
/// tile covers within kImportanceRelTol of max|ref − init|, so the initial values do not hide errors;
/// every other key bit-identical to its initial value. On top of the relative bound each key may
/// differ by the fp32 roundings of its accumulator: the CPU sums a key in double and rounds once,
/// the GPU adds into the fp32 score once per (tile, head, pass of kRowsPerPass query rows), each add
/// rounding to half an ulp of the running score (whose magnitude is the initial value's, ~3, while
/// one head's probability mass is ~1e-4: 32 heads' roundings alone are ~0.2% of it).
void expect_scores_match(const ImpCase& c, const std::vector<float>& got, const std::vector<float>& ref,
                         const std::vector<float>& init) {
  constexpr int64_t kRowsPerPass = 16;  // src/kernels/cuda/attention_importance.cu (the fused kernel: 64+)
  const std::vector<bool> cov = covered_keys(c);
  std::vector<int64_t> adds(got.size(), 0);
  for (const AttentionTile& t : c.tiles)
    for (int64_t k = t.k_start; k < t.k_end; ++k)
      adds[static_cast<size_t>(k)] += c.heads * ((t.q_end - t.q_start + kRowsPerPass - 1) / kRowsPerPass);
  double max_ref = 0.0;
  for (size_t t = 0; t < got.size(); ++t)
    if (cov[t]) max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[t]) - init[t]));
  int64_t changed_outside = 0, off = 0;
  double worst = 0.0;
  size_t worst_at = 0;
  for (size_t t = 0; t < got.size(); ++t) {
    if (!cov[t]) {
      changed_outside += got[t] != init[t];
      continue;
    }
    const double magnitude = std::max(std::fabs(static_cast<double>(ref[t])), std::fabs(static_cast<double>(init[t])));
    const double half_ulp =
        0.5 * (std::nextafter(static_cast<float>(magnitude), INFINITY) - static_cast<float>(magnitude));
    const double bound = kImportanceRelTol * max_ref + static_cast<double>(adds[t] + 1) * half_ulp;
    const double d = std::fabs(static_cast<double>(got[t]) - ref[t]);
    if (!(d <= bound)) {
      ++off;
      if (!(d <= worst)) {
        worst = d;
        worst_at = t;
      }
    }
  }
  EXPECT_EQ(off, 0) << c.name << ": " << off << " keys off; worst key " << worst_at << ": got " << got[worst_at]
                    << ", ref " << ref[worst_at] << " (init " << init[worst_at] << ", " << adds[worst_at]
                    << " adds, max|ref - init| " << max_ref << ")";
  EXPECT_EQ(changed_outside, 0) << "keys outside every scored tile were modified";
}

Inputs inputs(const ImpCase& c) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const uint64_t seed = std::hash<std::string>()(c.name);
  Inputs in;
  in.q = randn_bf16(static_cast<size_t>(c.q_rows * HD), seed, 0.5f);
  in.k = randn_bf16(static_cast<size_t>(c.kv_rows * HD), seed + 1, 0.5f);
  in.init = randn_bf16(static_cast<size_t>(c.kv_rows), seed + 2, 3.0f);
  return in;
}

std::vector<bool> covered_keys(const ImpCase& c) {
  std::vector<bool> cov(static_cast<size_t>(c.kv_rows), false);
  for (const AttentionTile& t : c.tiles)
    if (t.q_end > t.q_start)
      for (int32_t key = t.k_start; key < t.k_end; ++key) cov[static_cast<size_t>(key)] = true;
  return cov;
}

std::vector<ImpCase> small_cases() {
  std::vector<ImpCase> v;
  v.push_back(windows("2 slots, 16-row windows", {129, 64}, {16, 16}, 192, 2));
  v.push_back(windows("3 slots, short windows, 1 head", {7, 128, 40}, {11, 1, 16}, 130, 1));
  ImpCase c = windows("offset keys, single key, empty rows", {20}, {16}, 64, 3, 64);
  c.kv_rows = 300;
  c.q_rows = 40;
  c.tiles = {{0, 16, 100, 180}, {16, 17, 299, 300}, {17, 17, 5, 9}, {17, 40, 0, 33}};  // 23 rows: two passes
  v.push_back(c);
  return v;
}

std::vector<ImpCase> sweep_cases() {
  std::vector<ImpCase> v;
  v.push_back(windows("8 slots x 16 rows, 32 heads", std::vector<int32_t>(8, 640), std::vector<int32_t>(8, 16), 768,
                      32));
  v.push_back(windows("odd lengths", {1, 2, 127, 129, 255, 257}, {16, 3, 16, 9, 16, 1}, 384, 3));
  v.push_back(windows("64-row tiles", {300, 70}, {64, 33}, 512, 2));
  return v;
}

// ------------------------------------------------------------------------------ CPU semantics

TEST(CpuImportance, MatchesTheFormula) {
  auto cpu = make_cpu_backend(1);
  for (const ImpCase& c : small_cases())
    for (bool prob : {false, true}) {
      SCOPED_TRACE(c.name + (prob ? " [probability mass]" : " [raw]"));
      const Inputs in = inputs(c);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)), weight = 0.37f;
      const std::vector<float> got = run(*cpu, c, in.q, in.k, prob, scale, weight, in.init);
      const std::vector<double> want = naive(c, in.q, in.k, prob, scale, weight, in.init);
      const std::vector<bool> cov = covered_keys(c);
      for (size_t t = 0; t < got.size(); ++t) {
        if (!cov[t]) {
          EXPECT_EQ(got[t], in.init[t]) << "key " << t << " is outside every tile but changed";
        } else {
          EXPECT_NEAR(got[t], want[t], 1e-6 * (1.0 + std::abs(want[t]))) << "key " << t;
        }
      }
    }
}

TEST(CpuImportance, ProbabilityMassSumsToRowsTimesHeads) {
  auto cpu = make_cpu_backend(1);
  const ImpCase c = windows("mass", {100, 37}, {16, 5}, 128, 3);
  const Inputs in = inputs(c);
  const std::vector<float> zero(static_cast<size_t>(c.kv_rows), 0.f);
  const std::vector<float> got = run(*cpu, c, in.q, in.k, true, 0.088f, 1.0f, zero);
  double total = 0;
  for (float v : got) total += v;
  EXPECT_NEAR(total, (16 + 5) * 3, 1e-4);
}

TEST(CpuImportance, RejectsBadOperands) {
  auto cpu = make_cpu_backend(1);
  ImpCase c = windows("bad", {10}, {4}, 16, 2);
  const Inputs in = inputs(c);
  auto expect_error = [&](const ImpCase& bad, bool prob, float scale, float weight, const std::string& needle) {
    try {
      run(*cpu, bad, in.q, in.k, prob, scale, weight, in.init);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  ImpCase t = c;
  t.tiles = {{0, 4, 0, 17}};  // keys past the store
  expect_error(t, false, 1.f, 1.f, "tile 0");
  t.tiles = {{3, 2, 0, 4}};  // reversed rows
  expect_error(t, false, 1.f, 1.f, "tile 0");
  t.tiles = {{0, 4, 5, 5}};  // rows without keys
  expect_error(t, false, 1.f, 1.f, "tile 0");
  expect_error(c, false, 1.f, NAN, "weight");
  expect_error(c, true, 0.f, 1.f, "scale");
}

// ------------------------------------------------------------------------------ CUDA twin

enum class Size { kSmall, kSweep };
class CudaImportance : public twin::TwinTest, public ::testing::WithParamInterface<Size> {
 protected:
  void run_cases(const std::vector<ImpCase>& cases) {
    for (const ImpCase& c : cases)
      for (bool prob : {false, true}) {
        SCOPED_TRACE(c.name + (prob ? " [probability mass]" : " [raw]") + ", heads " + std::to_string(c.heads));
        const Inputs in = inputs(c);
        const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
        const float weight = 1.0f / (16.0f * static_cast<float>(c.heads));
        const std::vector<float> ref = run(*cpu_, c, in.q, in.k, prob, scale, weight, in.init);
        const std::vector<float> got = run(*twin_, c, in.q, in.k, prob, scale, weight, in.init);
        expect_scores_match(c, got, ref, in.init);
      }
  }
};

TEST_P(CudaImportance, MatchesCpu) { run_cases(GetParam() == Size::kSmall ? small_cases() : sweep_cases()); }

TEST_P(CudaImportance, FusedWithAttentionMatchesCpu) {
  const std::vector<ImpCase> cases = GetParam() == Size::kSmall ? small_cases() : sweep_cases();
  for (ImpCase c : cases) {
    if (c.head_dim != 128) continue;  // attention itself has a flash kernel for head_dim 128 only
    // Tiles with no query rows are not attention work; drop them here (the importance-only test keeps them).
    std::erase_if(c.tiles, [](const AttentionTile& t) { return t.q_end == t.q_start; });
    SCOPED_TRACE(c.name + ", heads " + std::to_string(c.heads) + ", head_dim " + std::to_string(c.head_dim));
    const Inputs in = inputs(c);
    const std::vector<float> v =
        randn_bf16(in.k.size(), std::hash<std::string>()(c.name) + 7, 0.5f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const float weight = 1.0f / (16.0f * static_cast<float>(c.heads));
    const auto [ref_s, ref_o] = run_fused(*cpu_, c, in.q, in.k, v, scale, weight, in.init);
    const auto [got_s, got_o] = run_fused(*twin_, c, in.q, in.k, v, scale, weight, in.init);
    expect_scores_match(c, got_s, ref_s, in.init);
    EXPECT_TRUE(close(c.name + " attention", got_o, ref_o, 0, test::kBf16OpRelTol));
  }
}

TEST_P(CudaImportance, InvalidTileIsReported) {
  if (GetParam() == Size::kSweep) GTEST_SKIP() << "small only";
  ImpCase c = windows("bad tile", {10}, {4}, 16, 2);
  c.tiles = {{0, 4, 0, 17}};
  const Inputs in = inputs(c);
  std::vector<float> init(in.init);
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { run(*twin_, c, in.q, in.k, false, 1.f, 1.f, init); }, ErrorCode::kInvalidArgument, "tile"));
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaImportance, ::testing::Values(Size::kSmall, Size::kSweep),
                         [](const ::testing::TestParamInfo<Size>& i) {
                           return std::string(i.param == Size::kSmall ? "Small" : "Sweep");
                         });

}  // namespace
}  // namespace flashdllm
