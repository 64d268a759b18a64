// The whole model on the CUDA backend (bf16 storage, fp32 accumulation) against the fp32 oracles:
//  * golden upstream fp32 logits (forward.safetensors) within kBf16LogitRelTol, argmax agreement;
//  * CUDA vs CPU logits on the small trained model (models/llada-arith-12m), when present;
//  * LLaDA sampler decisions, teacher-forced from the golden traces, equal wherever the recorded
//    margin exceeds the bf16 noise level kBf16DecisionMargin (smaller margins are near-ties).
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "backend/backend.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "denoise/decode_rules.h"
#include "denoise/llada_sampler.h"
#include "io/safetensors.h"

namespace flashdllm::test {
namespace {

class CudaForward : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device (built without CUDA or no GPU)";
    cpu_ = make_cpu_backend(0);
    gpu_ = make_cuda_backend(0);
  }
  std::unique_ptr<Backend> cpu_, gpu_;
};

std::vector<int32_t> ids_of(const TensorInfo& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v;
    std::memcpy(&v, static_cast<const char*>(t.data) + 8 * i, 8);
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

std::vector<float> f32_of(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data, out.size() * 4);
  return out;
}

double argmax_agreement(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  const int64_t rows = static_cast<int64_t>(a.size()) / V;
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = &a[r * V];
    const float* y = &b[r * V];
    same += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
  }
  return static_cast<double>(same) / static_cast<double>(rows);
}

TEST_F(CudaForward, GoldenLogitsWithinBf16Tolerance) {
  LladaModel model = load_model(*gpu_, golden_dir());
  auto fwd = SafetensorsFile::open(golden_dir() / "forward.safetensors");
  std::vector<std::vector<int32_t>> seqs;
  for (const char* key : {"L7", "L64", "L200", "L333"}) {
    std::vector<int32_t> ids = ids_of(fwd->tensors().at(std::string("input_ids.") + key));
    std::vector<float> ref = f32_of(fwd->tensors().at(std::string("logits.") + key));
    std::vector<float> got = full_logits(*gpu_, model, {ids});
    const double err = rel_max_err(got, ref);
    const double agree = argmax_agreement(got, ref, model.config.embedding_size);
    EXPECT_LE(err, kBf16LogitRelTol) << key;
    EXPECT_GE(agree, kBf16ArgmaxAgreement) << key;
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
  LladaModel mc = load_model(*cpu_, dir);
  LladaModel mg = load_model(*gpu_, dir);
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

TEST_F(CudaForward, SamplerTeacherForcedMatchesGoldenAboveBf16Margin) {
  LladaModel model = load_model(*gpu_, golden_dir());
  nlohmann::json g = load_json(golden_dir() / "gen_llada.json");
  int compared = 0, near_ties = 0, mismatches = 0;
  for (const auto& r : g["runs"]) {
    if (r["prompt_set"] != "common" || r["gen_length"] != 32 || r["block_length"] != 8 || r["steps"] != 32) continue;
    auto prompt = g["prompts"]["common"][r["prompt_index"].get<size_t>()].get<std::vector<int32_t>>();
    auto out = r["output_ids"].get<std::vector<int32_t>>();
    LladaSamplerOptions o;
    o.gen_length = 32;
    o.block_length = 8;
    o.steps = 32;
    LladaSampler sampler(*gpu_, model, o);
    const int64_t P = static_cast<int64_t>(prompt.size());
    std::vector<SequenceState> states;
    SequenceState cur = sampler.init_state(prompt);
    for (size_t k = 0; k < r["trace"].size(); ++k) {
      SequenceState s = cur;
      s.block = static_cast<int64_t>(k) / 8;
      s.step_in_block = static_cast<int64_t>(k) % 8;
      s.block_quota = quota_schedule(8, 8);
      states.push_back(s);
      for (int64_t p : r["trace"][k]["committed"].get<std::vector<int64_t>>()) cur.x[P + p] = out[p];
    }
    auto got = sampler.step(states);
    for (size_t k = 0; k < r["trace"].size(); ++k) {
      const auto& m = r["trace"][k]["margin"];
      const double margin = m.is_number() ? m.get<double>() : 1e9;
      if (margin <= kBf16DecisionMargin) {
        ++near_ties;
        continue;
      }
      ++compared;
      std::vector<int64_t> have;
      for (int64_t p : got[k].positions) have.push_back(p - P);
      if (have != r["trace"][k]["committed"].get<std::vector<int64_t>>()) ++mismatches;
    }
  }
  std::printf("sampler on CUDA: %d steps compared, %d near-ties (margin <= %.0e), %d mismatches\n", compared,
              near_ties, kBf16DecisionMargin, mismatches);
  EXPECT_GT(compared, 50);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace flashdllm::test
