// LLaDA's sampler on LLaDA-MoE against the upstream traces of tests/data/golden/llada_moe_a
// (gen_llada_moe.json; NEWFAM.md: ML-GSAI LLaDA generate() run on the upstream LLaDAMoEModelLM in
// fp32 on a GPU, quota mode, fp32 softmax confidences), as tests/denoise/test_sampler_golden.cpp
// does for LLaDA:
//  * teacher-forced: from the recorded state before every step, the committed set and tokens equal
//    the recorded ones wherever the recorded margin exceeds kFp32DecisionMargin; the count always;
//  * free-running: runs whose min_margin exceeds it reproduce output_ids and every step's set;
//  * the cached modes run on the MoE forward: Fast-dLLM prefix / dual cache and Flash-Cache (with
//    and without Flash-Verify) through the engine on the CPU backend, every canvas position decoded.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>

#include "backend/backend.h"
#include "common/golden_fixture.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "denoise/decode_rules.h"
#include "denoise/llada_sampler.h"
#include "flashdllm/engine.h"

namespace flashdllm::test {
namespace {

using nlohmann::json;

std::filesystem::path moe_dir() { return test_data_dir() / "golden" / "llada_moe_a"; }

const json& moe_json() {
  static const json j = load_json(moe_dir() / "gen_llada_moe.json");
  return j;
}

CpuCheckpoint& moe_golden() { return cpu_checkpoint(moe_dir()); }

GenerateOptions options_of(const json& r) {
  GenerateOptions o;
  o.decode.cache = CacheMode::kNone;
  o.sampling.gen_length = r["gen_length"];
  o.decode.block_length = r["block_length"];
  o.sampling.steps = r["steps"];
  o.decode.confidence_f32 = true;  // upstream softmaxes the fp32 logits in fp32
  return o;
}

bool clear_of_ties(const json& r) {
  return r["min_margin"].is_number() && r["min_margin"].get<double>() > kFp32DecisionMargin;
}

struct Case {
  size_t index = 0;
  std::string name;
};
void PrintTo(const Case& c, std::ostream* os) { *os << "run " << c.index; }

std::vector<Case> cases(bool free_run_only) {
  std::vector<Case> out;
  const json& runs = moe_json()["runs"];
  for (size_t i = 0; i < runs.size(); ++i) {
    const json& r = runs[i];
    if (r["batched"].get<bool>()) continue;  // the batch of two: LladaMoeSampler.BatchOfTwo
    if (free_run_only && !clear_of_ties(r)) continue;
    out.push_back(
        {i, fmt::format("run{}_{}{}_G{}_B{}_S{}", i, r["prompt_set"].get<std::string>(), r["prompt_index"].get<int>(),
                        r["gen_length"].get<int>(), r["block_length"].get<int>(), r["steps"].get<int>())});
  }
  return out;
}

class LladaMoeTeacherForced : public ::testing::TestWithParam<Case> {};

TEST_P(LladaMoeTeacherForced, EveryStepMatchesAboveNoiseMargin) {
  CpuCheckpoint& g = moe_golden();
  const json& r = moe_json()["runs"][GetParam().index];
  const json& trace = r["trace"];
  const std::vector<int32_t> out = r["output_ids"].get<std::vector<int32_t>>();
  const GenerateOptions o = options_of(r);
  LladaSampler sampler(*g.backend, g.model, o);
  const std::vector<int32_t> prompt = golden_prompt(moe_json(), r);
  const auto P = static_cast<int64_t>(prompt.size());
  const int64_t B = o.decode.block_length, spb = r["steps"].get<int64_t>() / (o.sampling.gen_length / B);

  std::vector<SequenceState> states;
  SequenceState cur = sampler.init_state(prompt);
  for (size_t k = 0; k < trace.size(); ++k) {
    SequenceState s = cur;
    s.block = static_cast<int64_t>(k) / spb;
    s.step_in_block = static_cast<int64_t>(k) % spb;
    s.block_quota = quota_schedule(B, spb);
    states.push_back(s);
    for (int64_t p : trace[k]["committed"].get<std::vector<int64_t>>()) cur.x[P + p] = out[static_cast<size_t>(p)];
  }
  const std::vector<StepCommit> got = sampler.step(states);
  int compared = 0;
  for (size_t k = 0; k < trace.size(); ++k) {
    const std::vector<int64_t> want = trace[k]["committed"].get<std::vector<int64_t>>();
    std::vector<int64_t> have;
    for (int64_t p : got[k].positions) have.push_back(p - P);
    EXPECT_EQ(have.size(), want.size()) << "step " << k << ": quota counts never depend on ties";
    if (golden_margin(trace[k]["margin"]) <= kFp32DecisionMargin) continue;
    ++compared;
    EXPECT_EQ(have, want) << "step " << k << " (margin " << trace[k]["margin"] << ")";
    const bool tokens_clear =
        trace[k]["token_margin"].is_number() && trace[k]["token_margin"].get<double>() > kFp32DecisionMargin;
    if (have == want && tokens_clear) {
      for (size_t j = 0; j < want.size(); ++j) {
        EXPECT_EQ(got[k].tokens[j], out[static_cast<size_t>(want[j])]) << "step " << k << " position " << want[j];
      }
    }
  }
  EXPECT_GT(compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Golden, LladaMoeTeacherForced, ::testing::ValuesIn(cases(false)),
                         [](const auto& info) { return info.param.name; });

class LladaMoeFreeRun : public ::testing::TestWithParam<Case> {};

TEST_P(LladaMoeFreeRun, ReproducesTheOutput) {
  CpuCheckpoint& g = moe_golden();
  const json& r = moe_json()["runs"][GetParam().index];
  LladaSampler sampler(*g.backend, g.model, options_of(r));
  const std::vector<int32_t> prompt = golden_prompt(moe_json(), r);
  const auto P = static_cast<int64_t>(prompt.size());
  std::vector<std::vector<int64_t>> steps;
  const auto states = sampler.generate({prompt}, [&](size_t, const SequenceState&, const StepCommit& c) {
    std::vector<int64_t> rel;
    for (int64_t p : c.positions) rel.push_back(p - P);
    steps.push_back(rel);
  });
  EXPECT_EQ(std::vector<int32_t>(states[0].x.begin() + P, states[0].x.end()),
            r["output_ids"].get<std::vector<int32_t>>());
  ASSERT_EQ(steps.size(), r["trace"].size());
  for (size_t k = 0; k < steps.size(); ++k)
    EXPECT_EQ(steps[k], r["trace"][k]["committed"].get<std::vector<int64_t>>()) << "step " << k;
}

// Runs clear of ties exist in the fixture; the parameter list is empty only if that changes.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(LladaMoeFreeRun);
INSTANTIATE_TEST_SUITE_P(Golden, LladaMoeFreeRun, ::testing::ValuesIn(cases(true)),
                         [](const auto& info) { return info.param.name; });

TEST(LladaMoeSampler, BatchOfTwoEqualsEachAloneAndUpstream) {
  CpuCheckpoint& g = moe_golden();
  const json& runs = moe_json()["runs"];
  std::vector<size_t> pair;
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i]["batched"].get<bool>()) pair.push_back(i);
  ASSERT_EQ(pair.size(), 2u);
  const json& r0 = runs[pair[0]];
  LladaSampler sampler(*g.backend, g.model, options_of(r0));
  const std::vector<std::vector<int32_t>> prompts = golden_prompt_set(moe_json(), r0);
  const auto done = sampler.generate(prompts);
  for (size_t i : pair) {
    const json& r = runs[i];
    const auto b = r["prompt_index"].get<size_t>();
    const auto P = static_cast<int64_t>(prompts[b].size());
    if (clear_of_ties(r)) {
      EXPECT_EQ(std::vector<int32_t>(done[b].x.begin() + P, done[b].x.end()),
                r["output_ids"].get<std::vector<int32_t>>())
          << "prompt " << b;
    }
    EXPECT_EQ(sampler.generate({prompts[b]})[0].x, done[b].x) << "prompt " << b << ": batch mates changed it";
  }
}

// ------------------------------------------------------------------------------ cached modes

struct Mode {
  const char* name;
  CacheMode cache;
  bool verify;
};

TEST(LladaMoeCacheModes, PrefixDualFlashAndFlashVerifyRunOnTheCpu) {
  EngineOptions eo;
  eo.model_dir = moe_dir();
  eo.device = "cpu";
  eo.threads = 2;
  auto engine = Engine::load(eo);
  const json& r = moe_json()["runs"][0];
  GenerateRequest rq;
  rq.prompt_ids = golden_prompt(moe_json(), r);
  rq.chat = false;
  const Mode modes[] = {{"prefix", CacheMode::kPrefix, false},
                        {"dual", CacheMode::kDual, false},
                        {"flash", CacheMode::kFlash, false},
                        {"flash+verify", CacheMode::kFlash, true}};
  for (const Mode& m : modes) {
    SCOPED_TRACE(m.name);
    GenerateOptions go;
    go.decode.cache = m.cache;
    go.decode.verify = m.verify;
    go.sampling.gen_length = 32;
    const auto res = engine->generate({rq}, go);
    ASSERT_EQ(res.size(), 1u);
    EXPECT_TRUE(res[0].error.empty()) << res[0].error;
    ASSERT_EQ(res[0].canvas_ids.size(), 32u);
    const int32_t mask = engine->config().mask_token_id;
    EXPECT_TRUE(std::none_of(res[0].canvas_ids.begin(), res[0].canvas_ids.end(), [&](int32_t t) { return t == mask; }));
    EXPECT_GT(res[0].nfe, 0);
    EXPECT_LE(res[0].nfe, 32);
  }
}

}  // namespace
}  // namespace flashdllm::test
