// Backend::attention_importance (Flash-dLLM a_t, reference §D.6):
//  * CpuImportance: the CPU oracle against the formula written out naively in the test (raw q·k
//    and the probability-mass variant), accumulation into existing values, untouched keys.
//  * CudaImportance (twin): CUDA vs CPU on bf16-rounded inputs over Flash-Cache-like window tiles
//    (16-row windows over long per-slot key ranges, windows shorter than 16, more than 16 rows,
//    key ranges not starting at 0, a single key, empty query ranges), 1–3 and 32 heads, both
//    variants; keys outside every tile must keep their initial value exactly; invalid tiles are
//    reported as errors. Skips without a GPU (see kernels/cuda_twin.h).
//  * attention_with_importance (twin): the flash kernel's fused raw importance and its attention
//    output against the CPU's two separate ops over Flash-Cache's layout (per slot one tile
//    [window | tracked rows], the window rows scored), score rows off the warp / work-item
//    boundaries, unscored tiles after the scored ones; a score tile that is not inside its tile is an
//    error on both (head_dim 128: the attention op's flash kernel).
#include <cmath>
#include <cstring>
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

/// An attention_with_importance case: attention tiles and, for the leading ones, the rows they score.
struct FusedCase {
  ImpCase scored;                    ///< q/kv rows, heads and the score tiles (as an importance case)
  std::vector<AttentionTile> tiles;  ///< attention tiles; score tile i lies inside tiles[i]
};

/// Flash-Cache's layout (flash_plan): per slot j, query rows [window of w_j rows | t_j tracked rows]
/// in one attention tile over keys [j·l_max, j·l_max + seqlen_j), its window rows scored; then one
/// unscored tile over the whole store for 7 extra rows.
FusedCase slots(const std::string& name, const std::vector<int32_t>& seqlens, const std::vector<int32_t>& window,
                const std::vector<int32_t>& tracked, int32_t l_max, int heads) {
  FusedCase f;
  f.scored.name = name;
  f.scored.heads = heads;
  int32_t q = 0;
  for (size_t j = 0; j < seqlens.size(); ++j) {
    const int32_t k0 = static_cast<int32_t>(j) * l_max;
    f.scored.tiles.push_back({q, q + window[j], k0, k0 + seqlens[j]});
    f.tiles.push_back({q, q + window[j] + tracked[j], k0, k0 + seqlens[j]});
    q += window[j] + tracked[j];
  }
  f.scored.kv_rows = static_cast<int64_t>(seqlens.size()) * l_max;
  f.tiles.push_back({q, q + 7, 0, static_cast<int32_t>(f.scored.kv_rows)});
  f.scored.q_rows = q + 7;
  return f;
}

std::vector<FusedCase> fused_cases(bool sweep) {
  std::vector<FusedCase> v;
  if (sweep) {
    v.push_back(slots("8 slots x [16 | 112], 32 heads", std::vector<int32_t>(8, 768), std::vector<int32_t>(8, 16),
                      std::vector<int32_t>(8, 112), 800, 32));
    v.push_back(slots("prefill beside windows", {700, 129, 300}, {16, 16, 16}, {684, 64, 112}, 704, 4));
    return v;
  }
  v.push_back(slots("3 slots [16 | 112]", {129, 640, 64}, {16, 16, 16}, {112, 112, 48}, 640, 2));
  v.push_back(slots("short windows, no tracked rows", {7, 128, 40}, {11, 1, 16}, {0, 5, 33}, 130, 1));
  // Score rows inside a tile, off the 16-row warp and 64-row work-item boundaries.
  FusedCase f;
  f.scored.name = "scored rows mid-tile";
  f.scored.heads = 3;
  f.scored.q_rows = 330;
  f.scored.kv_rows = 400;
  f.tiles = {{0, 100, 0, 150}, {100, 300, 150, 400}, {300, 330, 10, 20}};
  f.scored.tiles = {{10, 40, 0, 150}, {150, 250, 150, 400}};
  v.push_back(f);
  return v;
}

/// attention_with_importance on `be` over the case's tiles and score tiles (both in one table
/// tensor, the score tiles after the attention tiles); returns {scores, attention output}.
/// With `plan`, plan_attention() with the host copy of the tables first (as the model does; the CUDA
/// backend routes long tiles to cuDNN) for `plan_scale` (0: the call's scale).
std::pair<std::vector<float>, std::vector<float>> run_fused(Backend& be, const FusedCase& f,
                                                            const std::vector<float>& q, const std::vector<float>& k,
                                                            const std::vector<float>& v, float scale, float weight,
                                                            const std::vector<float>& init, bool plan = false,
                                                            float plan_scale = 0.f) {
  const ImpCase& c = f.scored;
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const DType at = be.activation_dtype();
  Dev qd = make(be, at, c.q_rows, HD), kd = make(be, at, c.kv_rows, HD), vd = make(be, at, c.kv_rows, HD);
  Dev od = make(be, at, c.q_rows, HD), sd = make(be, DType::kF32, c.kv_rows);
  std::vector<int32_t> table;
  for (const auto* list : {&f.tiles, &c.tiles})
    for (const AttentionTile& t : *list) table.insert(table.end(), {t.q_start, t.q_end, t.k_start, t.k_end});
  const auto n_tiles = static_cast<int64_t>(f.tiles.size()), n_scored = static_cast<int64_t>(c.tiles.size());
  Dev td = make(be, DType::kI32, n_tiles + n_scored, 4);
  put(be, qd.t, q);
  put(be, kd.t, k);
  put(be, vd.t, v);
  put(be, od.t, std::vector<float>(static_cast<size_t>(c.q_rows * HD), 0.f));
  put(be, sd.t, init);
  put_i32(be, td.t, table);
  if (plan)
    be.plan_attention(td.t.slice_rows(0, n_tiles), c.q_rows, c.kv_rows, c.heads,
                      HostAttentionPlan{f.tiles.data(), f.tiles.size(), c.tiles.data(), c.tiles.size(), c.head_dim,
                                        plan_scale > 0.f ? plan_scale : scale});
  be.attention_with_importance(qd.t, kd.t, vd.t, td.t.slice_rows(0, n_tiles), c.heads, scale, od.t,
                               td.t.slice_rows(n_tiles, n_tiles + n_scored), weight, sd.t);
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
      adds[static_cast<size_t>(k)] +=  // + 2: the fused kernel's warps need not align with the rows
          c.heads * ((t.q_end - t.q_start + kRowsPerPass - 1) / kRowsPerPass + 2);
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
  // Rows of 108 columns: the raw kernel's scalar loads (16-byte loads need a multiple of 8).
  v.push_back(windows("3 heads of 36", {50, 90}, {16, 5}, 100, 3, 36));
  return v;
}

std::vector<ImpCase> sweep_cases() {
  std::vector<ImpCase> v;
  v.push_back(windows("8 slots x 16 rows, 32 heads", std::vector<int32_t>(8, 640), std::vector<int32_t>(8, 16), 768,
                      32));
  v.push_back(windows("odd lengths", {1, 2, 127, 129, 255, 257}, {16, 3, 16, 9, 16, 1}, 384, 3));
  v.push_back(windows("64-row tiles", {300, 70}, {64, 33}, 512, 2));
  // More keys than one sweep of the raw kernel's key chunks covers (128 CTAs x 64 keys).
  v.push_back(windows("9000 keys", {9000}, {16}, 9000, 1));
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

TEST(CpuImportance, FusedScoresOnlyTheScoreTilesRows) {
  auto cpu = make_cpu_backend(1);
  for (const FusedCase& f : fused_cases(false)) {
    SCOPED_TRACE(f.scored.name);
    const Inputs in = inputs(f.scored);
    const std::vector<float> v(in.k.size(), 0.5f);
    const auto [got, out] = run_fused(*cpu, f, in.q, in.k, v, 0.1f, 0.37f, in.init);
    const std::vector<double> want = naive(f.scored, in.q, in.k, false, 0.1f, 0.37f, in.init);
    for (size_t t = 0; t < got.size(); ++t) EXPECT_NEAR(got[t], want[t], 1e-6 * (1.0 + std::abs(want[t]))) << t;
  }
  FusedCase bad = fused_cases(false).front();
  bad.scored.tiles[1].q_end = bad.tiles[1].q_end + 1;  // one row into the next slot's tile
  const Inputs in = inputs(bad.scored);
  try {
    run_fused(*cpu, bad, in.q, in.k, in.k, 0.1f, 1.f, in.init);
    ADD_FAILURE() << "a score tile outside its tile was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("score tile 1"), std::string::npos) << e.what();
  }
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
  // The twin's default kernel and, on CUDA, both tensor-core kernels forced (mma.sync m64n64, and
  // wgmma where the device and build have it).
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> impls;
  impls.emplace_back("default", nullptr);
  if (is_cuda_) {
    impls.emplace_back("m64n64", cuda_with_attention("m64n64"));
    for (const char* m : {"wgmma128", "wgmma64"})
      if (auto wgmma = cuda_wgmma_or_null(m)) impls.emplace_back(m, std::move(wgmma));
  }
  for (const FusedCase& f : fused_cases(GetParam() == Size::kSweep)) {
    const ImpCase& c = f.scored;
    SCOPED_TRACE(c.name + ", heads " + std::to_string(c.heads));
    const Inputs in = inputs(c);
    const std::vector<float> v = randn_bf16(in.k.size(), std::hash<std::string>()(c.name) + 7, 0.5f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const float weight = 1.0f / (16.0f * static_cast<float>(c.heads));
    const auto [ref_s, ref_o] = run_fused(*cpu_, f, in.q, in.k, v, scale, weight, in.init);
    for (auto& [name, be] : impls) {
      SCOPED_TRACE(name);
      const auto [got_s, got_o] = run_fused(be ? *be : *twin_, f, in.q, in.k, v, scale, weight, in.init);
      expect_scores_match(c, got_s, ref_s, in.init);
      EXPECT_TRUE(close(c.name + " attention [" + name + "]", got_o, ref_o, 0, test::kBf16OpRelTol));
    }
  }
}

/// BackendOptions with the cuDNN route named `mode` (cudnn_attention_name's names).
BackendOptions cudnn_options(const char* mode) {
  BackendOptions o;
  o.cudnn_attention = *cudnn_attention_from_name(mode);
  return o;
}

/// False when `be` (made with BackendOptions::cudnn_attention prefill or all) has no cuDNN route by design: a build
/// without cuDNN or a GPU older than sm_90 (its first routed plan says so). Any other failure, e.g.
/// an sm_90 GPU whose cuDNN cannot be used, is the test's.
bool cudnn_route_available(Backend& be) {
  std::vector<AttentionTile> tiles = {{0, 256, 0, 256}};
  Dev td = make(be, DType::kI32, 1, 4);
  put_i32(be, td.t, {0, 256, 0, 256});
  try {
    be.plan_attention(td.t, 256, 256, 1, HostAttentionPlan{tiles.data(), 1, nullptr, 0, 128, 0.1f});
  } catch (const Error& e) {
    const std::string what = e.what();
    if (what.find("built without cuDNN") != std::string::npos || what.find("needs sm_90") != std::string::npos)
      return false;
    throw;
  }
  return true;
}

// The cuDNN route (plan_attention with the host copy; cudnn_attention prefill: tiles of
// >= 256 query rows, =all: every tile) runs those tiles in cuDNN's fused attention and their score
// tiles in the importance kernel: output and scores match the CPU as the flash path's do, and a
// call whose scale differs from the plan's runs every tile on our kernel; the backend's count of
// routed calls shows that cuDNN ran (skipped on builds without the route). Cases: three
// prefills (300, 257 and 700 rows: a batch of 3 padded to 4) beside windows, and a prefill whose
// keys start past row 0 of the store.
TEST_P(CudaImportance, CudnnRouteMatchesCpu) {
  if (!is_cuda_) GTEST_SKIP() << "CUDA only (the CPU twin has no cuDNN route)";
  std::vector<FusedCase> cases;
  cases.push_back(slots("3 prefills beside 2 windows", {300, 640, 257, 129, 700}, {16, 16, 16, 16, 16},
                        {284, 112, 241, 48, 684}, 704, GetParam() == Size::kSweep ? 32 : 2));
  FusedCase off = slots("prefill with keys past row 0", {400}, {16}, {300}, 400, 2);
  off.scored.kv_rows = 1000;
  off.tiles[0].k_start = off.scored.tiles[0].k_start = 555;
  off.tiles[0].k_end = off.scored.tiles[0].k_end = 955;
  cases.push_back(off);
  for (const char* mode : {"prefill", "all"}) {
    auto be = cuda_with(cudnn_options(mode));
    if (!cudnn_route_available(*be)) GTEST_SKIP() << "this build has no cuDNN route";
    for (const FusedCase& f : cases) {
      const ImpCase& c = f.scored;
      SCOPED_TRACE(c.name + ", cudnn_attention " + mode + ", heads " + std::to_string(c.heads));
      const Inputs in = inputs(c);
      const std::vector<float> v = randn_bf16(in.k.size(), std::hash<std::string>()(c.name) + 7, 0.5f);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const float weight = 1.0f / (16.0f * static_cast<float>(c.heads));
      const auto [ref_s, ref_o] = run_fused(*cpu_, f, in.q, in.k, v, scale, weight, in.init);
      for (float plan_scale : {scale, 2 * scale}) {  // as planned; another scale (our kernel only)
        SCOPED_TRACE(plan_scale == scale ? "planned scale" : "call scale differs from the plan's");
        const int64_t routed = be->routed_attention_calls();
        const auto [got_s, got_o] = run_fused(*be, f, in.q, in.k, v, scale, weight, in.init, true, plan_scale);
        EXPECT_EQ(be->routed_attention_calls() - routed, plan_scale == scale ? 1 : 0) << "cuDNN ran (or not)";
        expect_scores_match(c, got_s, ref_s, in.init);
        EXPECT_TRUE(close(c.name + " attention", got_o, ref_o, 0, test::kBf16OpRelTol));
      }
    }
  }
}

// A recorded layer loop (Backend::run_recorded, one caller key) over two schedules with the same
// counts (6 tiles, 5 score tiles, 1,307 query rows) and the same cuDNN bucket (4 tiles of <= 512
// rows over <= 512 keys) but 4 and 3 routed tiles: the second must not replay the first's graph
// (whose importance launch covers 4 score tiles); outputs and scores match the CPU every time.
TEST_P(CudaImportance, CudnnRouteRecordedLoopFollowsItsSchedule) {
  if (!is_cuda_ || GetParam() == Size::kSweep) GTEST_SKIP() << "CUDA, small only";
  auto be = cuda_with(cudnn_options("prefill"));
  if (!cudnn_route_available(*be)) GTEST_SKIP() << "this build has no cuDNN route";
  const std::vector<int32_t> keys(5, 400), window(5, 16);
  const FusedCase a = slots("4 routed", keys, window, {284, 284, 284, 284, 84}, 400, 2);
  const FusedCase b = slots("3 routed", keys, window, {284, 284, 284, 234, 134}, 400, 2);
  ASSERT_EQ(a.scored.q_rows, b.scored.q_rows);
  const ImpCase& c = a.scored;
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const Inputs in = inputs(c);
  const std::vector<float> v = randn_bf16(in.k.size(), 99, 0.5f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)), weight = 0.03125f;
  const DType at = be->activation_dtype();
  Dev qd = make(*be, at, c.q_rows, HD), kd = make(*be, at, c.kv_rows, HD), vd = make(*be, at, c.kv_rows, HD);
  Dev od = make(*be, at, c.q_rows, HD), sd = make(*be, DType::kF32, c.kv_rows), td = make(*be, DType::kI32, 11, 4);
  put(*be, qd.t, in.q);
  put(*be, kd.t, in.k);
  put(*be, vd.t, v);
  const Tensor tiles = td.t.slice_rows(0, 6), scored = td.t.slice_rows(6, 11);
  int run = 0;
  for (const FusedCase* f : {&a, &a, &a, &b, &b, &a}) {
    SCOPED_TRACE("call " + std::to_string(++run) + ": " + f->scored.name);
    std::vector<int32_t> table;
    for (const auto* list : {&f->tiles, &f->scored.tiles})
      for (const AttentionTile& t : *list) table.insert(table.end(), {t.q_start, t.q_end, t.k_start, t.k_end});
    put_i32(*be, td.t, table);
    put(*be, sd.t, in.init);
    put(*be, od.t, std::vector<float>(static_cast<size_t>(c.q_rows * HD), 0.f));
    be->plan_attention(tiles, c.q_rows, c.kv_rows, c.heads,
                       HostAttentionPlan{f->tiles.data(), f->tiles.size(), f->scored.tiles.data(),
                                         f->scored.tiles.size(), c.head_dim, scale});
    be->run_recorded({42}, [&] {
      be->attention_with_importance(qd.t, kd.t, vd.t, tiles, c.heads, scale, od.t, scored, weight, sd.t);
    });
    const auto [ref_s, ref_o] = run_fused(*cpu_, *f, in.q, in.k, v, scale, weight, in.init);
    expect_scores_match(f->scored, get(*be, sd.t), ref_s, in.init);
    EXPECT_TRUE(close(f->scored.name + " attention", get(*be, od.t), ref_o, 0, test::kBf16OpRelTol));
  }
  EXPECT_GT(be->routed_attention_calls(), 0);  // replays re-run cuDNN without a call
}

// A routed tile's output rows do not depend on what else cuDNN's batch holds: the same prefill tile
// alone (a graph of 1 tile x 512 rows) and beside a 700-row one (2 tiles x 1,024 rows) gives
// bit-identical rows, so the batch buckets keep a sequence's numbers independent of its batch mates.
TEST_P(CudaImportance, CudnnRouteRowsDoNotDependOnTheBucket) {
  if (!is_cuda_ || GetParam() == Size::kSweep) GTEST_SKIP() << "CUDA, small only";
  auto be = cuda_with(cudnn_options("prefill"));
  if (!cudnn_route_available(*be)) GTEST_SKIP() << "this build has no cuDNN route";
  const int heads = 4, Dh = 128;
  const int64_t HD = heads * Dh, Tq = 300 + 700, N = 400 + 800;
  const std::vector<float> q = randn_bf16(static_cast<size_t>(Tq * HD), 5, 2.0f);
  const std::vector<float> k = randn_bf16(static_cast<size_t>(N * HD), 6);
  const std::vector<float> v = randn_bf16(static_cast<size_t>(N * HD), 7);
  const DType at = be->activation_dtype();
  Dev qd = make(*be, at, Tq, HD), kd = make(*be, at, N, HD), vd = make(*be, at, N, HD), od = make(*be, at, Tq, HD);
  put(*be, qd.t, q);
  put(*be, kd.t, k);
  put(*be, vd.t, v);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  auto rows_of_first_tile = [&](const std::vector<AttentionTile>& tiles) {
    Dev td = make(*be, DType::kI32, static_cast<int64_t>(tiles.size()), 4);
    std::vector<int32_t> table;
    for (const AttentionTile& t : tiles) table.insert(table.end(), {t.q_start, t.q_end, t.k_start, t.k_end});
    put_i32(*be, td.t, table);
    be->fill_zero(od.t);
    be->plan_attention(td.t, Tq, N, heads, HostAttentionPlan{tiles.data(), tiles.size(), nullptr, 0, Dh, scale});
    const int64_t routed = be->routed_attention_calls();
    be->attention(qd.t, kd.t, vd.t, td.t, heads, scale, od.t);
    EXPECT_EQ(be->routed_attention_calls(), routed + 1);
    std::vector<float> out = get(*be, od.t);
    out.resize(static_cast<size_t>(300 * HD));
    return out;
  };
  const std::vector<float> alone = rows_of_first_tile({{0, 300, 0, 400}});
  const std::vector<float> beside = rows_of_first_tile({{0, 300, 0, 400}, {300, 1000, 400, 1200}});
  ASSERT_EQ(alone.size(), beside.size());
  EXPECT_EQ(std::memcmp(alone.data(), beside.data(), alone.size() * sizeof(float)), 0)
      << "a prefill's attention rows changed with the cuDNN bucket";
}

TEST_P(CudaImportance, ScoreTileOutsideItsTileIsReported) {
  if (GetParam() == Size::kSweep) GTEST_SKIP() << "small only";
  FusedCase f = fused_cases(false).front();
  const std::vector<std::pair<std::string, AttentionTile>> bad = {
      {"rows past the tile", {f.tiles[0].q_start, f.tiles[0].q_end + 1, f.tiles[0].k_start, f.tiles[0].k_end}},
      {"other keys", {f.tiles[0].q_start, f.tiles[0].q_start + 4, f.tiles[0].k_start, f.tiles[0].k_end - 1}},
      {"empty", {f.tiles[0].q_start + 2, f.tiles[0].q_start + 2, f.tiles[0].k_start, f.tiles[0].k_end}}};
  const Inputs in = inputs(f.scored);
  const std::vector<float> v(in.k.size(), 0.25f);
  // The CPU, the twin's default and, on CUDA, each tensor-core kernel forced (each checks the score
  // tiles itself: the wgmma kernel in its producer).
  std::vector<std::unique_ptr<Backend>> forced;
  if (is_cuda_) {
    forced.push_back(cuda_with_attention("m64n64"));
    for (const char* m : {"wgmma128", "wgmma64"})
      if (auto wgmma = cuda_wgmma_or_null(m)) forced.push_back(std::move(wgmma));
  }
  std::vector<Backend*> backends = {cpu_.get(), twin_.get()};
  for (auto& be : forced) backends.push_back(be.get());
  for (const auto& [what, tile] : bad) {
    SCOPED_TRACE(what);
    FusedCase b = f;
    b.scored.tiles[0] = tile;
    for (Backend* be : backends)
      EXPECT_TRUE(twin::throws_error(
          *be, [&] { run_fused(*be, b, in.q, in.k, v, 0.1f, 1.f, in.init); }, ErrorCode::kInvalidArgument, "tile"))
          << be->name();
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
