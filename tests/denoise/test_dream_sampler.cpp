// Dream's sampler (src/denoise/dream_sampler.h) against the upstream diffusion_generate traces of
// tests/data/golden/dream_a (gen_dream.json; NEWFAM.md: Dream-org generation_utils.py run in fp32 on a
// GPU, temperature 0, algs entropy and maskgit_plus, top_k null and 50), and its token rule
// (SelectParams::dream_rule) against hand-computed distributions.
//  * Schedule: dream_transfer_count over every recorded run reproduces its k_schedule exactly (no model).
//  * Teacher-forced: from the recorded state before every step, the committed set and tokens equal the
//    recorded ones wherever the recorded margin exceeds kFp32DecisionMargin; the count always.
//  * Free-running: runs whose min_margin exceeds it reproduce output_ids token for token, alone and
//    as the recorded batch of two.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "common/golden_fixture.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "denoise/decode_rules.h"
#include "denoise/dream_sampler.h"

namespace flashdllm::test {
namespace {

using nlohmann::json;

std::filesystem::path dream_dir() { return test_data_dir() / "golden" / "dream_a"; }

const json& dream_json() {
  static const json j = load_json(dream_dir() / "gen_dream.json");
  return j;
}

CpuCheckpoint& dream_golden() { return cpu_checkpoint(dream_dir(), 1); }

DreamAlg alg_of(const json& run) { return parse_dream_alg(run["alg"].get<std::string>()); }

GenerateOptions options_of(const json& run) {
  GenerateOptions o;
  o.decode.cache = CacheMode::kNone;
  o.decode.sampler = Sampler::kDream;
  o.decode.dream_alg = alg_of(run);
  o.sampling.gen_length = run["gen_length"];
  o.sampling.steps = run["steps"];
  o.sampling.top_k = run["top_k"].is_null() ? 0 : run["top_k"].get<int64_t>();
  return o;
}

std::vector<int32_t> prompt_of(const json& run) { return golden_prompt(dream_json(), run); }

bool clear_of_ties(const json& run) {
  return run["min_margin"].is_number() && run["min_margin"].get<double>() > kFp32DecisionMargin;
}

// ------------------------------------------------------------------------------------------ schedule

TEST(DreamSchedule, TransferCountsEqualEveryRecordedKSchedule) {
  const json& runs = dream_json()["runs"];
  ASSERT_FALSE(runs.empty());
  for (const json& r : runs) {
    const int64_t G = r["gen_length"], S = r["steps"];
    const std::vector<float> t = dream_timesteps(S, 1e-3f);
    ASSERT_EQ(static_cast<int64_t>(t.size()), S + 1);
    EXPECT_EQ(t.front(), 1.0f);
    EXPECT_EQ(t.back(), 1e-3f);
    std::vector<int64_t> ks;
    int64_t n = G;
    for (int64_t i = 0; i < S; ++i) {
      ks.push_back(dream_transfer_count(n, i, t));
      n -= ks.back();
    }
    EXPECT_EQ(ks, r["k_schedule"].get<std::vector<int64_t>>()) << "G " << G << " S " << S;
    EXPECT_EQ(n, 0);
  }
}

TEST(DreamSchedule, RefusesBadArguments) {
  EXPECT_THROW(dream_timesteps(0, 1e-3f), Error);
  EXPECT_THROW(dream_timesteps(8, 0.0f), Error);
  EXPECT_THROW(dream_timesteps(8, 1.0f), Error);
  const std::vector<float> t = dream_timesteps(4, 1e-3f);
  EXPECT_THROW(dream_transfer_count(3, 4, t), Error);
  EXPECT_EQ(dream_transfer_count(3, 3, t), 3);  // the last step commits what is left
}

// ------------------------------------------------------------------------------------ token rule

struct Picked {
  int32_t token;
  double conf;
};
Picked select_one(std::vector<float> logits, const SelectParams& p) {
  static const std::unique_ptr<Backend> be = make_cpu_backend(1);
  const auto V = static_cast<int64_t>(logits.size());
  int32_t key = 7, token = -1;
  double conf = 0.0;
  be->select_tokens(
      Tensor(logits.data(), DType::kF32, DeviceKind::kCPU, {1, V}), Tensor(&key, DType::kI32, DeviceKind::kCPU, {1}), p,
      Tensor(&token, DType::kI32, DeviceKind::kCPU, {1}), Tensor(&conf, DType::kF64, DeviceKind::kCPU, {1}));
  return {token, conf};
}

/// Probabilities 0.15, 0.5, 0.05, 0.3 as the logits ln p (fp32).
std::vector<float> four_way() { return {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)}; }
SelectParams dream_params(SelectConfidence c) {
  SelectParams p;
  p.dream_rule = true;
  p.confidence = c;
  return p;
}

TEST(DreamTokenRule, ProbabilityMarginAndNegativeEntropy) {
  const double tol = 1e-6;  // fp32 logits of ln p: p recovered to ~1e-7 relative
  Picked a = select_one(four_way(), dream_params(SelectConfidence::kProbability));
  EXPECT_EQ(a.token, 1);
  EXPECT_NEAR(a.conf, 0.5, tol);
  Picked m = select_one(four_way(), dream_params(SelectConfidence::kMargin));
  EXPECT_EQ(m.token, 1);
  EXPECT_NEAR(m.conf, 0.5 - 0.3, tol);
  Picked e = select_one(four_way(), dream_params(SelectConfidence::kNegEntropy));
  double h = 0;
  for (double p : {0.5, 0.3, 0.15, 0.05}) h += p * std::log(p + 1e-10);
  EXPECT_EQ(e.token, 1);
  EXPECT_NEAR(e.conf, h, tol);
}

TEST(DreamTokenRule, TopKAndTopPRenormaliseTheKeptTokens) {
  const double tol = 1e-6;
  SelectParams p = dream_params(SelectConfidence::kProbability);
  p.top_k = 2;  // 0.5 and 0.3 stay: p(x0) = 0.5 / 0.8
  EXPECT_NEAR(select_one(four_way(), p).conf, 0.5 / 0.8, tol);
  p.top_k = 0;
  p.top_p = 0.6;  // 0.5 does not reach 0.6: the first token past it (0.3) stays too
  EXPECT_NEAR(select_one(four_way(), p).conf, 0.5 / 0.8, tol);
  p.top_p = 0.4;  // 0.5 crosses at once: only it stays
  EXPECT_NEAR(select_one(four_way(), p).conf, 1.0, tol);
  p.top_p = 0.9;  // 0.5 + 0.3 = 0.8 < 0.9, 0.95 crosses: 0.15 stays, 0.05 goes
  EXPECT_NEAR(select_one(four_way(), p).conf, 0.5 / 0.95, tol);
  p.confidence = SelectConfidence::kNegEntropy;
  double h = 0;
  for (double q : {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95}) h += q * std::log(q + 1e-10);
  EXPECT_NEAR(select_one(four_way(), p).conf, h, tol);
}

TEST(DreamTokenRule, TemperatureScalesTheDistributionAndSamples) {
  SelectParams p = dream_params(SelectConfidence::kProbability);
  p.temperature = 0.5;  // softmax(ln p / 0.5) ∝ p²: 0.25, 0.09, 0.0225, 0.0025
  const double z = 0.25 + 0.09 + 0.0225 + 0.0025;
  const std::vector<double> want = {0.0225 / z, 0.25 / z, 0.0025 / z, 0.09 / z};
  int counts[4] = {0, 0, 0, 0};
  const int draws = 2000;
  for (int s = 0; s < draws; ++s) {
    p.seed = static_cast<uint64_t>(s);
    const Picked x = select_one(four_way(), p);
    ASSERT_GE(x.token, 0);
    ASSERT_LT(x.token, 4);
    EXPECT_NEAR(x.conf, want[static_cast<size_t>(x.token)], 1e-6);  // confidence = p_T(x0)
    ++counts[x.token];
  }
  // Frequencies within 5 binomial standard deviations of p_T.
  for (int v = 0; v < 4; ++v) {
    const double sd = std::sqrt(draws * want[v] * (1 - want[v]));
    EXPECT_NEAR(counts[v], draws * want[v], 5 * sd + 1) << "token " << v;
  }
}

TEST(DreamTokenRule, ExcludedTokenKeepsItsMassButIsNeverChosen) {
  SelectParams p = dream_params(SelectConfidence::kProbability);
  p.exclude_token = 1;  // the most probable one
  const Picked x = select_one(four_way(), p);
  EXPECT_EQ(x.token, 3);
  EXPECT_NEAR(x.conf, 0.3, 1e-6);
}

// ------------------------------------------------------------------------------------ golden runs

struct Case {
  size_t index = 0;
  std::string name;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "run " << c.index; }

std::vector<Case> cases(bool free_run_only) {
  std::vector<Case> out;
  const json& runs = dream_json()["runs"];
  for (size_t i = 0; i < runs.size(); ++i) {
    const json& r = runs[i];
    if (r["batched"].get<bool>()) continue;  // the batch of two: DreamGolden.BatchOfTwo
    if (free_run_only && !clear_of_ties(r)) continue;
    out.push_back({i, fmt::format("run{}_{}{}_{}_G{}_S{}_topk{}", i, r["prompt_set"].get<std::string>(),
                                  r["prompt_index"].get<int>(), r["alg"].get<std::string>(), r["gen_length"].get<int>(),
                                  r["steps"].get<int>(), r["top_k"].is_null() ? 0 : r["top_k"].get<int>())});
  }
  return out;
}

class DreamTeacherForced : public ::testing::TestWithParam<Case> {};

TEST_P(DreamTeacherForced, EveryStepMatchesAboveNoiseMargin) {
  CpuCheckpoint& g = dream_golden();
  const json& r = dream_json()["runs"][GetParam().index];
  const json& trace = r["trace"];
  const std::vector<int32_t> out = r["output_ids"].get<std::vector<int32_t>>();
  DreamSampler sampler(*g.backend, g.model, options_of(r));
  const std::vector<int32_t> prompt = prompt_of(r);
  const auto P = static_cast<int64_t>(prompt.size());

  std::vector<DreamState> states;
  DreamState cur = sampler.init_state(prompt);
  ASSERT_EQ(cur.steps, r["steps"].get<int64_t>());
  for (size_t k = 0; k < trace.size(); ++k) {
    DreamState s = cur;
    s.step_in_block = static_cast<int64_t>(k);
    s.nfe = static_cast<int64_t>(k);
    states.push_back(s);
    for (int64_t p : trace[k]["committed"].get<std::vector<int64_t>>()) cur.x[P + p] = out[static_cast<size_t>(p)];
  }
  const std::vector<StepCommit> got = sampler.step(states);
  int compared = 0;
  for (size_t k = 0; k < trace.size(); ++k) {
    const std::vector<int64_t> want = trace[k]["committed"].get<std::vector<int64_t>>();
    std::vector<int64_t> have;
    for (int64_t p : got[k].positions) have.push_back(p - P);
    EXPECT_EQ(have.size(), want.size()) << "step " << k << ": the schedule fixes the count";
    if (golden_margin(trace[k]["margin"]) <= kFp32DecisionMargin) continue;
    ++compared;
    EXPECT_EQ(have, want) << "step " << k << " (margin " << trace[k]["margin"] << ")";
    if (have == want) {
      for (size_t j = 0; j < want.size(); ++j)
        EXPECT_EQ(got[k].tokens[j], out[static_cast<size_t>(want[j])]) << "step " << k << " position " << want[j];
    }
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Golden, DreamTeacherForced, ::testing::ValuesIn(cases(false)),
                         [](const auto& info) { return info.param.name; });

class DreamFreeRun : public ::testing::TestWithParam<Case> {};

TEST_P(DreamFreeRun, ReproducesTheOutput) {
  CpuCheckpoint& g = dream_golden();
  const json& r = dream_json()["runs"][GetParam().index];
  DreamSampler sampler(*g.backend, g.model, options_of(r));
  std::vector<int64_t> ks;
  const std::vector<DreamState> done = sampler.generate(
      {prompt_of(r)},
      [&](size_t, const DreamState&, const StepCommit& c) { ks.push_back(static_cast<int64_t>(c.positions.size())); });
  const auto P = static_cast<int64_t>(prompt_of(r).size());
  const std::vector<int32_t> got(done[0].x.begin() + P, done[0].x.end());
  EXPECT_EQ(got, r["output_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(ks, r["k_schedule"].get<std::vector<int64_t>>());
}

INSTANTIATE_TEST_SUITE_P(Golden, DreamFreeRun, ::testing::ValuesIn(cases(true)),
                         [](const auto& info) { return info.param.name; });

TEST(DreamGolden, BatchOfTwoEqualsEachAloneAndUpstream) {
  CpuCheckpoint& g = dream_golden();
  const json& runs = dream_json()["runs"];
  std::vector<size_t> pair;
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i]["prompt_set"] == "batch_pair" && runs[i]["batched"].get<bool>()) pair.push_back(i);
  ASSERT_FALSE(pair.empty());
  const json& r0 = runs[pair[0]];
  std::vector<std::vector<int32_t>> prompts = golden_prompt_set(dream_json(), r0);
  DreamSampler sampler(*g.backend, g.model, options_of(r0));
  const std::vector<DreamState> done = sampler.generate(prompts);
  ASSERT_EQ(done.size(), prompts.size());
  for (size_t i : pair) {
    const json& r = runs[i];
    const auto b = r["prompt_index"].get<size_t>();
    const DreamState& s = done[b];
    const std::vector<int32_t> got(s.x.begin() + s.prompt_len, s.x.end());
    if (clear_of_ties(r)) {
      EXPECT_EQ(got, r["output_ids"].get<std::vector<int32_t>>()) << "prompt " << b;
    }
    const DreamState alone = sampler.generate({prompts[b]})[0];
    EXPECT_EQ(alone.x, s.x) << "prompt " << b << ": batch mates must not change a sequence";
  }
}

}  // namespace
}  // namespace flashdllm::test
