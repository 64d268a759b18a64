// The whole model on the CUDA backend (bf16 storage, fp32 accumulation) against the fp32 oracles:
//  * golden upstream fp32 logits (forward.safetensors) within kBf16LogitRelTol, argmax agreement;
//  * CUDA vs CPU logits on the small trained model (models/llada-arith-12m), when present;
//  * LLaDA sampler decisions, teacher-forced from the golden traces, equal wherever the recorded
//    margin exceeds the bf16 noise level kBf16DecisionMargin (smaller margins are near-ties).
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/backend.h"
#include "kernels/gpu_test_options.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "denoise/decode_rules.h"
#include "denoise/llada_sampler.h"
#include "flashdllm/engine.h"
#include "io/chat_template.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"

namespace flashdllm::test {
namespace {

// An engine over the checkpoint `dir` on the CUDA backend (the default options otherwise; row
// padding as `row_padding` says, nullopt: the backend's default).
std::unique_ptr<Engine> cuda_engine(const std::filesystem::path& dir, std::optional<bool> row_padding = {}) {
  EngineOptions eo;
  eo.model_dir = dir;
  eo.device = "cuda";
  eo.backend.row_padding = row_padding;
  return Engine::load(eo);
}

class CudaForward : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device (built without CUDA or no GPU)";
    cpu_ = make_cpu_backend(0);
    gpu_ = make_cuda_backend(0, gpu_test_backend_options());
  }
  std::unique_ptr<Backend> cpu_, gpu_;
};


// g1's attention is deliberately sharp, so any bf16 forward moves its logits by 10-40% of max|logit|
// (tests/data/golden/g1_bf16_reference_error.json, measured with an independent PyTorch bf16
// forward). The bound is a small multiple of that yardstick, per the numerics policy.
TEST_F(CudaForward, GoldenLogitsWithinBf16Yardstick) {
  Model model = load_model(*gpu_, golden_dir());
  auto fwd = SafetensorsFile::open(golden_dir() / "forward.safetensors");
  const auto yard = load_json(test_data_dir() / "golden" / "g1_bf16_reference_error.json");
  std::vector<std::vector<int32_t>> seqs;
  for (const char* key : {"L7", "L64", "L200", "L333"}) {
    std::vector<int32_t> ids = i64_tensor_as_i32(fwd->tensors().at(std::string("input_ids.") + key));
    std::vector<float> ref = f32_tensor(fwd->tensors().at(std::string("logits.") + key));
    std::vector<float> got = full_logits(*gpu_, model, {ids});
    const double err = rel_max_err(got, ref);
    const double agree = argmax_agreement(got, ref, model.config.embedding_size);
    EXPECT_LE(err, kBf16YardstickFactor * yard["rel_max_err"][key].get<double>()) << key;
    EXPECT_GE(agree, yard["argmax_agreement"][key].get<double>() - kBf16YardstickArgmaxSlack) << key;
    RecordProperty(std::string("rel_err_") + key, std::to_string(err));
    RecordProperty(std::string("argmax_agree_") + key, std::to_string(agree));
    std::printf("golden %s: rel max err %.3e, argmax agreement %.4f\n", key, err, agree);
    seqs.push_back(ids);
  }
  // Batch of four sequences of different lengths in one forward == single forwards.
  std::vector<float> batched = full_logits(*gpu_, model, seqs);
  const int64_t V = model.config.embedding_size;
  size_t off = 0;
  for (const auto& s : seqs) {
    std::vector<float> single = full_logits(*gpu_, model, {s});
    std::span<const float> part(batched.data() + off * V, s.size() * V);
    EXPECT_LE(rel_max_err(part, single), kBf16OpRelTol) << "batched sequence of length " << s.size();
    off += s.size();
  }
}

TEST_F(CudaForward, SmallModelCudaMatchesCpu) {
  const auto dir = default_model_dir();
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "no small model at " << dir;
  Model mc = load_model(*cpu_, dir);
  Model mg = load_model(*gpu_, dir);
  // A chat-like prefix of ordinary ids followed by a masked canvas, and a half-decoded canvas.
  std::vector<int32_t> a, b;
  for (int i = 0; i < 60; ++i) a.push_back(50 + (i * 37) % 1900);
  b = a;
  for (int i = 0; i < 128; ++i) a.push_back(mc.config.mask_token_id);
  for (int i = 0; i < 128; ++i) b.push_back(i % 2 ? mc.config.mask_token_id : 100 + i);
  std::vector<float> lc = full_logits(*cpu_, mc, {a, b});
  std::vector<float> lg = full_logits(*gpu_, mg, {a, b});
  const double err = rel_max_err(lg, lc);
  const double agree = argmax_agreement(lg, lc, mc.config.embedding_size);
  std::printf("small model: rel max err %.3e, argmax agreement %.4f\n", err, agree);
  EXPECT_LE(err, kBf16LogitRelTol);
  EXPECT_GE(agree, kBf16ArgmaxAgreement);
}

// The LLaDA sampler on CUDA, teacher-forced along the CPU sampler's trajectory on the small trained
// model: every step whose CPU decision margin (gap between the last committed and the first left
// confidence) exceeds kBf16DecisionMargin must commit the same positions and tokens.
TEST_F(CudaForward, SamplerMatchesCpuAboveBf16Margin) {
  const auto dir = default_model_dir();
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "no small model at " << dir;
  Model mc = load_model(*cpu_, dir);
  Model mg = load_model(*gpu_, dir);
  Tokenizer tok = Tokenizer::from_file(dir / "tokenizer.json");
  ChatTemplate chat = ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json");
  GenerateOptions o;
  o.decode.cache = CacheMode::kNone;
  o.sampling.gen_length = 64;
  o.decode.block_length = 32;
  o.sampling.steps = 64;
  LladaSampler cpu_sampler(*cpu_, mc, o), gpu_sampler(*gpu_, mg, o);
  int compared = 0, near_ties = 0, mismatches = 0;
  for (const char* q : {"Mia has 12 apples. She buys 3 bags with 4 apples each. How many apples does she have now?",
                        "Leo collected 250 shells. He gives away 75 shells. How many shells does he have left?",
                        "A farmer has 9 rows of 8 plants. How many plants does he have?",
                        // The trained model is confident at many positions at once (ties near 1.0), so most
                        // steps are near-ties; more prompts keep the compared decisions above 30.
                        "Ana reads 14 pages a day for 6 days. How many pages does she read?",
                        "A box holds 48 pens. 19 pens are red and the rest are blue. How many pens are blue?",
                        "Sam earns 35 dollars a week. How much does he earn in 9 weeks?",
                        "There are 132 students in 4 equal classes. How many students are in each class?",
                        "Tom had 503 marbles and lost 268. How many marbles does he have?"}) {
    std::vector<int32_t> prompt = tok.encode(chat.render({{"user", q}}));
    std::vector<SequenceState> before;
    std::vector<StepCommit> cpu_commits;
    std::vector<SequenceState> run = {cpu_sampler.init_state(prompt)};
    while (!run[0].done) {
      before.push_back(run[0]);
      cpu_commits.push_back(cpu_sampler.step(run)[0]);
    }
    std::vector<StepCommit> gpu_commits = gpu_sampler.step(before);
    for (size_t k = 0; k < before.size(); ++k) {
      std::vector<double> c = cpu_commits[k].confidences;
      std::sort(c.begin(), c.end(), std::greater<>());
      const size_t n = cpu_commits[k].positions.size();
      const double margin = n < c.size() ? c[n - 1] - c[n] : 1e9;
      if (margin <= kBf16DecisionMargin) {
        ++near_ties;
        continue;
      }
      ++compared;
      if (gpu_commits[k].positions != cpu_commits[k].positions || gpu_commits[k].tokens != cpu_commits[k].tokens)
        ++mismatches;
    }
  }
  std::printf("sampler CUDA vs CPU: %d steps compared, %d near-ties (margin <= %.0e), %d mismatches\n", compared,
              near_ties, kBf16DecisionMargin, mismatches);
  EXPECT_GT(compared, 30);
  EXPECT_EQ(mismatches, 0);
}

// Issue 15, finding 1 on the GPU: the mask id is never a sampling candidate, so no answer and no
// canvas position holds it in any mode at temperatures up to 1e3 (the CPU twin of this property is
// engine/AnswerInvariants.NoMaskIdAtAnyTemperature; the kernel-level check is CudaSelect).
TEST_F(CudaForward, NoMaskIdAtAnyTemperatureInEveryMode) {
  const auto dir = default_model_dir();
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "no small model at " << dir;
  const auto engine = cuda_engine(dir);
  const int32_t mask = engine->config().mask_token_id;
  std::vector<GenerateRequest> requests;
  for (const char* q : {"Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have at the end?",
                        "What is 7 + 8?",
                        "A box holds 48 pens. 19 pens are red and the rest are blue. How many "
                        "pens are blue?"})
    requests.push_back({q, {}, true});
  struct Mode {
    const char* name;
    CacheMode cache;
    bool verify;
  };
  uint64_t seed = 3;
  for (const Mode& m : {Mode{"flash", CacheMode::kFlash, false}, Mode{"flash+verify", CacheMode::kFlash, true},
                        Mode{"none", CacheMode::kNone, false}, Mode{"dual", CacheMode::kDual, false}}) {
    for (double temperature : {1.0, 100.0, 1000.0}) {
      GenerateOptions go;
      go.decode.cache = m.cache;
      go.decode.verify = m.verify;
      go.sampling.gen_length = 64;
      if (m.cache != CacheMode::kFlash) go.sampling.steps = 16;
      go.sampling.temperature = temperature;
      go.sampling.seed = seed++;
      const std::vector<GenerateResult> out = engine->generate(requests, go);
      ASSERT_EQ(out.size(), requests.size());
      for (const GenerateResult& r : out) {
        for (int32_t id : r.output_ids) EXPECT_NE(id, mask) << m.name << " temperature " << temperature;
        for (int32_t id : r.canvas_ids) EXPECT_NE(id, mask) << m.name << " temperature " << temperature;
      }
    }
  }
}

// A backend with CUDA graphs on or off (BackendOptions::cuda_graphs, read at construction).
std::unique_ptr<Backend> cuda_backend_with_graphs(bool graphs) {
  BackendOptions o;
  o.cuda_graphs = graphs;
  return make_cuda_backend(0, o);
}

// Backend::run_recorded on CUDA: the layer loop runs op by op at a key's first sighting, is captured
// into a CUDA graph at its second and replayed after; every result equals the op-by-op backend's
// bit for bit, although each call brings other tokens (the plan is uploaded outside the graph), and
// a call of another shape or workspace is not served by a graph of the first.
TEST_F(CudaForward, RecordedLayerLoopReplaysExactly) {
  auto eager = cuda_backend_with_graphs(false);
  auto graphs = cuda_backend_with_graphs(true);
  Model me = load_model(*eager, golden_dir());
  Model mg = load_model(*graphs, golden_dir());
  const int32_t V = static_cast<int32_t>(me.config.embedding_size);
  // Three batches of one shape (two sequences of 40 and 24 tokens), different tokens; one of another.
  auto batch = [&](int32_t salt, int32_t len) {
    std::vector<int32_t> a, b;
    for (int32_t i = 0; i < len; ++i) a.push_back((7 + 31 * i + salt * 13) % (V - 8) + 1);
    for (int32_t i = 0; i < 24; ++i) b.push_back((3 + 17 * i + salt * 29) % (V - 8) + 1);
    return full_recompute_batch({a, b});
  };
  const std::vector<ForwardBatch> calls = {batch(1, 40), batch(2, 40), batch(3, 40),
                                           batch(1, 40), batch(2, 40), batch(4, 33)};
  auto run = [](Backend& be, const Model& m, const ForwardBatch& fb, KvStore& kv, ForwardWorkspace& ws) {
    Tensor logits = model_forward(be, m, fb, kv, ws);
    std::vector<float> out(static_cast<size_t>(logits.numel()));
    be.copy_to_host(out.data(), logits);
    return out;
  };
  KvStore kve = make_kv_store(*eager, me.config, 64, true);
  ForwardWorkspace wse = make_forward_workspace(*eager, me.config, 64, 64, 4);
  KvStore kvg = make_kv_store(*graphs, mg.config, 64, true);
  ForwardWorkspace wsg = make_forward_workspace(*graphs, mg.config, 64, 64, 4);
  std::vector<std::vector<float>> expect;
  for (const ForwardBatch& fb : calls) expect.push_back(run(*eager, me, fb, kve, wse));
  ASSERT_NE(expect[0], expect[1]) << "the batches must give different logits for the test to mean anything";
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::vector<float> got = run(*graphs, mg, calls[i], kvg, wsg);
    ASSERT_EQ(got.size(), expect[i].size()) << "call " << i;
    EXPECT_EQ(std::memcmp(got.data(), expect[i].data(), got.size() * sizeof(float)), 0) << "call " << i;
  }
  Backend::RecordingStats st = graphs->recording_stats();
  // Calls 0 and 5 (new keys) op by op, call 1 captured, calls 2-4 replayed.
  EXPECT_EQ(st.direct, 2);
  EXPECT_EQ(st.captures, 1);
  EXPECT_EQ(st.replays, 3);
  EXPECT_EQ(st.failed, 0);
  EXPECT_EQ(st.cached, 1);
  EXPECT_EQ(eager->recording_stats().captures, 0);
  EXPECT_EQ(eager->recording_stats().direct, static_cast<int64_t>(calls.size()));

  // Another workspace (other addresses) with the first shape: not the first workspace's graph.
  ForwardWorkspace ws2 = make_forward_workspace(*graphs, mg.config, 80, 64, 4);
  const std::vector<float> got = run(*graphs, mg, calls[0], kvg, ws2);
  EXPECT_EQ(std::memcmp(got.data(), expect[0].data(), got.size() * sizeof(float)), 0);
  st = graphs->recording_stats();
  EXPECT_EQ(st.replays, 3);
  EXPECT_EQ(st.direct, 3);
}

// Whole requests through the engine give the same tokens with and without CUDA graphs in every
// cache mode (Flash-Cache's steady iterations and the block samplers' repeated shapes replay).
TEST_F(CudaForward, GraphsDoNotChangeAnswers) {
  const auto dir = default_model_dir();
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "no small model at " << dir;
  auto generate_all = [&](bool graphs) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.device = "cuda";
    eo.backend.cuda_graphs = graphs;
    const auto engine = Engine::load(eo);
    std::vector<GenerateRequest> requests;
    for (const char* q : {"Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have?",
                          "What is 7 + 8?", "Tom has 12 apples and eats 5. How many are left?"})
      requests.push_back({q, {}, true});
    std::vector<std::vector<int32_t>> out;
    for (const std::string name : {"flash", "none", "dual", "verify"}) {
      GenerateOptions go;
      go.sampling.gen_length = 64;
      go.decode.cache = name == "none" ? CacheMode::kNone : name == "dual" ? CacheMode::kDual : CacheMode::kFlash;
      go.decode.verify = name == "verify";
      if (name == "none" || name == "dual") go.sampling.steps = 32;
      go.decode.n_slots = 2;  // three requests over two slots: an admission mid-run
      for (const GenerateResult& r : engine->generate(requests, go)) out.push_back(r.canvas_ids);
    }
    return out;
  };
  const auto eager = generate_all(false);
  const auto graphs = generate_all(true);
  ASSERT_EQ(eager.size(), graphs.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(eager[i], graphs[i]) << "request " << i;
}

// Continuous batching changes a pass's row counts with nearly every commit (windows shrink at the
// end, candidates vary, slots finish and are refilled): with the rows padded (Backend::row_padding,
// BackendOptions::row_padding) most layer loops replay a recorded graph, and the answers are those of
// exact row counts. Without the padding this run replayed 3 of 83 loops, with it 52 of 83, in the
// CPU count of its keys (bench/results/2026-12-05-row-padding/).
TEST_F(CudaForward, LayerLoopsReplayWhileRowCountsChange) {
  const auto dir = default_model_dir();
  if (!std::filesystem::exists(dir / "model.safetensors")) GTEST_SKIP() << "no small model at " << dir;
  std::vector<GenerateRequest> requests;  // the first 48 problems of the model's test split
  std::ifstream in(repo_data_dir() / "arith" / "test.jsonl");
  for (std::string line; requests.size() < 48 && std::getline(in, line);)
    requests.push_back({nlohmann::json::parse(line).at("question").get<std::string>(), {}, true});
  ASSERT_EQ(requests.size(), 48u) << repo_data_dir() / "arith" / "test.jsonl";
  GenerateOptions go;
  go.sampling.gen_length = 64;
  go.decode.cache = CacheMode::kFlash;
  go.decode.verify = true;
  go.decode.n_slots = 8;
  auto run = [&](bool padding, Engine::GraphStats& stats) {
    const auto engine = cuda_engine(dir, padding);
    std::vector<std::vector<int32_t>> out;
    for (const GenerateResult& r : engine->generate(requests, go)) {
      EXPECT_TRUE(r.error.empty()) << r.error;
      out.push_back(r.output_ids);
    }
    stats = engine->graph_stats();
    return out;
  };
  Engine::GraphStats padded_stats, exact_stats;
  const auto padded = run(true, padded_stats);
  const auto exact = run(false, exact_stats);
  const int64_t loops = padded_stats.direct + padded_stats.captures + padded_stats.replays;
  EXPECT_EQ(padded_stats.failed, 0);
  EXPECT_GT(3 * padded_stats.replays, loops) << "direct " << padded_stats.direct << ", captures "
                                             << padded_stats.captures << ", replays " << padded_stats.replays;
  EXPECT_GT(padded_stats.replays, 2 * exact_stats.replays)
      << "exact rows: " << exact_stats.replays << " replays of "
      << exact_stats.direct + exact_stats.captures + exact_stats.replays;
  // Padding changes the GEMMs' row counts (and so, where the row bucket changes, cuBLASLt's
  // algorithm and the last bits of a logit): nearly every answer, not every one, must be the same.
  ASSERT_EQ(padded.size(), exact.size());
  int same = 0;
  for (size_t i = 0; i < padded.size(); ++i) same += padded[i] == exact[i] ? 1 : 0;
  EXPECT_GE(same, 44) << "of " << padded.size() << " answers equal with and without the padding";
}

}  // namespace
}  // namespace flashdllm::test
