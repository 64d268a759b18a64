// The LLaDA-MoE family on the CPU backend (issue 47): config.json parsing (the golden checkpoint's,
// the real model's shape, refusals naming the field), the weight map (hub names, stacked experts),
// the MoE ops against a naive reference (experts that receive no row, every row on one expert,
// renormalisation), and the one forward on LLaDA-MoE's layout (per-head QK-norm before RoPE,
// softmax top-k experts without renormalisation) against the upstream PyTorch LLaDAMoEModelLM
// recorded in tests/data/golden/llada_moe_a (README.md there):
//  * logits of every recorded sequence: max|Δ|/max|ref| <= 5e-5 and the argmax of every row;
//  * per layer, the router logits (max|Δ|/max|ref| <= 5e-5), the chosen experts exactly (the
//    recorded top-k margins are >= 1.7e-4) and their weights;
//  * the verify pass over a kept range equals the full forward; batch invariance of the MoE rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "common/expect_error.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"
#include "model/model_info.h"

namespace flashdllm::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path moe_dir() { return test_data_dir() / "golden" / "llada_moe_a"; }

const SafetensorsFile& fixture() {
  static const std::unique_ptr<SafetensorsFile> f = SafetensorsFile::open(moe_dir() / "forward.safetensors");
  return *f;
}
const TensorInfo& fx(const std::string& name) { return fixture().tensors().at(name); }
std::vector<int32_t> ids(const std::string& key) { return i64_tensor_as_i32(fx("input_ids." + key)); }

using Loaded = CpuCheckpoint;
Loaded& loaded() { return cpu_checkpoint(moe_dir()); }

int64_t argmax_row(const float* r, int64_t V) { return std::max_element(r, r + V) - r; }

// ------------------------------------------------------------------------------------ config

TEST(LladaMoeConfig, GoldenConfig) {
  const ModelConfig c = load_model_config(moe_dir() / "config.json");
  EXPECT_EQ(c.family, ModelFamily::kLladaMoe);
  EXPECT_STREQ(family_name(c.family), "LLaDA-MoE");
  EXPECT_EQ(c.model_type, "llada");
  EXPECT_EQ(c.d_model, 256);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.mlp_hidden_size, 128);  // each expert's width
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.logit_shift);
  EXPECT_FALSE(c.tied_head);
  EXPECT_EQ(c.moe.n_experts, 8);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.score, RouterScore::kSoftmax);
  EXPECT_FALSE(c.moe.renormalize);
  EXPECT_EQ(c.rope_theta, 50000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.max_sequence_length, 8192);
  EXPECT_EQ(c.mask_token_id, 1000);
  EXPECT_EQ(c.eos_token_id, 1001);
  EXPECT_EQ(c.pad_token_id, 1001);
}

/// The real LLaDA-MoE-7B-A1B shape (issue 47's facts; the key set of the golden config).
json real_shape() {
  json j = load_json(moe_dir() / "config.json");
  j.erase("golden_notes");
  j.erase("mask_token_id");
  j["hidden_size"] = 2048;
  j["num_hidden_layers"] = 16;
  j["num_attention_heads"] = 16;
  j["num_key_value_heads"] = 16;
  j["num_experts"] = 64;
  j["num_experts_per_tok"] = 8;
  j["expert_intermediate_size"] = 1024;
  j["moe_layer_freq"] = json(std::vector<int>(16, 1));
  j["vocab_size"] = 157184;
  j["eos_token_id"] = 156892;
  j["pad_token_id"] = 156892;
  return j;
}

TEST(LladaMoeConfig, RealShapeCountsAndMaskDefault) {
  const ModelConfig c = parse_model_config(real_shape(), "config.json");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.mask_token_id, 156895);  // absent: the model card's generate(mask_id=156895)
  // 7.36B parameters, 1.40B active per token (the model card's "7B-A1B": ~1.4B activated).
  EXPECT_EQ(c.parameter_count(), 7356880896);
  EXPECT_EQ(c.active_parameter_count(), 1397823488);
  // 2 (K, V) x 16 layers x 2048 x 2 bytes = 128 KiB of K/V per token at bf16.
  EXPECT_EQ(kv_store_bytes(DType::kBF16, c, 1024, false) / 1024, size_t{128} * 1024);
  // Without architectures the num_experts key selects the family; a dense LLaDA config stays LLaDA.
  json j = real_shape();
  j.erase("architectures");
  EXPECT_EQ(parse_model_config(j, "c.json").family, ModelFamily::kLladaMoe);
  EXPECT_EQ(load_model_config(golden_dir() / "config.json").family, ModelFamily::kLlada);
}

// The mask token's text: tokenizer_config.json's mask_token (string or AddedToken object) over the
// family default (Ling's <|mask|>); the small LLaDA-MoE model names LLaDA's <|mdm_mask|> this way.
TEST(LladaMoeTokenizer, MaskTokenNameFromTokenizerConfig) {
  const ModelConfig c = parse_model_config(real_shape(), "config.json");
  const fs::path dir = temp_dir();
  const fs::path tok = dir / "tokenizer.json";
  EXPECT_EQ(mask_token_name(c, tok), "<|mask|>");  // no tokenizer_config.json
  const auto with = [&](const json& j) {
    std::ofstream(dir / "tokenizer_config.json") << j.dump();
    return mask_token_name(c, tok);
  };
  EXPECT_EQ(with({{"chat_template", "x"}}), "<|mask|>");
  EXPECT_EQ(with({{"mask_token", nullptr}}), "<|mask|>");
  EXPECT_EQ(with({{"mask_token", "<|mdm_mask|>"}}), "<|mdm_mask|>");
  EXPECT_EQ(with({{"mask_token", {{"content", "[MASK]"}, {"special", true}}}}), "[MASK]");
  for (const json& bad : {json{{"mask_token", 5}}, json{{"mask_token", ""}}, json{{"mask_token", {{"x", 1}}}}})
    expect_error([&] { with(bad); }, ErrorCode::kInvalidCheckpoint, {"tokenizer_config.json", "mask_token"});
  // A file that is not an object keeps the default (the chat template's lookup reports it where used).
  EXPECT_EQ(with(json::array({"mask_token"})), "<|mask|>");
}

class LladaMoeConfigRejects : public ::testing::TestWithParam<BadConfig> {};

TEST_P(LladaMoeConfigRejects, WithClearMessage) {
  expect_config_refused(real_shape(), GetParam(), "/models/llada-moe/config.json");
}

auto set = set_key;
auto erase = erase_key;

const BadConfig kBadMoe[] = {
    {"arch_dream", set("architectures", json::array({"LLaDAMoEModelLM", "DreamModel"})), {"DreamModel", "contradicts"}},
    {"experts_missing", erase("num_experts"), {"missing required field 'num_experts'"}},
    {"topk_above_experts", set("num_experts_per_tok", 65), {"num_experts_per_tok = 65", "num_experts = 64"}},
    {"dense_layer", set("moe_layer_freq", json(std::vector<int>{0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})),
     {"moe_layer_freq[0] = 0", "dense"}},
    {"freq_short", set("moe_layer_freq", json(std::vector<int>{1, 1})), {"moe_layer_freq", "16 layers"}},
    {"freq_missing", erase("moe_layer_freq"), {"moe_layer_freq", "absent"}},
    {"shared_expert", set("shared_expert_intermediate_size", 512), {"shared_expert_intermediate_size = 512"}},
    {"shared_expert_absent", erase("shared_expert_intermediate_size"), {"shared_expert_intermediate_size", "-1"}},
    {"expert_bias", set("moe_router_enable_expert_bias", true), {"moe_router_enable_expert_bias = true"}},
    {"partial_rotary", set("partial_rotary_factor", 0.5), {"partial_rotary_factor = 0.5"}},
    {"partial_rotary_absent", erase("partial_rotary_factor"), {"partial_rotary_factor", "absent"}},
    {"clip_qkv", set("clip_qkv", 8.0), {"clip_qkv", "8.0"}},
    {"attention_bias", set("attention_bias", true), {"attention_bias = true"}},
    {"rope_scaling", set("rope_scaling", json{{"type", "linear"}, {"factor", 2.0}}), {"rope_scaling", "linear"}},
    {"gelu", set("hidden_act", "gelu"), {"hidden_act", "'gelu'"}},
    {"kv_heads", set("num_key_value_heads", 3), {"num_key_value_heads = 3"}},
    {"expert_width_zero", set("expert_intermediate_size", 0), {"'expert_intermediate_size' = 0"}},
    {"mask_outside",
     [](json& j) {
       j["vocab_size"] = 1024;
       j["eos_token_id"] = j["pad_token_id"] = 1001;
     },
     {"mask_token_id = 156895", "model card", "vocab_size = 1024"}},
    {"mask_is_eos", set("mask_token_id", 156892), {"mask_token_id = 156892", "eos_token_id"}},
    {"eos_missing", erase("eos_token_id"), {"missing required field 'eos_token_id'"}},
};
INSTANTIATE_TEST_SUITE_P(AllOptions, LladaMoeConfigRejects, ::testing::ValuesIn(kBadMoe),
                         [](const auto& info) { return std::string(info.param.name); });

// ------------------------------------------------------------------------------------ checkpoint

TEST(LladaMoeCheckpoint, WeightMapIsTheHubNames) {
  const ModelConfig c = load_model_config(moe_dir() / "config.json");
  // Per layer: 2 norms, q, k, v, o, q_norm, k_norm, router + 8 experts x 3.
  EXPECT_EQ(model_expected_tensor_count(c), (9 + 3 * 8) * 2 + 3);
  EXPECT_EQ(weight_name(c, WeightRole::kQNorm, 1), "model.layers.1.self_attn.q_norm.weight");
  EXPECT_EQ(weight_name(c, WeightRole::kRouter, 0), "model.layers.0.mlp.gate.weight");
  EXPECT_EQ(weight_name(c, WeightRole::kExpertDown, 1, 7), "model.layers.1.mlp.experts.7.down_proj.weight");
  const Checkpoint ck = Checkpoint::open(moe_dir());
  EXPECT_NO_THROW(validate_model_checkpoint(ck, c));
  std::vector<std::string> names;
  for (const ExpectedTensor& e : model_expected_tensors(c)) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, ck.names());
  ModelConfig fewer = c;  // a config claiming 4 experts: expert 4's tensors are unexpected
  fewer.moe.n_experts = 4;
  expect_error([&] { validate_model_checkpoint(ck, fewer); }, ErrorCode::kInvalidCheckpoint,
               {"model.layers.0.mlp.gate.weight", "[8, 256]", "[4, 256]"});
  EXPECT_EQ(c.parameter_count(), [&] {
    int64_t n = 0;
    for (const std::string& name : ck.names()) n += ck.get(name).numel();
    return n;
  }());
}

// Tensor parallelism splits every expert's columns across the ranks (the router whole on each): 2 and
// 4 CPU ranks give the unsharded logits within the TP fp32 bound, for the golden weights and for
// dummy weights (each rank fills its slice of the unsharded dummy model).
TEST(LladaMoeTensorParallel, RanksEqualOneForGoldenAndDummyWeights) {
  Loaded& l = loaded();
  const std::vector<int32_t> x = ids("L33");
  const std::vector<float> one = full_logits(*l.backend, l.model, {x});
  for (int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    TpGroup g = load_tp_group(moe_dir(), world);
    EXPECT_EQ(g.models[0].weights.layers[0].ff_out.numel(), 8 * 256 * 128 / world)
        << "each rank holds 1/world of every expert's [256, 128] down projection";
    std::vector<std::vector<float>> got(static_cast<size_t>(world));
    g.run([&](int r) { got[static_cast<size_t>(r)] = full_logits(*g.backends[r], g.models[r], {x}); });
    for (const auto& v : got) EXPECT_LE(rel_max_err(v, one), kTpFp32LogitRelTol);
  }
  TpGroup d1 = load_tp_group(moe_dir(), 1, 1, /*dummy=*/true, 5), d2 = load_tp_group(moe_dir(), 2, 1, true, 5);
  std::vector<float> dummy_one;
  std::vector<std::vector<float>> dummy_two(2);
  d1.run([&](int) { dummy_one = full_logits(*d1.backends[0], d1.models[0], {x}); });
  d2.run([&](int r) { dummy_two[static_cast<size_t>(r)] = full_logits(*d2.backends[r], d2.models[r], {x}); });
  for (const auto& v : dummy_two) EXPECT_LE(rel_max_err(v, dummy_one), kTpFp32LogitRelTol);
  // The expert width must divide: 128 columns cannot go to 3 ranks (3 does not divide the 4 heads either).
  ModelConfig c = l.model.config;
  c.n_heads = c.n_kv_heads = 6;
  expect_error(
      [&] {
        model_shard(c, {0, 3, nullptr});
      },
      ErrorCode::kInvalidArgument, {"tensor parallel size 3", "the expert width = 128", "of every expert"});
}

// ------------------------------------------------------------------------------------ MoE ops

/// The naive MoE FFN of one row (double accumulation of each expert's products).
std::vector<double> naive_moe_row(const float* x, const std::vector<int32_t>& ids, const std::vector<float>& w,
                                  const std::vector<float>& gu, const std::vector<float>& dn, int64_t D, int64_t F) {
  std::vector<double> y(static_cast<size_t>(D), 0.0);
  for (size_t j = 0; j < ids.size(); ++j) {
    const int64_t e = ids[j];
    std::vector<double> a(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < D; ++i) {
        g += static_cast<double>(x[i]) * gu[static_cast<size_t>((e * 2 * F + f) * D + i)];
        u += static_cast<double>(x[i]) * gu[static_cast<size_t>((e * 2 * F + F + f) * D + i)];
      }
      a[static_cast<size_t>(f)] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t i = 0; i < D; ++i) {
      double s = 0;
      for (int64_t f = 0; f < F; ++f) s += a[static_cast<size_t>(f)] * dn[static_cast<size_t>((e * D + i) * F + f)];
      y[static_cast<size_t>(i)] += w[j] * s;
    }
  }
  return y;
}

Tensor host(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kF32, DeviceKind::kCPU, dims);
}
Tensor host_i(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kI32, DeviceKind::kCPU, dims);
}

TEST(MoeOps, RouteAndExpertsMatchANaiveReference) {
  auto be = make_cpu_backend(2);
  const int64_t T = 9, D = 24, F = 10, E = 6, k = 2;
  std::mt19937 rng(5);
  std::normal_distribution<float> n01(0.f, 1.f);
  auto fill = [&](std::vector<float>& v, float s) {
    for (float& x : v) x = n01(rng) * s;
  };
  std::vector<float> x(T * D), gu(E * 2 * F * D), dn(E * D * F), logits(T * E);
  fill(x, 1.f);
  fill(gu, 0.3f);
  fill(dn, 0.3f);
  fill(logits, 2.f);
  for (int64_t t = 0; t < T; ++t) logits[static_cast<size_t>(t * E + 3)] = -50.f;  // expert 3: no row
  for (int64_t t = 0; t < 4; ++t) logits[static_cast<size_t>(t * E + 5)] = 40.f;   // rows 0-3 all on expert 5
  for (bool renorm : {false, true}) {
    MoeRouting r;
    r.n_experts = E;
    r.top_k = k;
    r.renormalize = renorm;
    std::vector<int32_t> ids(T * k);
    std::vector<float> w(T * k), out(T * D, 1.f), scratch(Backend::moe_scratch_elements(T, k, E, D, F));
    be->moe_route(host(logits, {T, E}), Tensor{}, r, host_i(ids, {T, k}), host(w, {T, k}));
    for (int64_t t = 0; t < T; ++t) {
      // Reference routing: softmax in double, the two largest (the lower index first on ties).
      std::vector<double> p(E);
      double m = -1e300, s = 0;
      for (int64_t e = 0; e < E; ++e) m = std::max(m, static_cast<double>(logits[t * E + e]));
      for (int64_t e = 0; e < E; ++e) s += p[e] = std::exp(logits[t * E + e] - m);
      std::vector<int32_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
      const double sum = renorm ? (p[order[0]] + p[order[1]]) / s : 1.0;
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(ids[t * k + j], order[j]) << "row " << t;
        EXPECT_NEAR(w[t * k + j], p[order[j]] / s / sum, 1e-6) << "row " << t;
      }
      EXPECT_NE(ids[t * k], 3);
      if (t < 4) {
        EXPECT_EQ(ids[t * k], 5);
      }
    }
    be->moe_experts(host(x, {T, D}), host_i(ids, {T, k}), host(w, {T, k}), host(gu, {E, 2 * F, D}), host(dn, {E, D, F}),
                    host(out, {T, D}), /*accumulate=*/true, host(scratch, {static_cast<int64_t>(scratch.size())}));
    std::vector<float> want(T * D);
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<int32_t> row_ids(ids.begin() + t * k, ids.begin() + (t + 1) * k);
      const std::vector<float> row_w(w.begin() + t * k, w.begin() + (t + 1) * k);
      const std::vector<double> y = naive_moe_row(&x[t * D], row_ids, row_w, gu, dn, D, F);
      for (int64_t i = 0; i < D; ++i) want[t * D + i] = static_cast<float>(1.0 + y[i]);
    }
    EXPECT_LE(rel_max_err(out, want), kFp32OpRelTol);
  }
  // An expert id outside [0, E) is refused naming the op.
  std::vector<int32_t> bad(T * k, 0);
  bad[3] = static_cast<int32_t>(E);
  std::vector<float> w(T * k, 0.5f), out(T * D), scratch(Backend::moe_scratch_elements(T, k, E, D, F));
  expect_error(
      [&] {
        be->moe_experts(host(x, {T, D}), host_i(bad, {T, k}), host(w, {T, k}), host(gu, {E, 2 * F, D}),
                        host(dn, {E, D, F}), host(out, {T, D}), false,
                        host(scratch, {static_cast<int64_t>(scratch.size())}));
      },
      ErrorCode::kInvalidArgument, {"moe_experts", "expert id 6"});
  // Routing switches beyond softmax top-k: tests/model/test_moe_routing.cpp (LLaDA2's gate).
}

// ------------------------------------------------------------------------------------ forward

class LladaMoeGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(LladaMoeGolden, LogitsMatchUpstreamFp32) {
  Loaded& l = loaded();
  const std::string key = GetParam();
  const std::vector<int32_t> x = ids(key);
  const std::vector<float> want = f32_tensor(fx("logits." + key));
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

INSTANTIATE_TEST_SUITE_P(Sequences, LladaMoeGolden, ::testing::Values("L7", "L33", "L64", "L130"),
                         [](const auto& info) { return info.param; });

// Layer i's router: a forward of the first i + 1 layers (every row a logits row, so the last layer
// runs whole) leaves that layer's router logits and routing in the workspace.
TEST(LladaMoeGoldenRouter, RouterLogitsExpertsAndWeightsMatchUpstream) {
  Loaded& l = loaded();
  Model& m = l.model;
  const std::vector<int32_t> x = ids("L33");
  const ForwardBatch fb = full_recompute_batch({x});
  const int64_t T = fb.n_tokens(), E = m.config.moe.n_experts, k = m.config.moe.top_k;
  const int64_t all = m.config.n_layers;
  for (int64_t i = 0; i < all; ++i) {
    m.config.n_layers = i + 1;
    KvStore kv = make_kv_store(*l.backend, m.config, T, /*shared_across_layers=*/true);
    ForwardWorkspace ws = make_forward_workspace(*l.backend, m.config, T, T, 1);
    model_forward(*l.backend, m, fb, kv, ws);
    l.backend->synchronize();
    m.config.n_layers = all;
    const std::string layer = ".L33.layer" + std::to_string(i);
    const std::vector<float> logits(ws.router_logits.ptr<float>(), ws.router_logits.ptr<float>() + T * E);
    EXPECT_LE(rel_max_err(logits, f32_tensor(fx("router_logits" + layer))), kFp32LogitRelTol) << "layer " << i;
    const std::vector<int32_t> want_ids = i64_tensor_as_i32(fx("router_topk_experts" + layer));
    const std::vector<int32_t> got_ids(ws.expert_ids.ptr<int32_t>(), ws.expert_ids.ptr<int32_t>() + T * k);
    EXPECT_EQ(got_ids, want_ids) << "layer " << i;
    const std::vector<float> w(ws.expert_weights.ptr<float>(), ws.expert_weights.ptr<float>() + T * k);
    EXPECT_LE(rel_max_err(w, f32_tensor(fx("router_topk_weights" + layer))), kFp32LogitRelTol) << "layer " << i;
  }
}

TEST(LladaMoeGoldenHidden, FinalNormMatchesUpstream) {
  Loaded& l = loaded();
  const std::vector<int32_t> x = ids("L33");
  const ForwardBatch fb = full_recompute_batch({x});
  const int64_t T = fb.n_tokens(), D = l.model.config.d_model;
  KvStore kv = make_kv_store(*l.backend, l.model.config, T, true);
  ForwardWorkspace ws = make_forward_workspace(*l.backend, l.model.config, T, T, 1);
  model_forward(*l.backend, l.model, fb, kv, ws);
  const std::vector<float> sel(ws.sel.ptr<float>(), ws.sel.ptr<float>() + T * D);
  EXPECT_LE(rel_max_err(sel, f32_tensor(fx("hidden.L33." + std::to_string(l.model.config.n_layers)))),
            kFp32LogitRelTol);
}

// A sequence's MoE rows do not depend on its batch mates (routing and expert groups per batch). Not
// bit for bit: OpenBLAS blocks its GEMMs by row count (33 rows alone, 97 with the mate; each expert's
// group differs too), which moves the last bits on some CPUs (an AMD EPYC here). A mate that changed
// a row's routing or expert group would move whole logits, far beyond the fp32 bound.
TEST(LladaMoeForward, BatchMatesDoNotChangeARow) {
  Loaded& l = loaded();
  const std::vector<int32_t> a = ids("L33"), b = ids("L64");
  const std::vector<float> alone = full_logits(*l.backend, l.model, {a});
  const std::vector<float> both = full_logits(*l.backend, l.model, {b, a});
  const size_t off = b.size() * static_cast<size_t>(l.model.config.embedding_size);
  const std::vector<float> in_batch(both.begin() + static_cast<std::ptrdiff_t>(off), both.end());
  ASSERT_EQ(in_batch.size(), alone.size());
  const double err = rel_max_err(in_batch, alone);
  EXPECT_LE(err, kFp32OpRelTol);
  std::printf("row alone vs with a batch mate: rel max err %.2e\n", err);
}

// The verify pass over a kept range whose other positions come from a full forward's K/V cache
// gives the full forward's logits (QK-norm and the MoE FFN on the verify path).
TEST(LladaMoeVerify, KeptRowsOverAFullCacheEqualTheFullForward) {
  Loaded& l = loaded();
  EXPECT_LE(verify_vs_full_forward(*l.backend, l.model, ids("L64"), 20, 37), kFp32OpRelTol);
}

TEST(LladaMoeDummy, DummyWeightsRunAndInfoDescribesTheFamily) {
  auto be = make_cpu_backend(1);
  Model m;
  m.config = load_model_config(moe_dir() / "config.json");
  m.weights = make_dummy_weights(*be, m.config, 7);
  m.rope = make_rope_tables(*be, m.config, 256);
  ASSERT_EQ(m.weights.layers[0].w_gate_up.ndim, 3);
  EXPECT_EQ(m.weights.layers[0].router.rows(), 8);
  const std::vector<float> lg = full_logits(*be, m, {ids("L7")});
  EXPECT_TRUE(std::all_of(lg.begin(), lg.end(), [](float v) { return std::isfinite(v); }));
  const ModelFacts f = inspect_checkpoint(moe_dir());
  const std::string info = describe_model(f, *be);
  for (const char* part : {"LLaDA-MoE (model_type llada)", "experts           8, top-2", "softmax",
                           "QK-norm           yes", "active parameters"})
    EXPECT_NE(info.find(part), std::string::npos) << "lacks '" << part << "':\n" << info;
}

}  // namespace
}  // namespace flashdllm::test
