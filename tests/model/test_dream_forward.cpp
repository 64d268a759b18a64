// The Dream family on the CPU backend (issue 46): config.json parsing (the real Dream-v0-Instruct-7B
// file and the golden checkpoint's), the weight map and checkpoint validation, and the one forward
// function on Dream's layout (GQA 2:1, q/k/v biases, untied head) against the upstream PyTorch
// DreamModel recorded in tests/data/golden/dream_a (README.md there):
//  * logits of every recorded sequence: max|Δ|/max|ref| <= 5e-5 and the argmax of every row;
//  * hidden states of L33: after layer 0 (a one-layer run's residual stream) and after the final
//    RMSNorm (the forward's selected rows), embeddings equal to the checkpoint's rows;
//  * the verify pass (model_verify_forward: gathered cache keys + in-tile keys) over a kept range
//    equals the full forward; tensor parallelism over the K/V heads equals one rank;
//  * dummy weights for a Dream config (and the real 7B shape's sizes: 56 KiB of K/V per token).
// The logit shift is not applied by the forward: row i is the model's output at i, as recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "common/expect_error.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "core/check.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"
#include "model/model_info.h"

namespace flashdllm::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path dream_dir() { return test_data_dir() / "golden" / "dream_a"; }
fs::path real_dream_dir() { return repo_data_dir() / "dream-v0-instruct-7b"; }

const SafetensorsFile& fixture() {
  static const std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(dream_dir() / "forward.safetensors");
  return *f;
}
std::vector<int32_t> ids(const std::string& key) {
  return i64_tensor_as_i32(fixture().tensors().at("input_ids." + key));
}
std::vector<float> recorded(const std::string& name) { return f32_tensor(fixture().tensors().at(name)); }

struct Loaded {
  std::unique_ptr<Backend> backend = make_cpu_backend(0);
  Model model = load_model(*backend, dream_dir());
};
Loaded& loaded() {
  static Loaded l;
  return l;
}

int64_t argmax_row(const float* r, int64_t V) { return std::max_element(r, r + V) - r; }

// ------------------------------------------------------------------------------------ config

TEST(DreamConfig, RealInstructConfig) {
  const ModelConfig c = load_model_config(real_dream_dir() / "config.json");
  EXPECT_EQ(c.family, ModelFamily::kDream);
  EXPECT_EQ(c.model_type, "Dream");
  EXPECT_EQ(c.d_model, 3584);
  EXPECT_EQ(c.n_layers, 28);
  EXPECT_EQ(c.n_heads, 28);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.kv_group(), 7);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.mlp_hidden_size, 18944);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_EQ(c.embedding_size, 152064);
  EXPECT_EQ(c.max_sequence_length, 131072);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.logit_shift);
  EXPECT_FALSE(c.tied_head);
  EXPECT_EQ(c.mask_token_id, 151666);
  EXPECT_EQ(c.eos_token_id, 151643);
  EXPECT_EQ(c.pad_token_id, 151643);
  EXPECT_EQ(c.bos_token_id, 151643);
  // The hub index's total_size is 2 bytes x the parameters the shapes imply (biases included).
  EXPECT_EQ(c.parameter_count(), 7615616512);
  EXPECT_EQ(validate_model_index(real_dream_dir() / "model.safetensors.index.json", c), 2);
  // 2 (K, V) x 28 layers x 4 heads x 128 x 2 bytes = 56 KiB per token at bf16 (LLaDA-8B: 512 KiB).
  EXPECT_EQ(kv_store_bytes(DType::kBF16, c, 1024, false) / 1024, size_t{56} * 1024);
  EXPECT_GE(model_weight_bytes(DType::kBF16, c), size_t{2} * 7615616512);
}

TEST(DreamConfig, GoldenConfigAndLladaUnchanged) {
  const ModelConfig c = load_model_config(dream_dir() / "config.json");
  EXPECT_EQ(c.family, ModelFamily::kDream);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.mask_token_id, 1000);
  const ModelConfig l = load_model_config(golden_dir() / "config.json");
  EXPECT_EQ(l.family, ModelFamily::kLlada);
  EXPECT_FALSE(l.qkv_bias);
  EXPECT_FALSE(l.logit_shift);
  EXPECT_EQ(l.n_kv_heads, l.n_heads);
}

class DreamConfigRejects : public ::testing::TestWithParam<BadConfig> {};

TEST_P(DreamConfigRejects, WithClearMessage) {
  expect_config_refused(load_json(real_dream_dir() / "config.json"), GetParam(), "/models/dream/config.json");
}

auto set = set_key;
auto erase = erase_key;

const BadConfig kBadDream[] = {
    {"model_type_qwen2", set("model_type", "qwen2"), {"'qwen2'", "\"llada\"", "\"Dream\""}},
    {"model_type_lowercase", set("model_type", "dream"), {"'dream'", "\"Dream\""}},
    {"architectures_llada", set("architectures", json::array({"LLaDAModelLM"})), {"LLaDAModelLM", "contradicts"}},
    {"architectures_string", set("architectures", "DreamModel"), {"architectures", "list of strings"}},
    {"kv_heads_missing", erase("num_key_value_heads"), {"missing required field 'num_key_value_heads'"}},
    {"kv_heads_not_dividing", set("num_key_value_heads", 3), {"num_key_value_heads = 3", "num_attention_heads = 28"}},
    {"hidden_not_divisible", set("hidden_size", 3600), {"hidden_size = 3600", "num_attention_heads = 28"}},
    {"head_dim_other", set("head_dim", 64), {"head_dim = 64", "128"}},
    {"intermediate_zero", set("intermediate_size", 0), {"'intermediate_size' = 0"}},
    {"max_positions_huge", set("max_position_embeddings", 1 << 20), {"'max_position_embeddings'", "above"}},
    {"hidden_act_gelu", set("hidden_act", "gelu"), {"hidden_act", "'gelu'", "\"silu\""}},
    {"rope_scaling", set("rope_scaling", json{{"type", "yarn"}, {"factor", 4.0}}), {"rope_scaling", "yarn"}},
    {"sliding_window", set("use_sliding_window", true), {"use_sliding_window = true"}},
    {"mrope", set("use_mrope", true), {"use_mrope = true"}},
    {"attention_bias_true", set("attention_bias", true), {"attention_bias = true", "o_proj"}},
    {"tie_string", set("tie_word_embeddings", "false"), {"tie_word_embeddings", "true or false"}},
    {"rope_theta_missing", erase("rope_theta"), {"missing required field 'rope_theta'"}},
    {"eps_zero", set("rms_norm_eps", 0.0), {"'rms_norm_eps' = 0"}},
    {"mask_missing", erase("mask_token_id"), {"missing required field 'mask_token_id'"}},
    {"mask_out_of_range", set("mask_token_id", 152064), {"'mask_token_id' = 152064", "152064"}},
    {"mask_is_eos", set("mask_token_id", 151643), {"mask_token_id = 151643", "eos_token_id"}},
    {"bos_negative", set("bos_token_id", -1), {"'bos_token_id' = -1"}},
};
INSTANTIATE_TEST_SUITE_P(AllOptions, DreamConfigRejects, ::testing::ValuesIn(kBadDream),
                         [](const auto& info) { return std::string(info.param.name); });

// ------------------------------------------------------------------------------------ checkpoint

TEST(DreamCheckpoint, WeightMapIsTheHubNamesAndValidationNamesTheTensor) {
  const ModelConfig c = load_model_config(dream_dir() / "config.json");
  EXPECT_EQ(model_expected_tensor_count(c), 12 * 2 + 3);
  EXPECT_EQ(weight_name(c, WeightRole::kKBias, 1), "model.layers.1.self_attn.k_proj.bias");
  EXPECT_EQ(weight_name(c, WeightRole::kAttnOut, 0), "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(weight_name(c, WeightRole::kLmHead), "lm_head.weight");
  const Checkpoint ck = Checkpoint::open(dream_dir());
  EXPECT_NO_THROW(validate_model_checkpoint(ck, c));
  // Every tensor of the file is expected and vice versa.
  std::vector<std::string> names;
  for (const ExpectedTensor& e : model_expected_tensors(c)) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, ck.names());

  ModelConfig tied = c;  // a tied head has no lm_head.weight: the file's is unexpected
  tied.tied_head = true;
  EXPECT_EQ(weight_name(tied, WeightRole::kLmHead), "model.embed_tokens.weight");
  expect_error([&] { validate_model_checkpoint(ck, tied); }, ErrorCode::kInvalidCheckpoint,
               {"unexpected tensor 'lm_head.weight'", "Dream"});
  ModelConfig mha = c;  // 4 K/V heads: k_proj would be [256, 256]
  mha.n_kv_heads = 4;
  expect_error([&] { validate_model_checkpoint(ck, mha); }, ErrorCode::kInvalidCheckpoint,
               {"model.layers.0.self_attn.k_proj.weight", "[128, 256]", "[256, 256]"});

  // A copy without one bias: the missing tensor is named.
  const fs::path dir = temp_dir();
  std::vector<TensorToWrite> keep;
  for (const std::string& n : ck.names()) {
    if (n == "model.layers.1.self_attn.v_proj.bias") continue;
    const TensorInfo& t = ck.get(n);
    keep.push_back({n, t.dtype, t.shape, t.data, t.nbytes});
  }
  write_safetensors(dir / "model.safetensors", keep);
  const Checkpoint missing = Checkpoint::open(dir);
  expect_error([&] { validate_model_checkpoint(missing, c); }, ErrorCode::kInvalidCheckpoint,
               {"missing tensor 'model.layers.1.self_attn.v_proj.bias'", "[128]"});
}

// ------------------------------------------------------------------------------------ forward

class DreamGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(DreamGolden, LogitsMatchUpstreamFp32) {
  Loaded& l = loaded();
  const std::string key = GetParam();
  const std::vector<int32_t> x = ids(key);
  const std::vector<float> want = recorded("logits." + key);
  const std::vector<float> got = full_logits(*l.backend, l.model, {x});
  ASSERT_EQ(got.size(), want.size());
  const double err = rel_max_err(got, want);
  EXPECT_LE(err, kFp32LogitRelTol) << key << ": max|Δ|/max|ref| = " << err;
  const int64_t V = l.model.config.embedding_size;
  int64_t mismatches = 0;
  for (size_t t = 0; t < x.size(); ++t) mismatches += argmax_row(&got[t * V], V) != argmax_row(&want[t * V], V);
  EXPECT_EQ(mismatches, 0) << key << ": argmax differs on " << mismatches << " of " << x.size() << " rows";
  std::printf("  %s: max|d|/max|ref| = %.2e\n", key.c_str(), err);
}

INSTANTIATE_TEST_SUITE_P(Sequences, DreamGolden, ::testing::Values("L7", "L33", "L64", "L130"),
                         [](const auto& info) { return info.param; });

/// model_forward over `x` (every row a logits row) on fresh buffers; returns ws.x (the residual
/// stream after the last layer run) and ws.sel (the final-norm output of the logits rows).
struct Taps {
  std::vector<float> x, sel;
};
Taps forward_taps(Backend& be, const Model& m, const std::vector<int32_t>& x) {
  const ForwardBatch fb = full_recompute_batch({x});
  const int64_t T = fb.n_tokens();
  KvStore kv = make_kv_store(be, m.config, T, /*shared_across_layers=*/true);
  ForwardWorkspace ws = make_forward_workspace(be, m.config, T, T, 1);
  model_forward(be, m, fb, kv, ws);
  be.synchronize();
  const int64_t D = m.config.d_model;
  const float* px = ws.x.ptr<float>();
  const float* ps = ws.sel.ptr<float>();
  return {std::vector<float>(px, px + T * D), std::vector<float>(ps, ps + T * D)};
}

TEST(DreamGoldenHidden, EmbeddingsLayerZeroAndFinalNormMatchUpstream) {
  Loaded& l = loaded();
  const std::vector<int32_t> x = ids("L33");
  const int64_t D = l.model.config.d_model;
  // hidden 0 = the embedding rows of the checkpoint.
  const Checkpoint ck = Checkpoint::open(dream_dir());
  const auto* wte = static_cast<const float*>(ck.get("model.embed_tokens.weight").data);
  const std::vector<float> h0 = recorded("hidden.L33.0");
  for (size_t t = 0; t < x.size(); ++t)
    ASSERT_EQ(std::memcmp(&h0[t * D], wte + x[t] * D, static_cast<size_t>(D) * sizeof(float)), 0) << "row " << t;
  // The last hidden state is after the final RMSNorm: the forward's selected rows.
  const Taps full = forward_taps(*l.backend, l.model, x);
  EXPECT_LE(rel_max_err(full.sel, recorded("hidden.L33." + std::to_string(l.model.config.n_layers))), kFp32LogitRelTol);
  // hidden i (0 < i < n_layers) = the residual stream after layer i - 1: a forward of the first i
  // layers (the weights of the later ones unused).
  for (int64_t i = 1; i < l.model.config.n_layers; ++i) {
    Model& m = l.model;
    const int64_t all = m.config.n_layers;
    m.config.n_layers = i;
    const Taps part = forward_taps(*l.backend, m, x);
    m.config.n_layers = all;
    EXPECT_LE(rel_max_err(part.x, recorded("hidden.L33." + std::to_string(i))), kFp32LogitRelTol) << "hidden " << i;
  }
}

// The verify pass over a kept range [a, b) whose other positions come from a full forward's K/V
// cache sees the same keys as the full forward: same logits (GQA + biases on the verify path).
TEST(DreamVerify, KeptRowsOverAFullCacheEqualTheFullForward) {
  Loaded& l = loaded();
  EXPECT_LE(verify_vs_full_forward(*l.backend, l.model, ids("L64"), 20, 37), kFp32OpRelTol);
}

TEST(DreamTensorParallel, TwoRanksEqualOneAndWorldMustDivideKvHeads) {
  Loaded& l = loaded();
  const std::vector<int32_t> x = ids("L33");
  const std::vector<float> one = full_logits(*l.backend, l.model, {x});
  TpGroup g = load_tp_group(dream_dir(), 2);
  std::vector<std::vector<float>> got(2);
  g.run([&](int r) { got[static_cast<size_t>(r)] = full_logits(*g.backends[r], g.models[r], {x}); });
  for (const auto& v : got) EXPECT_LE(rel_max_err(v, one), kTpFp32LogitRelTol);
  // 2 K/V heads cannot be split 4 ways (the 4 query heads could).
  expect_error(
      [&] {
        model_shard(l.model.config, {0, 4, nullptr});
      },
      ErrorCode::kInvalidArgument, {"tensor parallel size 4", "n_kv_heads = 2"});
}

TEST(DreamDummy, DummyWeightsRunAndDescribeTheFamily) {
  auto be = make_cpu_backend(1);
  Model m;
  m.config = load_model_config(dream_dir() / "config.json");
  m.weights = make_dummy_weights(*be, m.config, 7);
  m.rope = make_rope_tables(*be, m.config, 256);
  ASSERT_FALSE(m.weights.layers[0].bqkv.empty());
  EXPECT_EQ(m.weights.layers[0].wqkv.rows(), (4 + 2 * 2) * 64);
  const std::vector<float> lg = full_logits(*be, m, {ids("L7")});
  EXPECT_TRUE(std::all_of(lg.begin(), lg.end(), [](float v) { return std::isfinite(v); }));
  // `flashdllm info` facts of the real 7B config (dummy: no weights read).
  const ModelFacts f = inspect_checkpoint(real_dream_dir(), /*dummy_weights=*/true);
  auto bf16 = make_cpu_backend(1);
  const std::string info = describe_model(f, *bf16);
  for (const char* part : {"Dream (model_type Dream)", "GQA: 7 query heads per K/V head", "q/k/v bias yes", "untied",
                           "logit shift       yes"})
    EXPECT_NE(info.find(part), std::string::npos) << "lacks '" << part << "':\n" << info;
}

}  // namespace
}  // namespace flashdllm::test
