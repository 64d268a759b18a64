// Tensor-parallel generation through the public API (Engine with EngineOptions::tensor_parallel,
// CPU rank threads): the tokens of TP = 2 (llada-arith-12m, g1) and TP = 4 (g1 re-split into 4
// heads) equal the unsharded engine's in every decoding mode (LLaDA sampler, prefix and dual
// caches, Flash-Cache, Flash-Cache + Flash-Verify, a Gumbel temperature), for checkpoint and
// dummy weights, through generate() and the request-by-request serve path; impossible sizes are
// refused at load naming the size.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "common/model_fixture.h"
#include "common/test_paths.h"
#include "flashdllm/engine.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

using Mode = test::DecodeMode;

/// Every decoding mode: the block samplers on a 32-token canvas in blocks of 16 (quota: 16 steps),
/// Flash-Cache on 48 tokens over 2 slots.
std::vector<Mode> modes() {
  struct Row {
    const char* name;
    CacheMode cache;
    std::optional<double> threshold;
    double temperature;
    bool verify;
  };
  const Row rows[] = {{"none", CacheMode::kNone, {}, 0.0, false},
                      {"none_temperature", CacheMode::kNone, {}, 0.7, false},
                      {"prefix", CacheMode::kPrefix, {}, 0.0, false},
                      {"dual", CacheMode::kDual, 0.9, 0.0, false},
                      {"flash", CacheMode::kFlash, {}, 0.0, false},
                      {"flash_verify", CacheMode::kFlash, {}, 0.0, true}};
  std::vector<Mode> out;
  for (const Row& r : rows) {
    Mode m{r.name, {}, {}};
    m.d.cache = r.cache;
    m.d.verify = r.verify;
    m.s.threshold = r.threshold;
    m.s.temperature = r.temperature;
    m.s.seed = 5;
    if (r.cache == CacheMode::kFlash) {
      m.s.gen_length = 48;
      m.d.n_slots = 2;
    } else {
      m.s.gen_length = 32;
      m.d.block_length = 16;
      m.s.steps = r.threshold ? 0 : 16;
    }
    out.push_back(m);
  }
  return out;
}

EngineOptions options(const std::filesystem::path& dir, int tp, bool dummy = false) {
  EngineOptions o;
  o.model_dir = dir;
  o.threads = 1;
  o.tensor_parallel = tp;
  if (dummy) {
    o.load_format = "dummy";
    o.dummy_seed = 9;
  }
  return o;
}

/// Three prompts of random ids of the model's plain vocabulary (below its special tokens).
std::vector<GenerateRequest> requests(const ModelConfig& c) { return test::random_id_requests(c, 3, 3, 5, 9); }

void expect_same_tokens(Engine& one, Engine& tp, const std::string& what) {
  const auto rq = requests(one.config());
  for (const Mode& m : modes()) {
    GenerateOptions go{m.d, m.s};
    const auto want = one.generate(rq, go);
    const auto got = tp.generate(rq, go);
    ASSERT_EQ(got.size(), want.size());
    int64_t tokens = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].canvas_ids, want[i].canvas_ids) << what << " " << m.name << " request " << i;
      EXPECT_EQ(got[i].nfe, want[i].nfe) << what << " " << m.name << " request " << i;
      EXPECT_EQ(got[i].verify_accepted, want[i].verify_accepted) << what << " " << m.name;
      tokens += static_cast<int64_t>(want[i].canvas_ids.size());
    }
    std::cout << what << " " << m.name << ": " << tokens << " canvas tokens compared\n";
  }
}

TEST(TensorParallelEngine, Tp2TokensEqualTheUnshardedEngineOnTheSmallModel) {
  auto one = Engine::load(options(test::default_model_dir(), 1));
  auto tp = Engine::load(options(test::default_model_dir(), 2));
  EXPECT_NE(tp->backend_name().find("2 tensor-parallel ranks"), std::string::npos) << tp->backend_name();
  expect_same_tokens(*one, *tp, "arith12m tp2");
  // Text prompts through the chat template too.
  GenerateRequest q;
  q.prompt = "Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have at the end?";
  GenerateOptions go;
  go.sampling.gen_length = 64;
  const auto a = one->generate({q}, go), b = tp->generate({q}, go);
  EXPECT_EQ(b[0].text, a[0].text);
  EXPECT_EQ(b[0].output_ids, a[0].output_ids);
}

TEST(TensorParallelEngine, Tp2TokensEqualTheUnshardedEngineOnG1) {
  auto one = Engine::load(options(test::golden_dir(), 1));
  auto tp = Engine::load(options(test::golden_dir(), 2));
  expect_same_tokens(*one, *tp, "g1 tp2");
}

TEST(TensorParallelEngine, Tp4TokensEqualTheUnshardedEngine) {
  const auto dir = test::checkpoint_with_heads(test::golden_dir(), 4);
  auto one = Engine::load(options(dir, 1));
  auto tp = Engine::load(options(dir, 4));
  expect_same_tokens(*one, *tp, "g1_4heads tp4");
}

TEST(TensorParallelEngine, DummyWeightsTp2EqualTheUnshardedDummyEngine) {
  auto one = Engine::load(options(test::default_model_dir(), 1, true));
  auto tp = Engine::load(options(test::default_model_dir(), 2, true));
  const auto rq = requests(one->config());
  GenerateOptions go;
  go.sampling.gen_length = 32;
  const auto a = one->generate(rq, go), b = tp->generate(rq, go);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(b[i].canvas_ids, a[i].canvas_ids) << i;
}

TEST(TensorParallelEngine, ServedRequestsEqualTheUnshardedEngine) {
  auto one = Engine::load(options(test::default_model_dir(), 1));
  auto tp = Engine::load(options(test::default_model_dir(), 2));
  const auto rq = requests(one->config());
  ServeOptions so;
  so.decode.n_slots = 2;
  so.max_model_len = 256;
  SamplingParams sp;
  sp.gen_length = 40;
  auto serve = [&](Engine& e) {
    e.start(so);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : rq) streams.push_back(e.submit(r, sp));
    std::vector<std::vector<int32_t>> out;
    for (auto& s : streams) {
      std::optional<RequestEvent> last;
      while (!s->finished())
        if (auto ev = s->next(std::chrono::seconds(60)); ev && ev->finished) last = ev;
      EXPECT_TRUE(last && last->result);
      out.push_back(last && last->result ? last->result->canvas_ids : std::vector<int32_t>{});
    }
    e.stop(/*drain=*/true);
    return out;
  };
  EXPECT_EQ(serve(*tp), serve(*one));
}

TEST(TensorParallelEngine, LoadRefusesSizesTheRanksCannotSplit) {
  for (int world : {3, 4}) {
    try {
      Engine::load(options(test::golden_dir(), world));
      FAIL() << "tensor_parallel " << world << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("must divide n_heads = 2"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(Engine::load(options(test::golden_dir(), 0)), Error);
  EngineOptions prof = options(test::golden_dir(), 2);
  prof.profile_ops = true;
  EXPECT_THROW(Engine::load(prof), Error);
}

}  // namespace
}  // namespace flashdllm
