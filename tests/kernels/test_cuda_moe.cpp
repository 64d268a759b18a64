// LLaDA-MoE's and LLaDA2's operations on the CUDA backend (issue 47) against the CPU backend:
//  * qkv_rope_store with the per-head QK-norm (with and without a bias, GQA, head_dim 64 and 128);
//  * moe_route at 4 and 64 experts, top-k 1 / 2 / 8, 1 to 300 tokens, renormalise and scaling, every
//    row on one expert, a non-finite row; every router switch (sigmoid scores, the expert bias,
//    group-limited selection) at LLaDA2-mini's shape (256 experts, 8 groups / top 4, top-8, scaling
//    2.5) and small ones, with tied keys and tied group scores, and on the recorded upstream LLaDA2
//    gate's inputs; a bad bias refused;
//  * moe_experts at the same shapes (experts that receive no row, every row on one expert: groups of
//    several 64-row tiles), 16-byte and scalar load paths, accumulate on and off; a row's result alone
//    and in a batch (bitwise); a bad expert id reported at the next synchronisation;
//  * the llada_moe_a golden checkpoint through the whole forward and the verify pass, against the
//    recorded upstream fp32 logits and the CPU, with bounds from its bf16 yardstick
//    (tests/data/golden/llada_moe_a_bf16_reference_error.json, as CudaGqa.DreamGoldenForward).
#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "io/safetensors.h"
#include "kernels/cuda_twin.h"
#include "kernels/qkv_twin.h"
#include "model/model.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

using twin::close;
using twin::Dev;
using twin::get;
using twin::make;
using twin::put;
using twin::put_i32;
using twin::randn_bf16;

std::vector<int32_t> get_i32(Backend& be, const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  be.copy_to_host(v.data(), t);
  return v;
}

MoeRouting routing(int32_t E, int32_t k, bool renormalize = false, float scaling = 1.0f) {
  MoeRouting r;
  r.n_experts = E;
  r.top_k = k;
  r.renormalize = renormalize;
  r.scaling = scaling;
  return r;
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> w;
};

/// moe_route on `be`; `bias` [E] is uploaded when r.expert_bias.
Routed route(Backend& be, const std::vector<float>& logits, int64_t T, const MoeRouting& r,
             const std::vector<float>& bias = {}) {
  Dev z = make(be, DType::kF32, T, r.n_experts), ids = make(be, DType::kI32, T, r.top_k);
  Dev w = make(be, DType::kF32, T, r.top_k), b = make(be, DType::kF32, r.expert_bias ? r.n_experts : 1);
  put(be, z.t, logits);
  if (r.expert_bias) put(be, b.t, bias);
  twin::poison(be, ids.t);
  twin::poison(be, w.t);
  be.moe_route(z.t, r.expert_bias ? b.t : Tensor{}, r, ids.t, w.t);
  return {get_i32(be, ids.t), get(be, w.t)};
}

/// Whether, in a list of (value, scale) sorted by descending value, the j-th and (j+1)-th entries
/// for some j in [from, to) are distinct and closer than kFp32RankNearTie x their scale.
bool near_tie_in(std::vector<std::pair<double, double>> v, int64_t from, int64_t to) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t j = from; j < to && j + 1 < static_cast<int64_t>(v.size()); ++j) {
    const double d = v[j].first - v[j + 1].first;
    if (d > 0.0 && d < test::kFp32RankNearTie * std::max(v[j].second, v[j + 1].second)) return true;
  }
  return false;
}

/// Rows whose selection CPU and CUDA may make differently. Both round each score from double to
/// fp32, the softmax denominator summed in different orders, so a score may differ by an ulp, and
/// the key (score + bias) and a group's sum round again: a row is a near tie when two distinct keys
/// among the k + 1 best candidates, or the topk_groups-th and the next group score (the set of
/// groups decides, not their order), are closer than kFp32RankNearTie x their magnitude (|score| +
/// |bias|, summed), computed here in double. Equal values are no near tie: both sides compute them
/// alike and take the lower index. Rows with a non-finite logit are compared, never skipped.
std::vector<bool> near_ties(const std::vector<float>& logits, const std::vector<float>& bias, int64_t T,
                            const MoeRouting& r) {
  const int64_t E = r.n_experts, G = r.group_limited() ? r.n_groups : 1, size = E / G;
  std::vector<bool> tie(static_cast<size_t>(T), false);
  for (int64_t t = 0; t < T; ++t) {
    const float* z = logits.data() + t * E;
    if (!std::all_of(z, z + E, [](float v) { return std::isfinite(v); })) continue;
    double m = -INFINITY, sum = 0.0;
    for (int64_t i = 0; i < E; ++i) m = std::max(m, double{z[i]});
    for (int64_t i = 0; i < E; ++i) sum += std::exp(double{z[i]} - m);
    std::vector<std::pair<double, double>> key(static_cast<size_t>(E)), group, candidates;
    for (int64_t i = 0; i < E; ++i) {
      const double s =
          r.score == RouterScore::kSigmoid ? 1.0 / (1.0 + std::exp(-double{z[i]})) : std::exp(z[i] - m) / sum;
      const double b = r.expert_bias ? double{bias[static_cast<size_t>(i)]} : 0.0;
      key[static_cast<size_t>(i)] = {s + b, std::fabs(s) + std::fabs(b)};
    }
    std::vector<int64_t> groups(static_cast<size_t>(G));
    std::iota(groups.begin(), groups.end(), 0);
    if (G > 1) {
      for (int64_t g = 0; g < G; ++g) {
        std::vector<std::pair<double, double>> in(key.begin() + g * size, key.begin() + (g + 1) * size);
        std::partial_sort(in.begin(), in.begin() + 2, in.end(),
                          [](const auto& a, const auto& b) { return a.first > b.first; });
        group.emplace_back(in[0].first + in[1].first, in[0].second + in[1].second);
      }
      tie[static_cast<size_t>(t)] = near_tie_in(group, r.topk_groups - 1, r.topk_groups);  // the set only
      std::stable_sort(groups.begin(), groups.end(), [&](int64_t a, int64_t b) {
        return group[static_cast<size_t>(a)].first > group[static_cast<size_t>(b)].first;
      });
      groups.resize(static_cast<size_t>(r.topk_groups));
    }
    for (int64_t g : groups) candidates.insert(candidates.end(), key.begin() + g * size, key.begin() + (g + 1) * size);
    if (near_tie_in(candidates, 0, r.top_k)) tie[static_cast<size_t>(t)] = true;
  }
  return tie;
}

/// Expects `got` to pick the experts of `ref` and their weights within kFp32OpRelTol of max|ref|;
/// NaN rows (a non-finite logit) must be NaN on both sides with ids 0..k-1. Near-tie rows are
/// reported, not compared.
void expect_same_routing(const Routed& got, const Routed& ref, const std::vector<bool>& tie, int64_t k) {
  double max_w = 0.0;
  for (float v : ref.w)
    if (std::isfinite(v)) max_w = std::max(max_w, static_cast<double>(std::fabs(v)));
  int64_t skipped = 0;
  for (size_t t = 0; t < tie.size(); ++t) {
    if (tie[t] && !std::isnan(ref.w[t * k])) {
      ++skipped;
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      const size_t i = t * static_cast<size_t>(k) + static_cast<size_t>(j);
      ASSERT_EQ(got.ids[i], ref.ids[i]) << "row " << t << " choice " << j;
      if (std::isnan(ref.w[i])) {
        EXPECT_TRUE(std::isnan(got.w[i])) << "row " << t << " choice " << j;
        continue;
      }
      EXPECT_LE(std::fabs(static_cast<double>(got.w[i]) - ref.w[i]), test::kFp32OpRelTol * max_w)
          << "row " << t << " choice " << j << ": got " << got.w[i] << ", ref " << ref.w[i];
    }
  }
  if (skipped > 0) std::printf("[note] %lld near-tie rows not compared\n", static_cast<long long>(skipped));
}

struct Shape {
  int32_t E, k;
};
const Shape kShapes[] = {{4, 1}, {4, 2}, {4, 4}, {64, 1}, {64, 2}, {64, 8}};
const int64_t kTokens[] = {1, 37, 300};

class CudaMoe : public twin::TwinTest {};

TEST_F(CudaMoe, SmallRouteMatchesCpu) {
  for (const Shape& s : kShapes)
    for (int64_t T : kTokens)
      for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE("E " + std::to_string(s.E) + " k " + std::to_string(s.k) + " T " + std::to_string(T) +
                     " variant " + std::to_string(variant));
        std::vector<float> z = randn_bf16(static_cast<size_t>(T * s.E), 100 + T + s.E * 7 + s.k, 2.0f);
        if (variant == 1)  // every row on expert E-1 (the others still ranked)
          for (int64_t t = 0; t < T; ++t) z[static_cast<size_t>(t * s.E + s.E - 1)] = 40.0f;
        if (variant == 2 && T > 1) z[static_cast<size_t>((T - 1) * s.E)] = std::numeric_limits<float>::infinity();
        const MoeRouting r = routing(s.E, s.k, variant == 2, variant == 2 ? 2.5f : 1.0f);
        const Routed ref = route(*cpu_, z, T, r), got = route(*twin_, z, T, r);
        expect_same_routing(got, ref, near_ties(z, {}, T, r), s.k);
      }
}

/// A router configuration of the twin tests (core/moe_routing.h's switches).
struct RouteCase {
  const char* name;
  int32_t E, k, groups, topk_groups;
  RouterScore score;
  bool bias, renormalize;
  float scaling;

  MoeRouting routing() const {
    MoeRouting r = flashdllm::routing(E, k, renormalize, scaling);
    r.score = score;
    r.expert_bias = bias;
    r.n_groups = groups;
    r.topk_groups = topk_groups;
    return r;
  }
};

// LLaDA2-mini's router, smaller grouped ones (groups of 4 and of 2, a top-1 router keeping its
// score), a bias without groups, groups that limit nothing (topk_groups = n_groups), plain sigmoid.
const RouteCase kRouteCases[] = {
    {"llada2-mini", 256, 8, 8, 4, RouterScore::kSigmoid, true, true, 2.5f},
    {"16 experts 4 groups top 2", 16, 3, 4, 2, RouterScore::kSigmoid, true, true, 2.5f},
    {"top-1", 16, 1, 4, 1, RouterScore::kSigmoid, true, true, 2.5f},
    {"softmax groups of 2", 16, 4, 8, 3, RouterScore::kSoftmax, false, false, 1.0f},
    {"bias, no groups", 64, 8, 1, 1, RouterScore::kSigmoid, true, true, 2.5f},
    {"every group", 64, 6, 8, 8, RouterScore::kSoftmax, true, true, 1.0f},
    {"sigmoid", 64, 8, 1, 1, RouterScore::kSigmoid, false, true, 2.5f},
};

/// Router logits [T, E] (bf16 values) and bias [E] of `c`:
///   variant 0: logits ~ N(0, 2²), bias ~ N(0, 0.1²) (LLaDA2's recorded gate biases are of that size);
///   variant 1, ties: the bias repeats with the group size and holds an equal pair, which the logits'
///     pattern makes large (equal keys); even rows repeat the pattern in every group (every group
///     score ties, every key ties with its copies in the other groups); odd rows add per-group offsets
///     to the pattern, the topk_groups-th and the next group tied (groups ranked in a rotation by row);
///   variant 2: variant 0 with a NaN logit in the last row and −inf in the first (T > 1).
std::pair<std::vector<float>, std::vector<float>> route_inputs(const RouteCase& c, int64_t T, int variant,
                                                               uint64_t seed) {
  const int64_t E = c.E, G = c.groups, size = E / G;
  std::vector<float> z = randn_bf16(static_cast<size_t>(T * E), seed, 2.0f);
  std::vector<float> bias = randn_bf16(static_cast<size_t>(E), seed + 1, 0.1f);
  if (variant == 1) {
    std::vector<float> pattern = randn_bf16(static_cast<size_t>(size), seed + 2, 2.0f);
    pattern[0] = pattern[1] = 6.0f;  // two equal keys, most likely among the best
    bias[1] = bias[0];
    for (int64_t i = 0; i < E; ++i) bias[static_cast<size_t>(i)] = bias[static_cast<size_t>(i % size)];
    for (int64_t t = 0; t < T; ++t)
      for (int64_t g = 0; g < G; ++g) {
        const int64_t rank = (g + t) % G;  // odd rows: level G − rank, the rank topk_groups tied above
        const int64_t level = t % 2 == 0 ? 0 : G - (rank == c.topk_groups ? rank - 1 : rank);
        for (int64_t i = 0; i < size; ++i)
          z[static_cast<size_t>(t * E + g * size + i)] = pattern[static_cast<size_t>(i)] + 0.5f * level;
      }
  }
  if (variant == 2 && T > 1) {
    z[static_cast<size_t>((T - 1) * E + E / 2)] = std::numeric_limits<float>::quiet_NaN();
    z[1] = -std::numeric_limits<float>::infinity();
  }
  return {z, bias};
}

// Every switch against the CPU op: the chosen experts exactly (near-tie rows reported), the weights
// within the fp32 op tolerance. On random data each switch changes the CPU's choices, so a kernel
// that ignored one would fail.
TEST_F(CudaMoe, RouteSwitchesMatchCpu) {
  for (const RouteCase& c : kRouteCases)
    for (int64_t T : kTokens)
      for (int variant = 0; variant < 3; ++variant) {
        SCOPED_TRACE(std::string(c.name) + " T " + std::to_string(T) + " variant " + std::to_string(variant));
        const MoeRouting r = c.routing();
        const auto inputs = route_inputs(c, T, variant, 300 + static_cast<uint64_t>(c.E * 5 + c.k + T));
        const std::vector<float>& z = inputs.first;
        const std::vector<float>& bias = inputs.second;
        const Routed ref = route(*cpu_, z, T, r, bias), got = route(*twin_, z, T, r, bias);
        expect_same_routing(got, ref, near_ties(z, bias, T, r), c.k);
        if (T != 300 || variant != 0) continue;
        MoeRouting off = r;
        off.expert_bias = false;
        if (r.expert_bias) {
          EXPECT_NE(route(*cpu_, z, T, off).ids, ref.ids) << "the bias changes no choice";
        }
        off = r;
        off.n_groups = off.topk_groups = 1;
        if (r.group_limited()) {
          EXPECT_NE(route(*cpu_, z, T, off, bias).ids, ref.ids) << "the groups change no choice";
        }
      }
}

// LLaDA2's gate as recorded from the upstream class (tests/data/golden/llada2_router.json; the CPU
// matches it exactly, tests/model/test_moe_routing.cpp): the twin against the CPU on its logits and bias.
TEST_F(CudaMoe, RouteLlada2GoldenMatchesCpu) {
  const nlohmann::json golden = test::load_json(test::test_data_dir() / "golden" / "llada2_router.json");
  for (const nlohmann::json& g : golden.at("cases")) {
    SCOPED_TRACE(g.at("name").get<std::string>());
    RouteCase c{"golden", 0, 0, 0, 0, RouterScore::kSigmoid, true, true, 0.0f};  // LLaDA2's gate
    c.E = g.at("n_experts").get<int32_t>();
    c.k = g.at("top_k").get<int32_t>();
    c.groups = g.at("n_group").get<int32_t>();
    c.topk_groups = g.at("topk_group").get<int32_t>();
    c.scaling = g.at("routed_scaling_factor").get<float>();
    std::vector<float> z;
    for (const nlohmann::json& row : g.at("logits"))
      for (const nlohmann::json& v : row) z.push_back(v.get<float>());
    const std::vector<float> bias = g.at("expert_bias").get<std::vector<float>>();
    const int64_t T = static_cast<int64_t>(z.size()) / c.E;
    const MoeRouting r = c.routing();
    expect_same_routing(route(*twin_, z, T, r, bias), route(*cpu_, z, T, r, bias), near_ties(z, bias, T, r), c.k);
  }
}

// A bias of the wrong size, or given to a router without one, is refused naming the operand; more
// experts than the CUDA router holds are refused naming the limit.
TEST_F(CudaMoe, RouteBadBiasRefused) {
  const int64_t T = 4, E = 16, k = 2;
  Dev z = make(*twin_, DType::kF32, T, E), ids = make(*twin_, DType::kI32, T, k), w = make(*twin_, DType::kF32, T, k);
  Dev short_bias = make(*twin_, DType::kF32, E - 1);
  MoeRouting r = routing(E, k);
  r.expert_bias = true;
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->moe_route(z.t, short_bias.t, r, ids.t, w.t); }, ErrorCode::kInvalidArgument, "expert_bias"));
  r.expert_bias = false;
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->moe_route(z.t, short_bias.t, r, ids.t, w.t); }, ErrorCode::kInvalidArgument,
      "the routing has none"));
  if (!is_cuda_) return;
  const int64_t many = 4096;  // above kernels::kMoeMaxExperts (2048)
  Dev zm = make(*twin_, DType::kF32, 1, many), idm = make(*twin_, DType::kI32, 1, k),
      wm = make(*twin_, DType::kF32, 1, k);
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->moe_route(zm.t, Tensor{}, routing(static_cast<int32_t>(many), k), idm.t, wm.t); },
      ErrorCode::kUnsupported, "experts"));
}

/// One moe_experts case: inputs on the host (bf16-rounded), run on any backend.
struct ExpertsCase {
  int64_t T, E, k, D, F;
  std::vector<float> x, gu, dn, w, out0;
  std::vector<int32_t> ids;

  /// k distinct experts per row (`one`: expert 3 first on every row), weights in (0, 1).
  ExpertsCase(int64_t T_, int64_t E_, int64_t k_, int64_t D_, int64_t F_, bool one, uint64_t seed)
      : T(T_), E(E_), k(k_), D(D_), F(F_) {
    x = randn_bf16(static_cast<size_t>(T * D), seed);
    gu = randn_bf16(static_cast<size_t>(E * 2 * F * D), seed + 1, 1.0f / std::sqrt(static_cast<float>(D)));
    dn = randn_bf16(static_cast<size_t>(E * D * F), seed + 2, 1.0f / std::sqrt(static_cast<float>(F)));
    out0 = randn_bf16(static_cast<size_t>(T * D), seed + 3);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> u(0.05f, 1.0f);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> perm(static_cast<size_t>(E));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      if (one) std::iter_swap(perm.begin(), std::find(perm.begin(), perm.end(), std::min<int32_t>(3, E - 1)));
      ids.insert(ids.end(), perm.begin(), perm.begin() + k);
      for (int64_t j = 0; j < k; ++j) w.push_back(u(rng));
    }
  }

  std::vector<float> run(Backend& be, bool accumulate, const std::vector<int32_t>* bad_ids = nullptr) const {
    const DType at = be.activation_dtype(), wt = be.weight_dtype();
    Dev xd = make(be, at, T, D), od = make(be, at, T, D), idd = make(be, DType::kI32, T, k);
    Dev wd = make(be, DType::kF32, T, k);
    Dev gud = make(be, wt, E * 2 * F, D), dnd = make(be, wt, E * D, F);
    Dev sd = make(be, at, Backend::moe_scratch_elements(T, k, E, D, F));
    put(be, xd.t, x);
    put(be, gud.t, gu);
    put(be, dnd.t, dn);
    put(be, wd.t, w);
    put_i32(be, idd.t, bad_ids != nullptr ? *bad_ids : ids);
    if (accumulate)
      put(be, od.t, out0);
    else
      twin::poison(be, od.t);
    twin::poison(be, sd.t);
    const Tensor g3(gud.t.data, wt, be.device(), {E, 2 * F, D}), d3(dnd.t.data, wt, be.device(), {E, D, F});
    be.moe_experts(xd.t, idd.t, wd.t, g3, d3, od.t, accumulate, sd.t);
    return get(be, od.t);
  }
};

// The expert FFN vs the CPU (fp32 products summed in double): bf16 gate|up and SwiGLU outputs and the
// bf16 output, each one rounding of about 2^-9 relative: within the bf16 op tolerance of max|ref|.
TEST_F(CudaMoe, SmallExpertsMatchCpu) {
  struct Dims {
    int64_t D, F;
  };
  for (const Dims dims : {Dims{128, 96}, Dims{36, 20}})  // 16-byte loads; K % 8 != 0: scalar loads
    for (const Shape& s : kShapes)
      for (int64_t T : kTokens)
        for (bool one : {false, true}) {
          if (dims.D == 36 && T == 300) continue;
          const std::string name = "D " + std::to_string(dims.D) + " E " + std::to_string(s.E) + " k " +
                                   std::to_string(s.k) + " T " + std::to_string(T) + (one ? " one expert" : "");
          SCOPED_TRACE(name);
          const ExpertsCase c(T, s.E, s.k, dims.D, dims.F, one, 500 + T + s.E + s.k);
          for (bool acc : {false, true}) {
            const std::vector<float> ref = c.run(*cpu_, acc), got = c.run(*twin_, acc);
            ASSERT_GT(test::max_abs(ref), 0.0);
            EXPECT_TRUE(close(name + (acc ? " accumulate" : ""), got, ref, dims.D, test::kBf16OpRelTol));
          }
        }
}

// LLaDA-MoE-7B-A1B's expert shape (64 experts, top-8, D 2048, F 1024): K loops of 64 and 32 tiles,
// 32 column tiles per GEMM, groups of a few rows each. Same bound as the small shapes.
TEST_F(CudaMoe, ExpertsLladaMoe7bShape) {
  const ExpertsCase c(40, 64, 8, 2048, 1024, false, 7);
  const std::vector<float> ref = c.run(*cpu_, true), got = c.run(*twin_, true);
  EXPECT_TRUE(close("7B-A1B shape", got, ref, c.D, test::kBf16OpRelTol));
}

// A row's output does not depend on its batch mates (the sort's row order inside a group is
// unspecified): bitwise the same alone, in a batch of 300, and in a second run of that batch.
TEST_F(CudaMoe, SmallExpertsRowIndependentOfBatch) {
  const ExpertsCase all(300, 64, 8, 128, 96, false, 900);
  const std::vector<float> a = all.run(*twin_, false), b = all.run(*twin_, false);
  EXPECT_EQ(a, b);
  for (int64_t t : {0, 17, 299}) {
    ExpertsCase one = all;
    one.T = 1;
    one.x.assign(all.x.begin() + t * all.D, all.x.begin() + (t + 1) * all.D);
    one.ids.assign(all.ids.begin() + t * all.k, all.ids.begin() + (t + 1) * all.k);
    one.w.assign(all.w.begin() + t * all.k, all.w.begin() + (t + 1) * all.k);
    const std::vector<float> alone = one.run(*twin_, false);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), a.begin() + t * all.D)) << "row " << t;
  }
}

TEST_F(CudaMoe, SmallExpertsBadIdReported) {
  const ExpertsCase c(5, 8, 2, 64, 32, false, 42);
  std::vector<int32_t> bad = c.ids;
  bad[3] = 8;
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { c.run(*twin_, false, &bad); }, ErrorCode::kInvalidArgument, "expert id"));
  const std::vector<float> ok = c.run(*twin_, false);  // the backend is usable afterwards
  EXPECT_TRUE(std::all_of(ok.begin(), ok.end(), [](float v) { return std::isfinite(v); }));
}

// qkv_rope_store with QK-norm (weights ~1.8 as llada_moe_a's, eps 1e-6) vs the CPU: the GEMM, the
// normalised head and its weight product, and RoPE each round to bf16 once: the bf16 op tolerance.
TEST_F(CudaMoe, SmallQkvRopeStoreQkNorm) {
  struct Heads {
    int h, kv;
    int64_t dh;
  };
  for (const Heads g : {Heads{4, 4, 64}, Heads{8, 2, 128}, Heads{4, 4, 40}})
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(std::to_string(g.h) + "/" + std::to_string(g.kv) + " heads of " + std::to_string(g.dh) +
                   (with_bias ? ", bias" : ""));
      twin::QkvTwinCase c;
      c.h = g.h;
      c.kv = g.kv;
      c.dh = g.dh;
      c.rope_theta = 50000;
      c.seed = 31;
      c.rows_seed = 5;
      c.bias = with_bias;
      c.eps = 1e-6f;
      c.q_norm = randn_bf16(static_cast<size_t>(g.dh), 34, 0.05f);
      c.k_norm = c.q_norm;
      for (size_t i = 0; i < c.q_norm.size(); ++i) {
        c.q_norm[i] = bf16_to_f32(f32_to_bf16(1.8f * (1.0f + c.q_norm[i])));
        c.k_norm[i] = bf16_to_f32(f32_to_bf16(1.8f * (1.0f - c.k_norm[i])));
      }
      twin::expect_qkv_rope_store_twin(*cpu_, *twin_, c);
    }
}

// The whole LLaDA-MoE forward (QK-norm, 8 experts top-2; head_dim 64, so the reference attention)
// on CUDA against the recorded upstream fp32 logits and the CPU, within a small multiple of the
// error of an independent bf16 forward (the yardstick file; its L64 is large: llada_moe_a's QK-norm
// weights of ~1.8 make the attention sharp), and the verify pass against the full forward (two bf16
// computations of the same rows: the same bound).
TEST_F(CudaMoe, LladaMoeGoldenForward) {
  const auto dir = test::test_data_dir() / "golden" / "llada_moe_a";
  std::unique_ptr<Backend> gpu = is_cuda_ ? cuda_with_attention("reference") : make_cpu_backend(0);
  Model mc = test::load_model(*cpu_, dir);
  Model mg = test::load_model(*gpu, dir);
  auto fwd = SafetensorsFile::open(dir / "forward.safetensors");
  const auto yard = test::load_json(test::test_data_dir() / "golden" / "llada_moe_a_bf16_reference_error.json");
  const int64_t V = mc.config.embedding_size;
  for (const char* key : {"L7", "L33", "L64", "L130"}) {
    SCOPED_TRACE(key);
    const std::vector<int32_t> ids = test::i64_tensor_as_i32(fwd->tensors().at(std::string("input_ids.") + key));
    const std::vector<float> up = test::f32_tensor(fwd->tensors().at(std::string("logits.") + key));
    const std::vector<float> lc = test::full_logits(*cpu_, mc, {ids}), lg = test::full_logits(*gpu, mg, {ids});
    test::expect_within_bf16_yardstick("llada_moe_a", key, lg, lc, up, V, yard);
  }
  const std::vector<int32_t> x = test::i64_tensor_as_i32(fwd->tensors().at("input_ids.L64"));
  const double verify = test::verify_vs_full_forward(*gpu, mg, x, 20, 37);
  std::printf("llada_moe_a L64 verify [20, 37) vs full forward: %.3e\n", verify);
  EXPECT_LE(verify, test::kBf16YardstickFactor * yard["rel_max_err"]["L64"].get<double>());
}

// The MoE layer loop recorded as a CUDA graph (run_recorded: op by op at a key's first sighting,
// captured at the second, replayed after): the device-side sort and tile list make each call's
// expert groups anew, so every call equals the op-by-op backend's bit for bit although each brings
// other tokens (other groups, other tile counts under the same grid bound).
TEST_F(CudaMoe, LladaMoeRecordedLoopReplaysExactly) {
  if (!is_cuda_) GTEST_SKIP() << "CUDA graphs only";
  const auto dir = test::test_data_dir() / "golden" / "llada_moe_a";
  BackendOptions o = attention_options("reference");
  o.cuda_graphs = false;
  std::unique_ptr<Backend> eager = cuda_with(o);
  o.cuda_graphs = true;
  std::unique_ptr<Backend> graphs = cuda_with(o);
  Model me = test::load_model(*eager, dir), mg = test::load_model(*graphs, dir);
  const int32_t V = static_cast<int32_t>(me.config.embedding_size);
  auto batch = [&](int32_t salt) {
    std::vector<int32_t> a, b;
    for (int32_t i = 0; i < 40; ++i) a.push_back((7 + 31 * i + salt * 13) % (V - 64) + 1);
    for (int32_t i = 0; i < 24; ++i) b.push_back((3 + 17 * i + salt * 29) % (V - 64) + 1);
    return test::full_recompute_batch({a, b});
  };
  auto run = [](Backend& be, const Model& m, const ForwardBatch& fb, KvStore& kv, ForwardWorkspace& ws) {
    Tensor logits = model_forward(be, m, fb, kv, ws);
    std::vector<float> out(static_cast<size_t>(logits.numel()));
    be.copy_to_host(out.data(), logits);
    return out;
  };
  KvStore kve = make_kv_store(*eager, me.config, 64, true), kvg = make_kv_store(*graphs, mg.config, 64, true);
  ForwardWorkspace wse = make_forward_workspace(*eager, me.config, 64, 64, 4);
  ForwardWorkspace wsg = make_forward_workspace(*graphs, mg.config, 64, 64, 4);
  for (int32_t salt : {1, 2, 3, 4, 1}) {
    SCOPED_TRACE("salt " + std::to_string(salt));
    const ForwardBatch fb = batch(salt);
    const std::vector<float> want = run(*eager, me, fb, kve, wse), got = run(*graphs, mg, fb, kvg, wsg);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
  const Backend::RecordingStats st = graphs->recording_stats();
  EXPECT_EQ(st.failed, 0);
  EXPECT_EQ(st.captures, 1);
  EXPECT_EQ(st.replays, 3);
}

}  // namespace
}  // namespace flashdllm
