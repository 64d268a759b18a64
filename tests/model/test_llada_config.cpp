// LLaDA config.json parsing: the real LLaDA-8B config, the golden g1 config (extra keys), defaults,
// and one negative case per rejected option / malformed field (each checks the error code and that
// the message names the file, the field and the offending value).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "core/check.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kInstructConfig = test::repo_data_dir() / "llada-8b-instruct" / "config.json";

json load_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

TEST(ModelConfig, RealInstructConfig) {
  const ModelConfig c = load_model_config(kInstructConfig);
  EXPECT_EQ(c.model_type, "llada");
  EXPECT_EQ(c.block_type, "llama");
  EXPECT_EQ(c.d_model, 4096);
  EXPECT_EQ(c.n_layers, 32);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.mlp_hidden_size, 12288);
  EXPECT_EQ(c.vocab_size, 126464);
  EXPECT_EQ(c.embedding_size, 126464);
  EXPECT_EQ(c.max_sequence_length, 4096);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.mask_token_id, 126336);
  EXPECT_EQ(c.eos_token_id, 126081);
  EXPECT_EQ(c.pad_token_id, 126081);
  // Reference §A.2: 2*126464*4096 + 32*(4*4096^2 + 3*4096*12288 + 2*4096) + 4096.
  EXPECT_EQ(c.parameter_count(), 8015581184);
  EXPECT_EQ(2 * c.parameter_count(), 16031162368);
}

TEST(ModelConfig, GoldenConfigWithExtraKeys) {
  const fs::path p = test::golden_dir() / "config.json";
  ASSERT_TRUE(load_json(p).contains("golden_notes"));
  const ModelConfig c = load_model_config(p);
  // Every value as the file states it (G1: d_model 256, 3 layers, 2 heads, mlp 512, vocab 1024, mask
  // 1000, eos = pad 1001); the extra key golden_notes is ignored.
  const json j = load_json(p);
  EXPECT_EQ(c.d_model, j["d_model"].get<int64_t>());
  EXPECT_EQ(c.n_layers, j["n_layers"].get<int64_t>());
  EXPECT_EQ(c.n_heads, j["n_heads"].get<int64_t>());
  EXPECT_EQ(c.head_dim, c.d_model / c.n_heads);
  EXPECT_EQ(c.mlp_hidden_size, j["mlp_hidden_size"].get<int64_t>());
  EXPECT_EQ(c.vocab_size, j["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.embedding_size, j["embedding_size"].get<int64_t>());
  EXPECT_EQ(c.mask_token_id, j["mask_token_id"].get<int32_t>());
  EXPECT_EQ(c.eos_token_id, j["eos_token_id"].get<int32_t>());
  EXPECT_EQ(c.pad_token_id, j["pad_token_id"].get<int32_t>());
  if (j["golden_notes"].contains("special_ids")) {
    EXPECT_EQ(c.mask_token_id, j["golden_notes"]["special_ids"]["mask"].get<int32_t>());
    EXPECT_EQ(c.eos_token_id, j["golden_notes"]["special_ids"]["eos"].get<int32_t>());
  }
  const int64_t d = c.d_model, f = c.mlp_hidden_size;
  EXPECT_EQ(c.parameter_count(), 2 * c.embedding_size * d + c.n_layers * (4 * d * d + 3 * d * f + 2 * d) + d);
}

TEST(ModelConfig, NullableFieldsTakeTheirDefaults) {
  json j = load_json(kInstructConfig);
  j["n_kv_heads"] = nullptr;
  j["embedding_size"] = nullptr;
  j["mlp_hidden_size"] = nullptr;  // -> mlp_ratio (4) * d_model
  j.erase("pad_token_id");          // -> eos_token_id
  j.erase("rms_norm_eps");          // -> 1e-5
  j["multi_query_attention"] = false;
  j["include_qkv_bias"] = nullptr;
  j["bias_for_layer_norm"] = nullptr;  // -> include_bias (false)
  j["embedding_size"] = nullptr;
  const ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.n_kv_heads, 32);
  EXPECT_EQ(c.embedding_size, 126464);
  EXPECT_EQ(c.mlp_hidden_size, 4 * 4096);
  EXPECT_EQ(c.pad_token_id, 126081);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
}

TEST(ModelConfig, EmbeddingSizeLargerThanVocabIsAccepted) {
  json j = load_json(kInstructConfig);
  j["embedding_size"] = 126464 + 128;
  const ModelConfig c = parse_model_config(j, "cfg.json");
  EXPECT_EQ(c.embedding_size, 126592);
  EXPECT_EQ(c.vocab_size, 126464);
}

TEST(ModelConfig, ThirdPartyLlada15ConfigIsRejected) {
  // data/README.md: this copy was edited (rope: false, yarn ...); LLaDA 1.5 runs with the Instruct
  // architecture, and the engine must not silently accept a config without RoPE.
  const fs::path p = test::repo_data_dir() / "llada-1.5" / "config.third-party-modified.json";
  try {
    load_model_config(p);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidCheckpoint);
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rope"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, FileErrors) {
  const fs::path dir = test::temp_dir();
  try {
    load_model_config(dir / "absent.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find("absent.json"), std::string::npos);
  }
  std::ofstream(dir / "bad.json") << "{\"d_model\": 4096,";
  try {
    load_model_config(dir / "bad.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidCheckpoint);
    EXPECT_NE(std::string(e.what()).find((dir / "bad.json").string()), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// Negative cases: each mutates the real Instruct config and names what the message must contain
// (besides the source name, which every message must contain).

struct BadConfig {
  const char* name;
  std::function<void(json&)> mutate;
  std::vector<std::string> parts;
};

std::ostream& operator<<(std::ostream& os, const BadConfig& b) { return os << b.name; }

class ModelConfigRejects : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ModelConfigRejects, WithClearMessage) {
  const BadConfig& b = GetParam();
  json j = load_json(kInstructConfig);
  b.mutate(j);
  const std::string source = "/models/under-test/config.json";
  try {
    parse_model_config(j, source);
    FAIL() << b.name << ": accepted";
  } catch (const Error& e) {
    std::printf("  %s: %s\n", b.name, e.what());
    EXPECT_EQ(e.code(), ErrorCode::kInvalidCheckpoint) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find(source), std::string::npos) << "message lacks the file: " << msg;
    for (const std::string& p : b.parts) EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
  }
}

auto set(const char* key, json v) {
  return [key, v](json& j) { j[key] = v; };
}
auto erase(const char* key) {
  return [key](json& j) { j.erase(key); };
}

const BadConfig kBadConfigs[] = {
    // Family / block / functions.
    {"model_type_llama", set("model_type", "llama"), {"model_type", "'llama'", "supported: \"llada\""}},
    {"model_type_missing", erase("model_type"), {"missing required field 'model_type'"}},
    {"block_type_sequential", set("block_type", "sequential"), {"block_type", "'sequential'", "\"llama\""}},
    {"block_type_absent", erase("block_type"), {"block_type", "'sequential'", "absent"}},
    {"activation_swiglu", set("activation_type", "swiglu"), {"activation_type", "'swiglu'", "\"silu\""}},
    {"activation_gelu", set("activation_type", "gelu"), {"activation_type", "'gelu'"}},
    {"layer_norm_default", set("layer_norm_type", "default"), {"layer_norm_type", "'default'", "\"rms\""}},
    {"layer_norm_type_int", set("layer_norm_type", 1), {"layer_norm_type", "must be a string"}},
    // Unsupported switches.
    {"alibi", set("alibi", true), {"alibi = true", "ALiBi"}},
    {"alibi_string", set("alibi", "false"), {"alibi", "true or false", "\"false\""}},
    {"rope_false", set("rope", false), {"rope = false", "supported: true"}},
    {"rope_absent", erase("rope"), {"rope = false", "absent"}},
    {"include_bias", set("include_bias", true), {"include_bias = true", "supported: false"}},
    {"include_qkv_bias", set("include_qkv_bias", true), {"include_qkv_bias = true"}},
    {"bias_for_layer_norm", set("bias_for_layer_norm", true), {"bias_for_layer_norm = true"}},
    {"weight_tying", set("weight_tying", true), {"weight_tying = true", "tied"}},
    {"weight_tying_absent", erase("weight_tying"), {"weight_tying = true", "absent"}},
    {"attention_layer_norm", set("attention_layer_norm", true), {"attention_layer_norm = true"}},
    {"scale_logits", set("scale_logits", true), {"scale_logits = true"}},
    {"input_emb_norm", set("input_emb_norm", true), {"input_emb_norm = true"}},
    {"layer_norm_without_affine", set("layer_norm_with_affine", false), {"layer_norm_with_affine = false"}},
    {"block_group_size", set("block_group_size", 2), {"block_group_size = 2", "supported: 1"}},
    {"multi_query_attention", set("multi_query_attention", true), {"multi_query_attention = true"}},
    {"rope_scaling", set("rope_scaling", json{{"type", "linear"}, {"factor", 2.0}}), {"rope_scaling", "linear"}},
    {"yarn", set("yarn", true), {"yarn = true"}},
    // Sizes.
    {"gqa", set("n_kv_heads", 8), {"n_kv_heads = 8", "n_heads = 32"}},
    {"d_model_not_divisible", set("d_model", 4100), {"d_model = 4100", "n_heads = 32", "not divisible"}},
    {"head_dim_odd", set("d_model", 4000), {"head_dim", "125", "odd"}},
    {"d_model_zero", set("d_model", 0), {"'d_model' = 0", "positive"}},
    {"n_layers_negative", set("n_layers", -1), {"'n_layers' = -1", "positive"}},
    {"n_heads_zero", set("n_heads", 0), {"'n_heads' = 0"}},
    {"mlp_hidden_size_zero", set("mlp_hidden_size", 0), {"'mlp_hidden_size' = 0"}},
    {"vocab_size_zero", set("vocab_size", 0), {"'vocab_size' = 0"}},
    {"max_sequence_length_zero", set("max_sequence_length", 0), {"'max_sequence_length' = 0"}},
    // The RoPE tables are sized from it: 2^31 - 1 used to pass and then allocate 512 GB.
    {"max_sequence_length_huge",
     set("max_sequence_length", 2147483647),
     {"'max_sequence_length' = 2147483647", "above the supported"}},
    {"embedding_smaller_than_vocab", set("embedding_size", 1000), {"embedding_size = 1000", "vocab_size = 126464"}},
    {"d_model_missing", erase("d_model"), {"missing required field 'd_model'"}},
    {"n_layers_missing", erase("n_layers"), {"missing required field 'n_layers'"}},
    {"vocab_size_missing", erase("vocab_size"), {"missing required field 'vocab_size'"}},
    {"d_model_string", set("d_model", "4096"), {"'d_model'", "must be an integer", "\"4096\""}},
    {"d_model_float", set("d_model", 4096.5), {"'d_model'", "must be an integer", "4096.5"}},
    {"d_model_huge", set("d_model", uint64_t{1} << 63), {"'d_model'", "too large"}},
    {"sizes_overflow", [](json& j) { j["d_model"] = int64_t{1} << 40; j["n_heads"] = 1; j["n_kv_heads"] = 1; }, {"too large"}},
    // Numerics.
    {"rope_theta_missing", erase("rope_theta"), {"missing required field 'rope_theta'"}},
    {"rope_theta_zero", set("rope_theta", 0), {"'rope_theta' = 0"}},
    {"rope_theta_string", set("rope_theta", "500000"), {"'rope_theta'", "must be a number"}},
    {"rms_norm_eps_zero", set("rms_norm_eps", 0.0), {"'rms_norm_eps' = 0"}},
    // Found by fuzz_config: 1e-95 passed (0, 1) as a double and became 0 as the float the model uses.
    {"rms_norm_eps_float_underflow", set("rms_norm_eps", 1e-95), {"'rms_norm_eps' = 1e-95", "normal float32"}},
    // Special ids.
    {"mask_missing", erase("mask_token_id"), {"missing required field 'mask_token_id'"}},
    {"eos_missing", erase("eos_token_id"), {"missing required field 'eos_token_id'"}},
    {"mask_out_of_range", set("mask_token_id", 126464), {"'mask_token_id' = 126464", "embedding_size = 126464"}},
    {"eos_negative", set("eos_token_id", -1), {"'eos_token_id' = -1"}},
    {"pad_out_of_range", set("pad_token_id", 200000), {"'pad_token_id' = 200000"}},
    {"mask_float", set("mask_token_id", 126336.0), {"'mask_token_id'", "must be an integer"}},
    // Not an object at all.
    {"not_an_object", [](json& j) { j = json::array({1, 2}); }, {"must be a JSON object"}},
};

INSTANTIATE_TEST_SUITE_P(AllOptions, ModelConfigRejects, ::testing::ValuesIn(kBadConfigs),
                         [](const ::testing::TestParamInfo<BadConfig>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flashdllm
