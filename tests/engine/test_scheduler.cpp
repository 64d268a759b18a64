// The request-level core on the CPU backend and the embedded small model: the scheduler over the
// denoisers' slot pools (admission, refill, events, stop strings, cancellation, the queue bound),
// batch invariance (a request's tokens must not depend on the requests sharing its iterations:
// bitwise on the CPU) and the answer invariants (no mask id, whatever the temperature).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "backend/backend.h"
#include "common/model_fixture.h"
#include "common/test_paths.h"
#include "denoise/flash_cache.h"
#include "engine/scheduler.h"
#include "engine/slot_pool.h"
#include "flashdllm/engine.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace flashdllm {
namespace {

struct SmallModel {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  Model model;
  std::optional<Tokenizer> tok;
  std::optional<ChatTemplate> chat;
  int32_t eot = -1;

  SmallModel() {
    const auto dir = test::default_model_dir();
    model = test::load_model(*backend, dir);
    tok.emplace(Tokenizer::from_file(dir / "tokenizer.json"));
    chat.emplace(ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json"));
    eot = tok->token_to_id("<|eot_id|>").value_or(-1);
  }
  std::vector<int32_t> prompt(const std::string& question) const {
    return tok->encode(chat->render({{"user", question}}), false);
  }
  TextCodec codec() const {
    TextCodec c;
    c.decode = [this](std::span<const int32_t> ids) {
      std::vector<int32_t> known;  // as the engine: LM-head rows past the tokenizer have no text
      for (int32_t id : ids)
        if (id < tok->vocab_size() && !tok->id_to_token(id).empty()) known.push_back(id);
      return tok->decode(known, /*skip_special_tokens=*/true);
    };
    c.text_stream = [this] { return TextStream(*tok, /*skip_special_tokens=*/true, /*drop_unknown_ids=*/true); };
    c.end_ids = {model.config.eos_token_id};
    if (eot >= 0) c.end_ids.push_back(eot);
    c.mask_id = model.config.mask_token_id;
    return c;
  }
};

SmallModel& small() {
  static SmallModel m;
  return m;
}

bool have_model() { return std::filesystem::exists(test::default_model_dir() / "model.safetensors"); }

ScheduledRequest request_of(std::vector<int32_t> prompt, const SlotParams& p, size_t tag = 0) {
  ScheduledRequest r;
  r.prompt = std::move(prompt);
  r.params = p;
  r.max_output_tokens = p.gen_length;
  r.tag = tag;
  return r;
}

/// Drains every event a stream holds now; returns the final one (if it came).
std::optional<RequestEvent> drain(RequestStream& s, std::vector<RequestEvent>* all = nullptr) {
  std::optional<RequestEvent> last;
  while (auto ev = s.next(std::chrono::milliseconds(0))) {
    if (all) all->push_back(*ev);
    if (ev->finished) last = std::move(ev);
  }
  return last;
}

/// Random token-id prompts of the given length: ids of the small model's plain vocabulary.
std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> id(5, 2000);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = id(rng);
  return p;
}

using Mode = test::DecodeMode;

std::vector<Mode> modes() {
  std::vector<Mode> m;
  Mode flash{"flash", {}, {}};
  flash.s.gen_length = 64;
  m.push_back(flash);
  Mode verify = flash;
  verify.name = "flash+verify";
  verify.d.verify = true;
  m.push_back(verify);
  Mode none{"none", {}, {}};
  none.d.cache = CacheMode::kNone;
  none.s.gen_length = 64;
  none.s.steps = 32;
  m.push_back(none);
  Mode dual = none;
  dual.name = "dual";
  dual.d.cache = CacheMode::kDual;
  dual.s.threshold = 0.9;
  dual.s.steps = 0;
  m.push_back(dual);
  return m;
}

GenerateResult run_alone(const Mode& m, const std::vector<int32_t>& prompt) {
  SmallModel& sm = small();
  const SlotParams p = resolve_params(m.s, m.d, true);
  SlotPool pool{1, static_cast<int64_t>(prompt.size()) + p.gen_length, 0};
  auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  Scheduler sched(*den, sm.codec(), {});
  auto st = sched.submit(request_of(prompt, p));
  while (sched.step()) {
  }
  auto ev = drain(*st);
  EXPECT_TRUE(ev && ev->result) << m.name << ": " << (ev ? ev->error : "no final event");
  return ev && ev->result ? *ev->result : GenerateResult{};
}

// The acceptance test of batch invariance (CPU: bitwise): the same request alone, and among 31
// others of very different lengths arriving at different iterations, gives the same tokens, canvas
// and iteration count, in every decoding mode.
TEST(BatchInvariance, SameTokensAloneAndAmong31OthersArrivingAtDifferentTimes) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  const std::vector<int32_t> target = sm.prompt("Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps "
                                                "does he have at the end?");
  for (const Mode& m : modes()) {
    const GenerateResult alone = run_alone(m, target);
    const SlotParams p = resolve_params(m.s, m.d, true);
    std::mt19937 rng(11);
    SlotPool pool{32, 300 + p.gen_length, 0};
    auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
    Scheduler sched(*den, sm.codec(), {});
    std::vector<std::shared_ptr<RequestStream>> others;
    std::shared_ptr<RequestStream> mine;
    const int64_t lengths[] = {3, 150, 17, 90, 5, 60, 199, 9};
    int64_t submitted = 0, step = 0;
    while (submitted < 31 || sched.has_work()) {
      // A few new requests every iteration; the target arrives at the fifth.
      for (int k = 0; k < 3 && submitted < 31; ++k, ++submitted) {
        SlotParams q = p;
        q.gen_length = (submitted % 3 == 0) ? p.gen_length : p.gen_length / 2;
        if (m.d.cache == CacheMode::kFlash && submitted % 4 == 1) q.threshold = 0.7;  // per-request ε
        others.push_back(sched.submit(request_of(random_prompt(rng, lengths[submitted % 8]), q, 1)));
      }
      if (step == 4) mine = sched.submit(request_of(target, p));
      sched.step();
      ++step;
      if (!mine && !sched.has_work()) mine = sched.submit(request_of(target, p));
    }
    ASSERT_TRUE(mine != nullptr);
    auto ev = drain(*mine);
    ASSERT_TRUE(ev && ev->result) << m.name;
    EXPECT_EQ(ev->result->output_ids, alone.output_ids) << m.name;
    EXPECT_EQ(ev->result->canvas_ids, alone.canvas_ids) << m.name;
    EXPECT_EQ(ev->result->nfe, alone.nfe) << m.name;
    EXPECT_EQ(ev->result->committed_tokens, alone.committed_tokens) << m.name;
    EXPECT_FALSE(alone.output_ids.empty()) << m.name << ": the arith question gets an answer";
    for (auto& o : others) {
      auto e = drain(*o);
      ASSERT_TRUE(e && e->result) << m.name;
    }
  }
}

// Per-request temperature and seed in one running batch: a sampled request gives the same tokens
// alone and beside greedy and differently seeded ones.
TEST(BatchInvariance, PerRequestTemperatureAndSeed) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  const std::vector<int32_t> target = sm.prompt("Tom has 12 apples and eats 5. How many are left?");
  for (Mode m : modes()) {
    m.s.temperature = 1.5;
    m.s.seed = 7;
    const GenerateResult alone = run_alone(m, target);
    const SlotParams p = resolve_params(m.s, m.d, true);
    SlotPool pool{4, static_cast<int64_t>(target.size()) + p.gen_length, 0};
    auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
    Scheduler sched(*den, sm.codec(), {});
    SlotParams greedy = p, other_seed = p;
    greedy.temperature = 0.0;
    other_seed.seed = 8;
    sched.submit(request_of(target, greedy));
    auto mine = sched.submit(request_of(target, p));
    sched.submit(request_of(target, other_seed));
    while (sched.step()) {
    }
    auto ev = drain(*mine);
    ASSERT_TRUE(ev && ev->result) << m.name;
    EXPECT_EQ(ev->result->canvas_ids, alone.canvas_ids) << m.name;
  }
}

// Issue 15, finding 1: the mask id is never a sampling candidate, so no answer and no committed
// canvas position holds it, in every mode, at temperatures up to 1e3.
TEST(AnswerInvariants, NoMaskIdAtAnyTemperature) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  const int32_t mask = sm.model.config.mask_token_id;
  const std::vector<int32_t> target = sm.prompt("Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps "
                                                "does he have at the end?");
  std::mt19937 rng(5);
  for (Mode m : modes()) {
    for (double temperature : {1.0, 100.0, 1000.0}) {
      m.s.temperature = temperature;
      m.s.seed = rng();
      const GenerateResult r = run_alone(m, target);
      for (int32_t id : r.output_ids) EXPECT_NE(id, mask) << m.name << " t " << temperature;
      for (int32_t id : r.canvas_ids) EXPECT_NE(id, mask) << m.name << " t " << temperature;
    }
  }
}

/// Sets the embedding row of token `bad_id` of `model` (on `be`) to NaN.
void poison_embedding(Backend& be, Model& model, int32_t bad_id) {
  const std::vector<float> nan_row(static_cast<size_t>(model.config.d_model), std::nanf(""));
  be.copy_from_host(model.weights.wte.slice_rows(bad_id, bad_id + 1), nan_row.data());
}

/// Runs `prompts` together on `model` (prompts[bad] holds a token whose embedding row is NaN), then
/// every other prompt alone, in each mode: the poisoned request fails alone with kInvalidCheckpoint
/// and the non-finite message, the others get exactly their tokens and passes alone, no slot is left
/// busy.
void expect_poisoned_request_fails_alone(Backend& be, const Model& model, int32_t eot, const TextCodec& codec,
                                         const std::vector<Mode>& ms, const std::vector<std::vector<int32_t>>& prompts,
                                         size_t bad) {
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, static_cast<int64_t>(p.size()));
  for (const Mode& m : ms) {
    SCOPED_TRACE(m.name);
    const SlotParams p = resolve_params(m.s, m.d, true);
    auto run = [&](const std::vector<size_t>& which) {
      SlotPool pool{static_cast<int64_t>(which.size()), longest + p.gen_length, 0};
      auto den = make_denoiser(be, model, m.d, eot, pool);
      Scheduler sched(*den, codec, {});
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (size_t i : which) streams.push_back(sched.submit(request_of(prompts[i], p, i)));
      while (sched.step()) {
      }
      EXPECT_EQ(sched.metrics().slots_busy, 0);
      std::vector<RequestEvent> out;
      for (auto& s : streams) {
        auto ev = drain(*s);
        EXPECT_TRUE(ev.has_value());
        out.push_back(ev.value_or(RequestEvent{}));
      }
      return out;
    };
    std::vector<size_t> all(prompts.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const std::vector<RequestEvent> together = run(all);
    ASSERT_EQ(together.size(), prompts.size());
    EXPECT_FALSE(together[bad].result);
    EXPECT_EQ(together[bad].error_code, ErrorCode::kInvalidCheckpoint);
    EXPECT_NE(together[bad].error.find("non-finite logits for this request"), std::string::npos) << together[bad].error;
    for (size_t i : all) {
      if (i == bad) continue;
      SCOPED_TRACE(fmt::format("request {}", i));
      const RequestEvent alone = run({i}).at(0);
      ASSERT_TRUE(alone.result) << alone.error;
      ASSERT_TRUE(together[i].result) << together[i].error;
      EXPECT_EQ(together[i].result->output_ids, alone.result->output_ids);
      EXPECT_EQ(together[i].result->nfe, alone.result->nfe);
    }
  }
}

// One request whose logits are not finite (its prompt holds a token whose embedding row is NaN)
// fails alone with kInvalidCheckpoint; the requests sharing its iterations get exactly what they get
// alone on the same model, in every mode (before, every request of that iteration failed): the
// LLaDA sampler, Flash-Cache with and without Flash-Verify, the Fast-dLLM prefix and dual caches.
TEST(Scheduler, NonFiniteLogitsFailOnlyTheirOwnRequest) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  Model poisoned = test::load_model(*sm.backend, test::default_model_dir());
  const int32_t bad_id = 2060;  // <|reserved_token_8|>: in the vocabulary, never trained
  poison_embedding(*sm.backend, poisoned, bad_id);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t n : {12, 30, 7, 19}) prompts.push_back(random_prompt(rng, n));
  prompts[1][5] = bad_id;
  std::vector<Mode> ms = modes();
  Mode prefix = ms.back();  // dual's settings with the prefix cache
  prefix.name = "prefix";
  prefix.d.cache = CacheMode::kPrefix;
  ms.push_back(prefix);
  expect_poisoned_request_fails_alone(*sm.backend, poisoned, sm.eot, sm.codec(), ms, prompts, 1);
}

// Flash-Verify's verify pass checks its own rows: slot 0's first main pass is forced (FlashStep
// teacher forcing) to commit one token whose embedding row is NaN, so the first forward to read that
// token is the same iteration's verify pass (its kept rows are the newest commits; S > 0 candidates
// remain). Slot 0 fails there ("flash-verify"); slot 1 of the same iterations ends as it does alone.
TEST(Scheduler, NonFiniteLogitsInTheVerifyPassFailOnlyTheirOwnSlot) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  Model poisoned = test::load_model(*sm.backend, test::default_model_dir());
  const int32_t bad_id = 2060;  // as above: never in a prompt or an answer here
  poison_embedding(*sm.backend, poisoned, bad_id);
  const Mode verify = modes()[1];
  ASSERT_TRUE(verify.d.verify);
  const SlotParams p = resolve_params(verify.s, verify.d, true);
  const std::vector<std::vector<int32_t>> prompts = {sm.prompt("Tom has 12 apples and eats 5. How many are left?"),
                                                     sm.prompt("What is 3 + 4?")};
  struct Ending {
    std::string error;
    SlotOutput output;
  };
  // Runs prompts[first..] in slots 0.. to their ends; `force`: slot 0's first commit is bad_id.
  auto run = [&](size_t first, bool force) {
    SlotPool pool{2, 64 + p.gen_length, 0};
    auto den = make_denoiser(*sm.backend, poisoned, verify.d, sm.eot, pool);
    auto* flash = dynamic_cast<FlashCacheDenoiser*>(den.get());
    EXPECT_NE(flash, nullptr);
    std::vector<Ending> end(prompts.size() - first);
    for (size_t k = 0; k < end.size(); ++k) den->admit(static_cast<int64_t>(k), prompts[first + k], p);
    bool forced = !force;
    auto observer = [&](FlashStep& st) {
      if (forced || st.phase != 1 || st.slot != 0) return;
      st.forced_positions = {st.decision->window.front()};
      st.forced_tokens = {bad_id};
      forced = true;
    };
    while (flash) {
      const std::vector<SlotStep> steps = flash->step(observer);
      if (steps.empty()) break;
      for (const SlotStep& st : steps) {
        if (!st.finished) continue;
        end[static_cast<size_t>(st.slot)] = {st.error, den->output(st.slot)};
        den->release(st.slot);
      }
    }
    EXPECT_TRUE(forced);
    return end;
  };
  const std::vector<Ending> together = run(0, true);
  ASSERT_EQ(together.size(), 2u);
  EXPECT_EQ(together[0].error.rfind("flash-verify: the model produced non-finite logits for this request", 0), 0u)
      << together[0].error;
  const std::vector<Ending> alone = run(1, false);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_TRUE(together[1].error.empty()) << together[1].error;
  EXPECT_FALSE(alone[0].output.canvas.empty());
  EXPECT_EQ(together[1].output.canvas, alone[0].output.canvas);
  EXPECT_EQ(together[1].output.nfe, alone[0].output.nfe);
}

// The same on a shifted-logit (Dream) checkpoint, tests/data/golden/dream_a: Dream's own sampler
// (diffusion_generate), Flash-Cache and the Fast-dLLM prefix cache.
TEST(Scheduler, NonFiniteLogitsFailOnlyTheirOwnRequestOnDream) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  Model dream = test::load_model(*be, test::test_data_dir() / "golden" / "dream_a");
  const int32_t bad_id = 1010;  // past the mask (1000) and EOS (1001): never drawn for the other prompts
  poison_embedding(*be, dream, bad_id);
  std::vector<std::vector<int32_t>> prompts;
  for (GenerateRequest& r : test::random_id_requests(dream.config, 4, 3, 5, 6)) prompts.push_back(r.prompt_ids);
  prompts[2][3] = bad_id;
  TextCodec codec;  // no tokenizer: no text
  codec.end_ids = {dream.config.eos_token_id};
  codec.mask_id = dream.config.mask_token_id;
  auto mode = [](const char* name, CacheMode cache, Sampler sampler, int64_t steps, std::optional<double> threshold) {
    Mode m{name, {}, {}};
    m.d.cache = cache;
    m.d.sampler = sampler;
    if (cache == CacheMode::kPrefix) m.d.block_length = 8;
    m.s.gen_length = 32;
    m.s.steps = steps;
    m.s.threshold = threshold;
    return m;
  };
  const std::vector<Mode> ms = {mode("dream sampler", CacheMode::kNone, Sampler::kDream, 16, std::nullopt),
                                mode("dream flash", CacheMode::kFlash, Sampler::kAuto, 0, std::nullopt),
                                mode("dream prefix", CacheMode::kPrefix, Sampler::kAuto, 0, 0.9)};
  expect_poisoned_request_fails_alone(*be, dream, -1, codec, ms, prompts, 2);
}

TEST(Scheduler, EventsAddUpToTheResultAndSlotsRefill) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  Mode m = modes()[0];
  const SlotParams p = resolve_params(m.s, m.d, true);
  SlotPool pool{2, 200, 0};
  auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  Scheduler sched(*den, sm.codec(), {});
  std::vector<std::shared_ptr<RequestStream>> s;
  for (const char* q : {"What is 3 + 4?", "What is 9 - 2?", "What is 6 + 6?", "What is 5 + 1?", "What is 8 - 3?"}) {
    ScheduledRequest r = request_of(sm.prompt(q), p);
    r.stream_text = true;
    r.finish_early = true;
    s.push_back(sched.submit(std::move(r)));
    // Nothing is queued before the first iteration: a zero timeout returns at once, empty-handed.
    EXPECT_FALSE(s.back()->next(std::chrono::milliseconds(0)).has_value());
    EXPECT_FALSE(s.back()->next(std::chrono::milliseconds(-5)).has_value());
    EXPECT_FALSE(s.back()->finished());
  }
  int64_t steps = 0;
  while (sched.step()) {
    ++steps;
    const EngineMetrics mt = sched.metrics();
    EXPECT_LE(mt.slots_busy, 2);
  }
  const EngineMetrics mt = sched.metrics();
  EXPECT_EQ(mt.iterations, steps);
  // Iteration times by kind: the first step admits two requests, each later admission at least one
  // of the other three; every other step is a decode iteration.
  EXPECT_GE(mt.admission_iterations.count, 2);
  EXPECT_LE(mt.admission_iterations.count, 4);
  EXPECT_EQ(mt.admission_iterations.count + mt.decode_iterations.count, steps);
  EXPECT_GT(mt.decode_iterations.count, 0);
  for (const EngineMetrics::IterationTimes& t : {mt.admission_iterations, mt.decode_iterations}) {
    EXPECT_GT(t.min, 0.0);
    EXPECT_LE(t.min, t.p10);
    EXPECT_LE(t.p10, t.median);
    EXPECT_LE(t.median, t.p90);
    EXPECT_LE(t.p90, t.max);
    EXPECT_GE(t.mean, t.min);
    EXPECT_LE(t.mean, t.max);
  }
  // Fewer iterations than the window: the means cover all of them, so they give the totals back.
  EXPECT_NEAR(mt.admission_iterations.sum + mt.decode_iterations.sum, mt.iteration_seconds_sum, 1e-9);
  for (const EngineMetrics::IterationTimes& t : {mt.admission_iterations, mt.decode_iterations})
    EXPECT_NEAR(t.mean * static_cast<double>(t.count), t.sum, 1e-9);
  // Host phases of each kind: the scheduler's own, then Flash-Cache's in FlashPhase order (no verify
  // pass: its phases never ran), those inside the kind's timed iterations.
  for (const EngineMetrics::IterationTimes& t : {mt.admission_iterations, mt.decode_iterations}) {
    ASSERT_EQ(t.host_phases.size(), 1 + kFlashPhases);
    EXPECT_EQ(t.host_phases[0].name, "scheduler");
    EXPECT_GT(t.host_phases[0].seconds, 0.0);
    double inside = 0.0;
    for (size_t i = 0; i < kFlashPhases; ++i) {
      const auto ph = static_cast<FlashPhase>(i);
      const EngineMetrics::HostPhase& h = t.host_phases[i + 1];
      EXPECT_EQ(h.name, flash_phase_name(ph));
      const bool verify_only = ph == FlashPhase::kVerifyBatch || ph == FlashPhase::kVerifyCall ||
                               ph == FlashPhase::kEarlyRerank || ph == FlashPhase::kVerifyWait ||
                               ph == FlashPhase::kAccept;
      if (verify_only)
        EXPECT_EQ(h.seconds, 0.0) << h.name;
      else
        EXPECT_GT(h.seconds, 0.0) << h.name;
      inside += h.seconds;
    }
    EXPECT_LE(inside, t.sum + 1e-9);
    EXPECT_GT(inside, 0.5 * t.sum) << "the phases cover the step";
  }
  EXPECT_EQ(mt.requests_finished_stop + mt.requests_finished_length, 5);
  EXPECT_EQ(mt.slots_busy, 0);
  EXPECT_EQ(mt.queue_depth, 0);
  for (auto& st : s) {
    std::vector<RequestEvent> all;
    auto last = drain(*st, &all);
    ASSERT_TRUE(last && last->result);
    std::string text;
    int64_t committed = 0, stable = 0;
    for (const auto& e : all) {
      text += e.text_delta;
      committed += static_cast<int64_t>(e.positions.size());
      EXPECT_GE(e.stable_tokens, stable) << "the stable prefix only grows";
      stable = e.stable_tokens;
      EXPECT_EQ(e.positions.size(), e.tokens.size());
    }
    EXPECT_EQ(text, last->result->text) << "the deltas spell the answer";
    EXPECT_EQ(last->result->nfe, static_cast<int64_t>(all.size()));
    EXPECT_GE(committed, static_cast<int64_t>(last->result->output_ids.size()));
    EXPECT_EQ(last->finish_reason, last->result->finish_reason);
    EXPECT_TRUE(st->finished());
  }
}

TEST(Scheduler, StopStringsCutTheAnswerAndHoldBackTheirStart) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  Mode m = modes()[0];
  const SlotParams p = resolve_params(m.s, m.d, true);
  const auto prompt = sm.prompt("Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have "
                                "at the end?");
  const GenerateResult full = run_alone(m, prompt);
  ASSERT_GT(full.text.size(), 4u);
  // A stop string from the middle of the natural answer.
  const std::string stop = full.text.substr(full.text.size() / 2, 2);
  const size_t cut = full.text.find(stop);
  SlotPool pool{1, 200, 0};
  auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  Scheduler sched(*den, sm.codec(), {});
  ScheduledRequest r = request_of(prompt, p);
  r.stop = {stop, "never-appears"};
  r.stream_text = true;
  r.finish_early = true;
  auto st = sched.submit(std::move(r));
  while (sched.step()) {
  }
  std::vector<RequestEvent> all;
  auto last = drain(*st, &all);
  ASSERT_TRUE(last && last->result);
  EXPECT_EQ(last->result->text, full.text.substr(0, cut));
  EXPECT_EQ(last->result->finish_reason, FinishReason::kStop);
  std::string text;
  for (const auto& e : all) {
    text += e.text_delta;
    EXPECT_EQ(text.find(stop), std::string::npos) << "a stop string is never streamed";
  }
  EXPECT_EQ(text, last->result->text);
  EXPECT_LE(last->result->nfe, full.nfe);
  EXPECT_EQ(full.text.substr(0, cut).find(stop), std::string::npos);
}

TEST(Scheduler, MaxOutputTokensCutsALongerCanvas) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  Mode m = modes()[2];  // none: the canvas is rounded up to the block, the answer cut at max tokens
  SamplingParams s = m.s;
  s.gen_length = 5;
  s.steps = 0;
  const SlotParams p = resolve_params(s, m.d, /*exact_blocks=*/false);
  EXPECT_EQ(p.gen_length, 32);
  SlotPool pool{1, 200, 0};
  auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  Scheduler sched(*den, sm.codec(), {});
  ScheduledRequest r = request_of(sm.prompt("What is 3 + 4?"), p);
  r.max_output_tokens = 5;
  r.finish_early = true;
  auto st = sched.submit(std::move(r));
  while (sched.step()) {
  }
  auto last = drain(*st);
  ASSERT_TRUE(last && last->result);
  EXPECT_LE(last->result->output_ids.size(), 5u);
  EXPECT_LE(last->stable_tokens, 5);
}

TEST(Scheduler, CancelFreesTheSlotAtTheNextIterationAndTheQueueIsBounded) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  Mode m = modes()[2];  // none with 32 steps: long enough to cancel mid-way
  const SlotParams p = resolve_params(m.s, m.d, true);
  SlotPool pool{1, 200, 0};
  auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  Scheduler::Options so;
  so.max_queue = 3;
  Scheduler sched(*den, sm.codec(), so);
  auto a = sched.submit(request_of(sm.prompt("What is 3 + 4?"), p));
  auto b = sched.submit(request_of(sm.prompt("What is 5 + 4?"), p));
  auto c = sched.submit(request_of(sm.prompt("What is 5 + 5?"), p));
  auto d = sched.submit(request_of(sm.prompt("What is 6 + 5?"), p));  // a has the slot, the queue holds 3
  EXPECT_EQ(sched.metrics().queue_depth, 4) << "a counts as waiting until its first iteration";
  try {
    sched.submit(request_of(sm.prompt("What is 1 + 1?"), p));
    ADD_FAILURE() << "a full queue must refuse";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("queue is full"), std::string::npos);
  }
  ASSERT_TRUE(sched.step());  // a runs one iteration
  EXPECT_TRUE(den->active(0));
  a->cancel();
  c->cancel();  // a queued request leaves the queue
  ASSERT_TRUE(sched.step());  // a's slot is released, b is admitted into it and runs
  auto ea = drain(*a);
  ASSERT_TRUE(ea.has_value());
  EXPECT_EQ(ea->finish_reason, FinishReason::kCancelled);
  auto ec = drain(*c);
  ASSERT_TRUE(ec.has_value());
  EXPECT_EQ(ec->finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(sched.metrics().slots_busy, 1);
  EXPECT_TRUE(sched.cancel(b->id()));
  EXPECT_TRUE(sched.cancel(d->id()));
  EXPECT_FALSE(sched.cancel(12345));
  while (sched.step()) {
  }
  EXPECT_FALSE(den->active(0));
  EXPECT_EQ(drain(*b)->finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(drain(*d)->finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(sched.metrics().requests_cancelled, 4);
  sched.close();
  EXPECT_THROW(sched.submit(request_of(sm.prompt("What is 1 + 1?"), p)), Error);
}

// Two replicas (data parallelism) behind one queue: a request goes to the least loaded replica
// with a free slot, each replica admits only its own at its step, the rest wait in the shared queue
// until a slot frees anywhere, and every answer equals the request run alone (batch invariance).
TEST(Scheduler, ReplicasShareOneQueueAndTakeTheLeastLoadedFirst) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  const Mode m = modes()[0];  // flash
  const SlotParams p = resolve_params(m.s, m.d, true);
  const SlotPool pool{2, 200, 0};
  auto den0 = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  auto den1 = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  Scheduler::Options so;
  so.max_queue = 1;
  Scheduler sched({den0.get(), den1.get()}, sm.codec(), so);
  EXPECT_EQ(sched.replicas(), 2u);
  EXPECT_EQ(sched.n_slots(), 4);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 5; ++i) {  // 4 slots + 1 queued; questions take several iterations
    prompts.push_back(
        sm.prompt(fmt::format("Tom has {} apples and buys {} more. How many does he have?", 3 + i, 17 * i)));
    streams.push_back(sched.submit(request_of(prompts.back(), p)));
  }
  EXPECT_THROW(sched.submit(request_of(prompts[0], p)), Error) << "4 slots and a queue of 1 are full";
  EXPECT_EQ(sched.metrics().queue_depth, 5);
  EXPECT_TRUE(sched.has_work(1));
  ASSERT_TRUE(sched.step(0));  // replica 0 admits its two (requests 0 and 2) and runs them
  EXPECT_TRUE(den0->active(0) && den0->active(1));
  EXPECT_FALSE(den1->active(0) || den1->active(1)) << "replica 1 admits at its own step";
  EXPECT_EQ(sched.metrics().slots_busy, 2);
  streams[3]->cancel();        // given to replica 1, not yet admitted
  ASSERT_TRUE(sched.step(1));  // request 3 leaves; the queued request 4 takes its place at once
  EXPECT_TRUE(den1->active(0) && den1->active(1));
  EXPECT_EQ(sched.metrics().slots_busy, 4);
  EXPECT_EQ(sched.metrics().queue_depth, 0);
  auto cancelled = drain(*streams[3]);
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_EQ(cancelled->finish_reason, FinishReason::kCancelled);
  std::thread t1([&] {
    while (sched.step(1)) {
    }
  });
  while (sched.step(0)) {
  }
  t1.join();
  EXPECT_FALSE(sched.has_work());
  for (size_t i = 0; i < streams.size(); ++i) {
    if (i == 3) continue;
    auto last = drain(*streams[i]);
    ASSERT_TRUE(last.has_value()) << i;
    ASSERT_TRUE(last->result) << i << ": " << last->error;
    EXPECT_EQ(last->result->canvas_ids, run_alone(m, prompts[i]).canvas_ids) << "request " << i;
  }
  EXPECT_GT(den0->model_passes(), 0);
  EXPECT_GT(den1->model_passes(), 0);
  const EngineMetrics mt = sched.metrics();
  EXPECT_EQ(mt.replicas, 2);
  EXPECT_EQ(mt.requests_cancelled, 1);
  EXPECT_EQ(mt.requests_finished_stop + mt.requests_finished_length, 4);
  EXPECT_THROW(Scheduler({}, sm.codec(), {}), Error);
  EXPECT_THROW(Scheduler({den0.get(), nullptr}, sm.codec(), {}), Error);
}

TEST(Scheduler, RequestsThatCannotFitAreRefusedAtSubmit) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  SmallModel& sm = small();
  Mode m = modes()[0];
  const SlotParams p = resolve_params(m.s, m.d, true);
  SlotPool pool{1, 100, 0};
  auto den = make_denoiser(*sm.backend, sm.model, m.d, sm.eot, pool);
  Scheduler sched(*den, sm.codec(), {});
  std::mt19937 rng(3);
  try {
    sched.submit(request_of(random_prompt(rng, 60), p));  // 60 + 64 > 100
    ADD_FAILURE() << "too long for the pool";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("max_model_len"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sched.submit(request_of({}, p)), Error);
  EXPECT_THROW(sched.submit(request_of({5, sm.model.config.mask_token_id}, p)), Error);
  EXPECT_FALSE(sched.has_work());
}

// The engine's own loop (Engine::start): requests submitted from several threads all finish, and
// a greedy request's answer equals Engine::generate's.
TEST(EngineServing, SubmitFromThreadsMatchesGenerate) {
  if (!have_model()) GTEST_SKIP() << "no default model";
  EngineOptions eo;
  eo.model_dir = test::default_model_dir();
  eo.threads = 1;
  auto engine = Engine::load(eo);
  GenerateOptions go;
  go.sampling.gen_length = 64;
  GenerateRequest rq;
  rq.prompt = "What is 7 + 8?";
  const auto want = engine->generate({rq}, go);
  ServeOptions so;
  so.decode = go.decode;
  so.decode.n_slots = 4;
  so.max_model_len = 512;
  engine->start(so);
  EXPECT_THROW(engine->generate({rq}, go), Error) << "generate is refused while serving";
  std::vector<std::thread> threads;
  std::vector<std::string> texts(8);
  for (size_t i = 0; i < texts.size(); ++i)
    threads.emplace_back([&, i] {
      auto st = engine->submit(rq, go.sampling);
      std::string text;
      while (auto ev = st->next(std::chrono::seconds(60))) {
        text += ev->text_delta;
        if (ev->finished) break;
      }
      texts[i] = text;
    });
  for (auto& t : threads) t.join();
  for (const auto& t : texts) EXPECT_EQ(t, want[0].text);
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.n_slots, 4);
  EXPECT_EQ(m.requests_finished_stop + m.requests_finished_length, 8);
  SamplingParams too_long = go.sampling;
  too_long.gen_length = 600;
  EXPECT_THROW(engine->submit(rq, too_long), Error);
  engine->stop(/*drain=*/true);
  EXPECT_FALSE(engine->started());
  EXPECT_THROW(engine->submit(rq, go.sampling), Error);
  EXPECT_EQ(engine->generate({rq}, go)[0].text, want[0].text);
}

}  // namespace
}  // namespace flashdllm
