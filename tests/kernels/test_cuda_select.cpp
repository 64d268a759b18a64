// CUDA denoiser ops vs the CPU backend: cfg_combine and select_tokens (argmax / Gumbel-max with
// counter-based noise, float64 / float32 softmax confidence, suppressed tokens, the excluded mask id
// at temperatures up to 1e3), vocabulary sizes off the 512-thread block, temperature 0 and > 0. x0
// must be identical on both sides except at documented near-ties of the noised keys (reported,
// counted); conf within kConfidenceF64RelTol / kConfidenceF32RelTol.
//
// Small/... cases are the compute-sanitizer set; Sweep/... the full sweep.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <ostream>
#include <random>

#include "core/philox.h"
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

enum class Size { kSmall, kSweep };
void PrintTo(Size s, std::ostream* os) { *os << (s == Size::kSmall ? "small" : "sweep"); }
std::string size_name(const ::testing::TestParamInfo<Size>& i) { return i.param == Size::kSmall ? "small" : "sweep"; }

/// x0 and conf of one select_tokens call on each backend.
struct Selected {
  std::vector<int32_t> x_cpu, x_twin;
  std::vector<double> f_cpu, f_twin;
};

class CudaSelect : public twin::TwinTest, public ::testing::WithParamInterface<Size> {
 protected:
  bool small() const { return GetParam() == Size::kSmall; }
  /// select_tokens with `p` on the CPU (lc, kc -> xc, fc) and the twin (lt, kt -> xt, ft, poisoned first).
  Selected select_both(const SelectParams& p, int64_t R, const Dev& lc, const Dev& kc, const Dev& xc, const Dev& fc,
                       const Dev& lt, const Dev& kt, const Dev& xt, const Dev& ft) {
    twin::poison(*twin_, xt.t);
    twin::poison(*twin_, ft.t);
    cpu_->select_tokens(lc.t, kc.t, p, xc.t, fc.t);
    twin_->select_tokens(lt.t, kt.t, p, xt.t, ft.t);
    Selected s{std::vector<int32_t>(static_cast<size_t>(R)), std::vector<int32_t>(static_cast<size_t>(R)),
               std::vector<double>(static_cast<size_t>(R)), std::vector<double>(static_cast<size_t>(R))};
    cpu_->copy_to_host(s.x_cpu.data(), xc.t);
    cpu_->copy_to_host(s.f_cpu.data(), fc.t);
    twin_->copy_to_host(s.x_twin.data(), xt.t);
    twin_->copy_to_host(s.f_twin.data(), ft.t);
    return s;
  }
};

TEST_P(CudaSelect, CfgCombineMatchesCpu) {
  struct Case {
    int64_t R, V;
    float scale;
    bool in_place;
  };
  const std::vector<Case> cases = small() ? std::vector<Case>{{2, 1000, 0.5f, false}, {1, 77, 1.0f, true}}
                                          : std::vector<Case>{{1, 126464, 0.0f, false}, {3, 126464, 0.5f, true},
                                                              {33, 1024, 2.0f, false}, {5, 5, 3.5f, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE("cfg_combine R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) + " scale " +
                 std::to_string(c.scale) + (c.in_place ? " in place" : ""));
    const std::vector<float> cond = randn_bf16(static_cast<size_t>(c.R * c.V), 5 + c.V, 4.0f);
    const std::vector<float> unc = randn_bf16(static_cast<size_t>(c.R * c.V), 6 + c.V, 4.0f);
    Dev cc = make(*cpu_, DType::kF32, c.R, c.V), uc = make(*cpu_, DType::kF32, c.R, c.V),
        oc = make(*cpu_, DType::kF32, c.R, c.V);
    Dev ct = make(*twin_, DType::kF32, c.R, c.V), ut = make(*twin_, DType::kF32, c.R, c.V),
        ot = make(*twin_, DType::kF32, c.R, c.V);
    put(*cpu_, cc.t, cond);
    put(*cpu_, uc.t, unc);
    put(*twin_, ct.t, cond);
    put(*twin_, ut.t, unc);
    twin::poison(*twin_, ot.t);
    cpu_->cfg_combine(cc.t, uc.t, c.scale, oc.t);
    const Tensor out = c.in_place ? ct.t : ot.t;
    twin_->cfg_combine(ct.t, ut.t, c.scale, out);
    // The same three fp32 operations in the same order on both sides (no FMA contraction).
    EXPECT_TRUE(close("cfg_combine", get(*twin_, out), get(*cpu_, oc.t), c.V, test::kFp32OpRelTol));
  }
}

// The noised key of every vocabulary entry, as the CPU defines it, for near-tie detection.
double key_of(const std::vector<float>& logits, int64_t r, int64_t V, int64_t v, uint32_t row_key,
              const SelectParams& p) {
  if (v == p.suppress_token || v == p.exclude_token) return -std::numeric_limits<double>::infinity();
  double s = logits[static_cast<size_t>(r * V + v)];
  if (p.temperature > 0.0)
    s += -p.temperature * std::log(-std::log(philox_uniform(p.seed, p.step, row_key, static_cast<uint32_t>(v))));
  return s;
}

TEST_P(CudaSelect, SelectTokensMatchesCpu) {
  struct Case {
    int64_t R, V;
    float logit_scale;
  };
  // A row is cut into chunks of 16384 logits, one block each (select.h): 40001 is three chunks with
  // rows starting off a 16-byte boundary; 65537 rows take two launches (the grid's y limit).
  const std::vector<Case> cases =
      small() ? std::vector<Case>{{3, 1000, 3.0f}, {2, 5, 1.0f}, {3, 40001, 3.0f}}
              : std::vector<Case>{{1, 126464, 3.0f}, {33, 126464, 6.0f}, {7, 126465, 2.0f}, {16, 1024, 3.0f},
                                  {5, 511, 1.0f},    {9, 513, 30.0f},    {4, 1, 1.0f},      {65537, 3, 1.0f}};
  std::vector<SelectParams> params;
  for (double tau : {0.0, 0.5, 1.0}) {
    for (bool f64 : {true, false}) {
      SelectParams p;
      p.temperature = tau;
      p.seed = 0x1234567890abcdefull + static_cast<uint64_t>(tau * 10);
      p.step = 3;
      p.confidence_f64 = f64;
      params.push_back(p);
    }
  }
  {  // LLaDA's logits_eos_inf + confidence_eos_eot_inf
    SelectParams p;
    p.suppress_token = 3;
    p.conf_suppress_a = 4;
    p.conf_suppress_b = 0;
    params.push_back(p);
    p.temperature = 0.7;
    p.step = (uint64_t{1} << 40) + 5;
    params.push_back(p);
  }
  // The mask id is never a candidate (issue 15, finding 1): excluded at temperatures up to 1e3,
  // where the noise dominates the logits, and at 0 where it holds row 1's largest logit (below).
  constexpr int32_t kExcluded = 2;
  for (double tau : {0.0, 100.0, 1000.0}) {
    SelectParams p;
    p.temperature = tau;
    p.seed = 0xfeedull + static_cast<uint64_t>(tau);
    p.step = 11;
    p.exclude_token = kExcluded;
    params.push_back(p);
  }
  int64_t near_ties = 0, rows_checked = 0;
  for (const Case& c : cases) {
    std::vector<float> logits = randn_bf16(static_cast<size_t>(c.R * c.V), 77 + c.V, c.logit_scale);
    // Row 0: exact ties of the maximum at two indices (argmax must pick the first on both sides).
    if (c.V >= 3) {
      const float m = *std::max_element(logits.begin(), logits.begin() + c.V) + 1.0f;
      logits[1] = m;
      logits[static_cast<size_t>(c.V - 1)] = m;
      if (c.R > 1) {  // row 1's largest logit at the excluded id, by a margin, not dominant (f32 confidences)
        const float m1 = *std::max_element(logits.begin() + c.V, logits.begin() + 2 * c.V);
        logits[static_cast<size_t>(c.V + kExcluded)] = m1 + 0.5f;
      }
    }
    std::vector<int32_t> keys(static_cast<size_t>(c.R));
    std::mt19937 rng(static_cast<uint32_t>(c.R * 7 + c.V));
    for (auto& k : keys) k = static_cast<int32_t>(rng());  // negative keys included
    Dev lc = make(*cpu_, DType::kF32, c.R, c.V), kc = make(*cpu_, DType::kI32, c.R), xc = make(*cpu_, DType::kI32, c.R),
        fc = make(*cpu_, DType::kF64, c.R);
    Dev lt = make(*twin_, DType::kF32, c.R, c.V), kt = make(*twin_, DType::kI32, c.R),
        xt = make(*twin_, DType::kI32, c.R), ft = make(*twin_, DType::kF64, c.R);
    put(*cpu_, lc.t, logits);
    put(*twin_, lt.t, logits);
    put_i32(*cpu_, kc.t, keys);
    put_i32(*twin_, kt.t, keys);
    for (const SelectParams& p : params) {
      SCOPED_TRACE("select_tokens R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) + " tau " +
                   std::to_string(p.temperature) + (p.confidence_f64 ? " f64" : " f32") + " suppress " +
                   std::to_string(p.suppress_token) + "/" + std::to_string(p.conf_suppress_a) + "/" +
                   std::to_string(p.conf_suppress_b));
      const Selected sel = select_both(p, c.R, lc, kc, xc, fc, lt, kt, xt, ft);
      const std::vector<int32_t>&x_cpu = sel.x_cpu, &x_twin = sel.x_twin;
      const std::vector<double>&f_cpu = sel.f_cpu, &f_twin = sel.f_twin;
      for (int64_t r = 0; r < c.R; ++r) {
        const size_t i = static_cast<size_t>(r);
        ++rows_checked;
        if (p.exclude_token >= 0) {
          EXPECT_NE(x_twin[i], p.exclude_token) << "row " << r << ": the excluded token was chosen";
          EXPECT_NE(x_cpu[i], p.exclude_token) << "row " << r << ": the excluded token was chosen (CPU)";
        }
        if (x_twin[i] != x_cpu[i]) {
          // Allowed only at a near-tie of the two largest noised keys.
          double best = -INFINITY, second = -INFINITY;
          for (int64_t v = 0; v < c.V; ++v) {
            const double k = key_of(logits, r, c.V, v, static_cast<uint32_t>(keys[i]), p);
            if (k > best) {
              second = best;
              best = k;
            } else if (k > second) {
              second = k;
            }
          }
          const bool near_tie = p.temperature > 0.0 && best - second < twin::kGumbelNearTie;
          EXPECT_TRUE(near_tie) << "row " << r << ": x0 twin " << x_twin[i] << " vs cpu " << x_cpu[i]
                                << " (top-2 key margin " << best - second << ")";
          near_ties += near_tie ? 1 : 0;
          continue;
        }
        const double rel = p.confidence_f64 ? twin::kConfidenceF64RelTol : twin::kConfidenceF32RelTol;
        const double tol = rel * std::max(std::fabs(f_cpu[i]), 1e-30);
        EXPECT_NEAR(f_twin[i], f_cpu[i], tol) << "row " << r << ": confidence of token " << x_cpu[i];
        if (c.V >= 3 && r == 0 && p.temperature == 0.0 && p.suppress_token != 1) {
          EXPECT_EQ(x_twin[i], 1) << "tie of the maximum at indices 1 and V-1 must resolve to 1";
        }
      }
    }
  }
  if (near_ties > 0)
    std::printf("[ select_tokens ] %lld of %lld rows were Gumbel near-ties (allowed to differ)\n",
                static_cast<long long>(near_ties), static_cast<long long>(rows_checked));
}

// Dream's rule (SelectParams::dream_rule): temperature-scaled confidences, top-1 − top-2 margin and
// the negative entropy, with the mask id excluded, against the CPU's definition (cpu_select.cpp).
TEST_P(CudaSelect, DreamRuleMatchesCpu) {
  struct Case {
    int64_t R, V;
    float logit_scale;
  };
  const std::vector<Case> cases = small() ? std::vector<Case>{{3, 1000, 3.0f}, {3, 40001, 3.0f}}
                                          : std::vector<Case>{{17, 152064, 4.0f}, {5, 1024, 8.0f}, {4, 2, 1.0f}};
  for (const Case& c : cases) {
    const std::vector<float> logits = randn_bf16(static_cast<size_t>(c.R * c.V), 91 + c.V, c.logit_scale);
    std::vector<int32_t> keys(static_cast<size_t>(c.R));
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int32_t>(1000 + 7 * i);
    Dev lc = make(*cpu_, DType::kF32, c.R, c.V), kc = make(*cpu_, DType::kI32, c.R), xc = make(*cpu_, DType::kI32, c.R),
        fc = make(*cpu_, DType::kF64, c.R);
    Dev lt = make(*twin_, DType::kF32, c.R, c.V), kt = make(*twin_, DType::kI32, c.R),
        xt = make(*twin_, DType::kI32, c.R), ft = make(*twin_, DType::kF64, c.R);
    put(*cpu_, lc.t, logits);
    put(*twin_, lt.t, logits);
    put_i32(*cpu_, kc.t, keys);
    put_i32(*twin_, kt.t, keys);
    // Dream's filters: none, top_p alone (a wide and a narrow nucleus), top_k alone, both. The bf16
    // logits repeat values, so the nucleus boundary often falls inside a run of ties (kept in index order).
    struct Filter {
      double top_p;
      int32_t top_k;
    };
    for (const Filter f : {Filter{1.0, 0}, Filter{0.9, 0}, Filter{0.2, 0}, Filter{1.0, 50}, Filter{0.7, 20}})
      for (SelectConfidence kind :
           {SelectConfidence::kProbability, SelectConfidence::kMargin, SelectConfidence::kNegEntropy})
        for (double tau : {0.0, 0.5}) {
          SelectParams p;
          p.dream_rule = true;
          p.confidence = kind;
          p.temperature = tau;
          p.seed = 42;
          p.exclude_token = c.V > 2 ? 1 : -1;
          p.top_p = f.top_p;
          p.top_k = f.top_k;
          SCOPED_TRACE("dream rule R=" + std::to_string(c.R) + " V=" + std::to_string(c.V) + " confidence " +
                       std::to_string(static_cast<int>(kind)) + " tau " + std::to_string(tau) + " top_p " +
                       std::to_string(f.top_p) + " top_k " + std::to_string(f.top_k));
          const Selected sel = select_both(p, c.R, lc, kc, xc, fc, lt, kt, xt, ft);
          const std::vector<int32_t>&x_cpu = sel.x_cpu, &x_twin = sel.x_twin;
          const std::vector<double>&f_cpu = sel.f_cpu, &f_twin = sel.f_twin;
          for (size_t r = 0; r < x_cpu.size(); ++r) {
            EXPECT_EQ(x_twin[r], x_cpu[r]) << "row " << r;
            // Probabilities (and their difference): the f64 softmax tolerance on a scale of 1. Negative
            // entropy: that on |H|, plus what Dream's +1e-10 inside the log may add per token (select.h).
            const double tol =
                kind == SelectConfidence::kNegEntropy
                    ? twin::kConfidenceF64RelTol * std::max(1.0, std::fabs(f_cpu[r])) + 1e-10 * static_cast<double>(c.V)
                    : twin::kConfidenceF64RelTol;
            EXPECT_NEAR(f_twin[r], f_cpu[r], tol) << "row " << r;
          }
        }
      }
}

// The filters change what is selected (so the comparison above can fail): with a narrow nucleus the
// argmax's probability is renormalised over the few kept tokens (mass <= 0.2 + its own), so it rises.
TEST_P(CudaSelect, DreamFiltersChangeTheConfidence) {
  const int64_t R = 3, V = small() ? 1000 : 152064;
  const std::vector<float> logits = randn_bf16(static_cast<size_t>(R * V), 7, 3.0f);
  Dev lt = make(*twin_, DType::kF32, R, V), kt = make(*twin_, DType::kI32, R), xt = make(*twin_, DType::kI32, R),
      ft = make(*twin_, DType::kF64, R);
  put(*twin_, lt.t, logits);
  put_i32(*twin_, kt.t, {1, 2, 3});
  auto confidences = [&](double top_p, int32_t top_k) {
    SelectParams p;
    p.dream_rule = true;
    p.top_p = top_p;
    p.top_k = top_k;
    twin_->select_tokens(lt.t, kt.t, p, xt.t, ft.t);
    std::vector<double> f(static_cast<size_t>(R));
    twin_->copy_to_host(f.data(), ft.t);
    return f;
  };
  const std::vector<double> all = confidences(1.0, 0), nucleus = confidences(0.2, 0), top2 = confidences(1.0, 2);
  for (size_t r = 0; r < all.size(); ++r) {
    EXPECT_GT(nucleus[r], all[r]) << "row " << r;
    EXPECT_GT(top2[r], all[r]) << "row " << r << ": top_k 2 (and the ties of the second) renormalises too";
  }
}

// A NaN logit makes the confidence NaN on both backends (the denoiser's check_selection rejects
// non-finite confidences): row 0 has a whole 16384-logit chunk of NaN beside finite chunks (a chunk
// without a finite logit, whose partial must still carry the NaN), row 1 one NaN among finite logits.
TEST_P(CudaSelect, NanLogitMakesTheConfidenceNan) {
  if (!small()) GTEST_SKIP() << "small only";
  const int64_t R = 2, V = 40001;
  std::vector<float> logits = randn_bf16(static_cast<size_t>(R * V), 5, 3.0f);
  std::fill(logits.begin(), logits.begin() + 16384, std::numeric_limits<float>::quiet_NaN());
  logits[static_cast<size_t>(V + 20000)] = std::numeric_limits<float>::quiet_NaN();
  Dev lc = make(*cpu_, DType::kF32, R, V), kc = make(*cpu_, DType::kI32, R), xc = make(*cpu_, DType::kI32, R),
      fc = make(*cpu_, DType::kF64, R);
  Dev lt = make(*twin_, DType::kF32, R, V), kt = make(*twin_, DType::kI32, R), xt = make(*twin_, DType::kI32, R),
      ft = make(*twin_, DType::kF64, R);
  put(*cpu_, lc.t, logits);
  put(*twin_, lt.t, logits);
  put_i32(*cpu_, kc.t, {1, 2});
  put_i32(*twin_, kt.t, {1, 2});
  for (bool f64 : {true, false}) {
    SelectParams p;
    p.confidence_f64 = f64;
    cpu_->select_tokens(lc.t, kc.t, p, xc.t, fc.t);
    twin_->select_tokens(lt.t, kt.t, p, xt.t, ft.t);
    std::vector<double> f_cpu(static_cast<size_t>(R)), f_twin(f_cpu.size());
    cpu_->copy_to_host(f_cpu.data(), fc.t);
    twin_->copy_to_host(f_twin.data(), ft.t);
    for (size_t r = 0; r < f_cpu.size(); ++r) {
      EXPECT_TRUE(std::isnan(f_cpu[r])) << "row " << r << (f64 ? " f64" : " f32") << ": CPU confidence " << f_cpu[r];
      EXPECT_TRUE(std::isnan(f_twin[r])) << "row " << r << (f64 ? " f64" : " f32") << ": confidence " << f_twin[r];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Small, CudaSelect, ::testing::Values(Size::kSmall), size_name);
INSTANTIATE_TEST_SUITE_P(Sweep, CudaSelect, ::testing::Values(Size::kSweep), size_name);

}  // namespace
}  // namespace flashdllm
