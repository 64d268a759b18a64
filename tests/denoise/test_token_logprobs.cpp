// Log-probabilities of the committed tokens (SamplingParams::logprobs, TokenLogprob; issue 49 item
// 4): the row computation against a direct long-double log-softmax, the host copy of device rows,
// the LLaDA sampler's values against a full recompute of the logits the step read, and every
// decoding mode's results (sizes, greedy = the row's top-1, events = the result).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "denoise/llada_sampler.h"
#include "denoise/token_logprobs.h"
#include "engine/scheduler.h"
#include "flashdllm/engine.h"

namespace flashdllm {
namespace {

// The reference: log-softmax in long double, the suppressed id at -inf.
std::vector<long double> reference_logprobs(const std::vector<float>& row, int32_t suppress) {
  long double mx = -std::numeric_limits<long double>::infinity();
  for (size_t v = 0; v < row.size(); ++v)
    if (static_cast<int32_t>(v) != suppress) mx = std::max<long double>(mx, row[v]);
  long double sum = 0;
  for (size_t v = 0; v < row.size(); ++v)
    if (static_cast<int32_t>(v) != suppress) sum += std::exp(static_cast<long double>(row[v]) - mx);
  std::vector<long double> lp(row.size());
  for (size_t v = 0; v < row.size(); ++v)
    lp[v] = static_cast<int32_t>(v) == suppress ? -std::numeric_limits<long double>::infinity()
                                                : static_cast<long double>(row[v]) - mx - std::log(sum);
  return lp;
}

// The tolerance: the value is computed in float64 and rounded once to float32 (half an ulp), over
// V terms summed in float64 (V · 2^-53 relative, negligible): 2 float ulps of max(1, |lp|).
/// `extra`: an added absolute bound where `got` came from other logits than the reference's.
void expect_logprob(float got, long double want, const std::string& what, double extra = 0.0) {
  const double tol =
      2.0 * std::numeric_limits<float>::epsilon() * std::max(1.0, std::abs(static_cast<double>(want))) + extra;
  EXPECT_NEAR(got, static_cast<double>(want), tol) << what;
}

std::vector<float> random_row(int64_t V, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> row(static_cast<size_t>(V));
  for (float& x : row) x = n(g);
  return row;
}

TEST(TokenLogprobs, RowMatchesADirectLogSoftmax) {
  for (const auto& [V, scale] : std::vector<std::pair<int64_t, float>>{{7, 1.0f}, {1000, 3.0f}, {126464, 8.0f}}) {
    const std::vector<float> row = random_row(V, static_cast<uint32_t>(V), scale);
    for (const int32_t suppress : {-1, 3}) {
      const LogprobIds ids{suppress, 5 % static_cast<int32_t>(V)};
      const auto ref = reference_logprobs(row, suppress);
      const int64_t k = std::min<int64_t>(5, V - 2);
      for (const int32_t token : {0, 1, static_cast<int32_t>(V - 1)}) {
        if (token == suppress) continue;
        const TokenLogprob t = row_logprob(row, token, k, ids);
        EXPECT_EQ(t.token, token);
        expect_logprob(t.logprob, ref[static_cast<size_t>(token)], fmt::format("V {} token {}", V, token));
        // The top k: the k largest logits without the hidden and suppressed ids, ties by lower id.
        std::vector<int32_t> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        order.erase(
            std::remove_if(order.begin(), order.end(), [&](int32_t v) { return v == ids.hidden || v == ids.suppress; }),
            order.end());
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        ASSERT_EQ(static_cast<int64_t>(t.top.size()), k);
        for (int64_t i = 0; i < k; ++i) {
          EXPECT_EQ(t.top[i].token, order[static_cast<size_t>(i)]) << "V " << V << " rank " << i;
          expect_logprob(t.top[i].logprob, ref[static_cast<size_t>(order[static_cast<size_t>(i)])], "top");
        }
      }
      if (suppress >= 0) {  // a suppressed token has probability 0
        EXPECT_EQ(row_logprob(row, suppress, 0, ids).logprob, -std::numeric_limits<float>::infinity());
      }
    }
  }
}

TEST(TokenLogprobs, TiesListTheLowerIdFirstAndBadInputIsRefused) {
  const std::vector<float> row = {1.0f, 2.0f, 2.0f, 0.5f, 2.0f};
  const TokenLogprob t = row_logprob(row, 2, 3, LogprobIds{-1, 4});
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].token, 1);
  EXPECT_EQ(t.top[1].token, 2);
  EXPECT_EQ(t.top[2].token, 0) << "id 4 is hidden";
  EXPECT_EQ(t.top[0].logprob, t.logprob);
  EXPECT_THROW(row_logprob(row, 5, 0, {}), Error);
  EXPECT_THROW(row_logprob(row, 0, 21, {}), Error);
  const std::vector<float> nan_row = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isnan(row_logprob(nan_row, 0, 1, {}).logprob));
}

TEST(TokenLogprobs, ReaderCopiesDeviceRowsOnTheCpuBackend) {
  auto be = make_cpu_backend(1);
  const int64_t R = 3, V = 301;
  std::vector<float> host;
  for (int64_t r = 0; r < R; ++r) {
    const auto row = random_row(V, static_cast<uint32_t>(100 + r), 4.0f);
    host.insert(host.end(), row.begin(), row.end());
  }
  Buffer buf = be->alloc(host.size() * sizeof(float), "logprob rows");
  const Tensor t(buf.data(), DType::kF32, be->device(), {R, V});
  be->copy_from_host(t, host.data());
  LogprobReader reader;
  reader.fetch(*be, t.slice_rows(1, 3));
  for (int64_t i = 0; i < 2; ++i) {
    const std::vector<float> row(host.begin() + (i + 1) * V, host.begin() + (i + 2) * V);
    const TokenLogprob want = row_logprob(row, 7, 4, {});
    const TokenLogprob got = reader.at(i, 7, 4, {});
    EXPECT_EQ(got.logprob, want.logprob);
    ASSERT_EQ(got.top.size(), want.top.size());
    for (size_t k = 0; k < got.top.size(); ++k) EXPECT_EQ(got.top[k].token, want.top[k].token);
  }
  EXPECT_THROW(reader.fetch(*be, Tensor(buf.data(), DType::kI32, be->device(), {R, V})), Error);
}

bool have_model() { return std::filesystem::exists(test::default_model_dir() / "model.safetensors"); }

// The LLaDA sampler (full recompute, no logit shift): every committed token's logprob is the
// log-softmax of row p of a full forward over the canvas as it was before that step, recomputed
// here independently (test::full_logits) -- at temperature 0 and at temperature 1 (sampled tokens
// are not the argmax, their logprob is still the model's distribution).
TEST(TokenLogprobs, LladaSamplerMatchesAFullRecomputeOfTheRow) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  auto be = make_cpu_backend(1);
  const Model model = test::load_model(*be, test::default_model_dir());
  const ModelConfig& c = model.config;
  for (const double temperature : {0.0, 1.0}) {
    GenerateOptions o;
    o.decode.cache = CacheMode::kNone;
    o.decode.block_length = 8;
    o.sampling.gen_length = 16;
    o.sampling.steps = 8;  // two tokens per step
    o.sampling.temperature = temperature;
    o.sampling.seed = 3;
    o.sampling.logprobs = 3;
    LladaSampler sampler(*be, model, o);
    const std::vector<int32_t> prompt = {11, 42, 7, 99, 23, 5};
    std::vector<int32_t> before(prompt);
    before.resize(prompt.size() + 16, c.mask_token_id);
    int64_t checked = 0;
    sampler.generate({prompt}, [&](size_t, const SequenceState& s, const StepCommit& commit) {
      ASSERT_EQ(commit.logprobs.size(), commit.positions.size());
      const std::vector<float> logits = test::full_logits(*be, model, {before});
      const auto V = static_cast<size_t>(c.embedding_size);
      for (size_t i = 0; i < commit.positions.size(); ++i) {
        const auto p = static_cast<size_t>(commit.positions[i]);
        const std::vector<float> row(logits.begin() + static_cast<int64_t>(p * V),
                                     logits.begin() + static_cast<int64_t>((p + 1) * V));
        const auto ref = reference_logprobs(row, -1);
        const TokenLogprob& t = commit.logprobs[i];
        EXPECT_EQ(t.token, commit.tokens[i]);
        // The forward here and the sampler's run the same CPU ops, but not always over the same row
        // counts (OpenBLAS blocks by rows; on an AMD EPYC the logits moved by ~2e-6): the bound adds
        // the fp32 GEMM bound on the row's logits, twice (the token's logit and the normaliser).
        float row_max = 0.0f;
        for (float v : row) row_max = std::max(row_max, std::abs(v));
        const double gemm = 2.0 * test::kFp32OpRelTol * row_max;
        expect_logprob(t.logprob, ref[static_cast<size_t>(t.token)], fmt::format("T {} position {}", temperature, p),
                       gemm);
        ASSERT_EQ(t.top.size(), 3u);
        for (const TopLogprob& a : t.top) expect_logprob(a.logprob, ref[static_cast<size_t>(a.token)], "top", gemm);
        ++checked;
      }
      before = s.x;
    });
    EXPECT_EQ(checked, 16) << "every canvas position was committed once";
  }
}

void expect_greedy_invariants(const GenerateResult& r, int64_t k, const std::string& what) {
  ASSERT_EQ(r.logprobs.size(), r.output_ids.size()) << what;
  for (size_t i = 0; i < r.logprobs.size(); ++i) {
    const TokenLogprob& t = r.logprobs[i];
    EXPECT_EQ(t.token, r.output_ids[i]) << what;
    ASSERT_EQ(static_cast<int64_t>(t.top.size()), k) << what;
    // Greedy decoding commits the row's argmax (never the mask id): its most probable token.
    EXPECT_EQ(t.top[0].token, t.token) << what << " token " << i;
    EXPECT_EQ(t.top[0].logprob, t.logprob) << what << " token " << i;
    EXPECT_LE(t.logprob, 0.0f) << what;
    double mass = 0.0;
    for (size_t a = 0; a < t.top.size(); ++a) {
      if (a > 0) {
        EXPECT_LE(t.top[a].logprob, t.top[a - 1].logprob) << what;
      }
      mass += std::exp(static_cast<double>(t.top[a].logprob));
    }
    EXPECT_LE(mass, 1.0 + 1e-5) << what;
  }
}

// Every decoding mode carries the logprobs out through Engine::generate; not asking costs nothing.
TEST(TokenLogprobs, EveryModeReportsTheCommittedTokensGreedyTopOne) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  EngineOptions eo;
  eo.model_dir = test::default_model_dir();
  eo.threads = 1;
  auto engine = Engine::load(eo);
  GenerateRequest rq;
  rq.prompt = "What is 7 + 8?";
  struct Mode {
    const char* name;
    CacheMode cache;
    Sampler sampler = Sampler::kAuto;
    bool verify = false;
  };
  for (const Mode& m :
       {Mode{"none", CacheMode::kNone}, Mode{"dream sampler", CacheMode::kNone, Sampler::kDream},
        Mode{"prefix", CacheMode::kPrefix}, Mode{"dual", CacheMode::kDual}, Mode{"flash", CacheMode::kFlash},
        Mode{"flash verify", CacheMode::kFlash, Sampler::kAuto, true}}) {
    GenerateOptions go;
    go.decode.cache = m.cache;
    go.decode.sampler = m.sampler;
    go.decode.verify = m.verify;
    go.sampling.gen_length = 32;
    const auto plain = engine->generate({rq}, go);
    EXPECT_TRUE(plain[0].logprobs.empty()) << m.name;
    go.sampling.logprobs = 2;
    const auto with = engine->generate({rq}, go);
    EXPECT_EQ(with[0].output_ids, plain[0].output_ids) << m.name << ": asking for logprobs changes no token";
    EXPECT_FALSE(with[0].output_ids.empty()) << m.name;
    expect_greedy_invariants(with[0], 2, m.name);
  }
}

// Served requests: the events' logprobs, concatenated, are the result's (streamed = not streamed).
TEST(TokenLogprobs, EventsCarryTheResultsLogprobsInOrder) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  EngineOptions eo;
  eo.model_dir = test::default_model_dir();
  eo.threads = 1;
  auto engine = Engine::load(eo);
  ServeOptions so;
  so.decode.n_slots = 2;
  so.max_model_len = 256;
  engine->start(so);
  GenerateRequest rq;
  rq.prompt = "What is 12 + 30?";
  SamplingParams sp;
  sp.gen_length = 48;
  sp.logprobs = 1;
  sp.temperature = 0.7;
  sp.seed = 11;
  auto st = engine->submit(rq, sp);
  std::vector<TokenLogprob> streamed;
  std::shared_ptr<const GenerateResult> result;
  while (auto ev = st->next(std::chrono::seconds(60))) {
    EXPECT_EQ(static_cast<int64_t>(streamed.size() + ev->logprobs.size()), ev->stable_tokens);
    streamed.insert(streamed.end(), ev->logprobs.begin(), ev->logprobs.end());
    if (ev->finished) {
      result = ev->result;
      break;
    }
  }
  engine->stop(/*drain=*/true);
  ASSERT_TRUE(result);
  ASSERT_EQ(streamed.size(), result->logprobs.size());
  ASSERT_EQ(result->logprobs.size(), result->output_ids.size());
  for (size_t i = 0; i < streamed.size(); ++i) {
    EXPECT_EQ(streamed[i].token, result->output_ids[i]);
    EXPECT_EQ(streamed[i].logprob, result->logprobs[i].logprob);
    // Sampled at temperature 0.7: never more probable than the row's top-1.
    ASSERT_EQ(streamed[i].top.size(), 1u);
    EXPECT_LE(streamed[i].logprob, streamed[i].top[0].logprob);
  }
}

// A denoiser that commits a scripted canvas: one slot, step k commits script[k] (positions), each
// token with logprob -(position + 1) so that entries can be told apart.
class ScriptedDenoiser final : public Denoiser {
 public:
  ScriptedDenoiser(std::vector<int32_t> tokens, std::vector<std::vector<int32_t>> script)
      : tokens_(std::move(tokens)), script_(std::move(script)) {}
  int64_t n_slots() const noexcept override { return 1; }
  void check_request(std::span<const int32_t>, const SlotParams&) const override {}
  void admit(int64_t, std::span<const int32_t>, const SlotParams& p) override {
    canvas_.assign(tokens_.size(), kMask);
    active_ = true;
    step_ = 0;
    logprobs_ = p.logprobs;
  }
  std::vector<SlotStep> step() override {
    SlotStep st;
    for (int32_t pos : script_[step_]) {
      canvas_[static_cast<size_t>(pos)] = tokens_[static_cast<size_t>(pos)];
      st.positions.push_back(pos);
      st.tokens.push_back(tokens_[static_cast<size_t>(pos)]);
      if (logprobs_ >= 0) st.logprobs.push_back({tokens_[static_cast<size_t>(pos)], -static_cast<float>(pos + 1), {}});
    }
    st.finished = ++step_ == script_.size();
    return {st};
  }
  void release(int64_t) override { active_ = false; }
  bool active(int64_t) const noexcept override { return active_; }
  std::span<const int32_t> canvas(int64_t) const override { return canvas_; }
  SlotOutput output(int64_t) const override {
    SlotOutput o;
    o.canvas = canvas_;
    return o;
  }
  int64_t model_passes() const noexcept override { return static_cast<int64_t>(step_); }
  static constexpr int32_t kMask = 99;

 private:
  std::vector<int32_t> tokens_;
  std::vector<std::vector<int32_t>> script_;
  std::vector<int32_t> canvas_;
  size_t step_ = 0;
  bool active_ = false;
  int64_t logprobs_ = -1;
};

// A stop string completed by a later iteration cuts tokens that were already stable: their
// logprobs must not have been streamed (the events' entries are always the result's).
TEST(TokenLogprobs, StopStringsHoldTheEntriesUntilTheAnswerIsDecided) {
  // ids are letters: "h e l o w", committed as [h e l] then [o w]; stop "lo" ends the answer at "he".
  ScriptedDenoiser den({'h', 'e', 'l', 'o', 'w'}, {{0, 1, 2}, {3, 4}});
  TextCodec codec;
  codec.decode = [](std::span<const int32_t> ids) {
    std::string s;
    for (int32_t id : ids) s.push_back(static_cast<char>(id));
    return s;
  };
  codec.mask_id = ScriptedDenoiser::kMask;
  Scheduler sched(den, codec, {});
  ScheduledRequest rq;
  rq.prompt = {1};
  rq.params.gen_length = 5;
  rq.params.logprobs = 0;
  rq.max_output_tokens = 5;
  rq.stop = {"lo"};
  rq.stream_text = true;
  auto st = sched.submit(rq);
  while (sched.step()) {
  }
  std::vector<TokenLogprob> streamed;
  std::shared_ptr<const GenerateResult> result;
  while (auto ev = st->next(std::chrono::milliseconds(0))) {
    streamed.insert(streamed.end(), ev->logprobs.begin(), ev->logprobs.end());
    if (ev->finished) result = ev->result;
  }
  ASSERT_TRUE(result);
  EXPECT_EQ(result->text, "he");
  ASSERT_EQ(result->logprobs.size(), result->output_ids.size());
  ASSERT_EQ(streamed.size(), result->logprobs.size());
  for (size_t i = 0; i < streamed.size(); ++i) EXPECT_EQ(streamed[i].logprob, -static_cast<float>(i + 1));
}

}  // namespace
}  // namespace flashdllm
