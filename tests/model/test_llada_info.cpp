// Checkpoint facts from metadata (model/model_info.h) and the tokenizer / config agreement check
// (validate_llada_tokenizer): `flashdllm info` must print what a fully loaded engine prints, and a
// tokenizer whose special tokens are not where config.json says is refused naming file and token.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "common/test_paths.h"
#include "core/dtype.h"
#include "flashdllm/engine.h"
#include "io/tokenizer.h"
#include "model/model_checkpoint.h"
#include "model/model_info.h"

namespace flashdllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/// The real LLaDA-8B config with the special ids and embedding size replaced.
ModelConfig config_with_ids(int32_t mask, int32_t eos, int32_t pad, int64_t embedding_size) {
  json j = json::parse(std::ifstream(test::repo_data_dir() / "llada-8b-instruct" / "config.json"));
  j["mask_token_id"] = mask;
  j["eos_token_id"] = eos;
  j["pad_token_id"] = pad;
  j["vocab_size"] = j["embedding_size"] = embedding_size;
  return parse_model_config(j, "config.json");
}

const fs::path kRealIds = test::test_data_dir() / "tokenizer" / "llada_realids.tokenizer.json";

TEST(LladaTokenizerCheck, RealLayoutAgreesWithTheRealConfig) {
  const Tokenizer tok = Tokenizer::from_file(kRealIds);
  const ModelConfig cfg = load_model_config(test::repo_data_dir() / "llada-8b-instruct" / "config.json");
  EXPECT_NO_THROW(validate_llada_tokenizer(tok, cfg, kRealIds));
  const Tokenizer small = Tokenizer::from_file(test::default_model_dir() / "tokenizer.json");
  EXPECT_NO_THROW(validate_llada_tokenizer(small, load_model_config(test::default_model_dir() / "config.json"),
                                           test::default_model_dir() / "tokenizer.json"));
}

TEST(LladaTokenizerCheck, SpecialIdsElsewhereAreRefusedNamingFileAndToken) {
  const Tokenizer tok = Tokenizer::from_file(kRealIds);
  const int32_t mask = *tok.token_to_id("<|mdm_mask|>"), eos = *tok.token_to_id("<|endoftext|>");
  const int64_t emb = 126464;
  const std::string f = kRealIds.string();
  test::expect_error([&] { validate_llada_tokenizer(tok, config_with_ids(mask - 1, eos, eos, emb), kRealIds); },
                     ErrorCode::kInvalidCheckpoint, {f, "'<|mdm_mask|>'", "mask_token_id"});
  test::expect_error([&] { validate_llada_tokenizer(tok, config_with_ids(mask, eos + 1, eos + 1, emb), kRealIds); },
                     ErrorCode::kInvalidCheckpoint, {f, "'<|endoftext|>'", "eos_token_id"});
  // pad on an ordinary vocabulary token, and on an id no token has (the gap 4365..126079).
  test::expect_error([&] { validate_llada_tokenizer(tok, config_with_ids(mask, eos, 5, emb), kRealIds); },
                     ErrorCode::kInvalidCheckpoint, {f, "pad_token_id = 5", "not a special token"});
  test::expect_error([&] { validate_llada_tokenizer(tok, config_with_ids(mask, eos, 100000, emb), kRealIds); },
                     ErrorCode::kInvalidCheckpoint, {f, "pad_token_id = 100000", "no token with that id"});
  // Every token id must index the embedding table: the last added token (<|eot_id|>) lies past it.
  const int32_t top = tok.vocab_size() - 1;
  test::expect_error([&] { validate_llada_tokenizer(tok, config_with_ids(mask, eos, eos, top), kRealIds); },
                     ErrorCode::kInvalidCheckpoint, {f, tok.id_to_token(top), "embedding_size"});
}

TEST(LladaInfo, MetadataDescriptionEqualsTheLoadedEngines) {
  for (const fs::path& dir : {test::golden_dir(), test::default_model_dir()}) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 1;
    const auto engine = Engine::load(eo);
    const auto backend = make_cpu_backend(1);
    EXPECT_EQ(describe_model(inspect_checkpoint(dir), *backend), engine->info()) << dir;
  }
  const ModelFacts dummy = inspect_checkpoint(test::golden_dir(), /*dummy_weights=*/true);
  EXPECT_EQ(dummy.checkpoint_dtype, "random (dummy)");
  EXPECT_EQ(dummy.checkpoint_bytes, 0u);
}

TEST(LladaInfo, MixedDtypesAreSummarised) {
  const fs::path dir = test::temp_dir();
  std::vector<uint8_t> zeros(64, 0);
  write_safetensors(dir / "model.safetensors", {{"model.transformer.wte.weight", DType::kBF16, {4}, zeros.data(), 8},
                                                {"a", DType::kBF16, {4}, zeros.data(), 8},
                                                {"b", DType::kF32, {4}, zeros.data(), 16}});
  EXPECT_EQ(checkpoint_dtype_summary(Checkpoint::open(dir)), "BF16 (mixed: BF16 x 2, F32 x 1)");
}

TEST(LladaInfo, NonFiniteScanCountsEveryFloatDtype) {
  const fs::path dir = test::temp_dir();
  const float f32[] = {1.f, std::numeric_limits<float>::infinity(), NAN, 0.f, -std::numeric_limits<float>::infinity()};
  const uint16_t bf16[] = {0x3f80, 0x7fc0 /*NaN*/, 0xff80 /*-Inf*/, 0x7f7f /*max finite*/};
  const uint16_t f16[] = {0x3c00, 0x7bff /*max finite*/, 0x7e00 /*NaN*/};
  const uint16_t fine[] = {0x3c00, 0x0001};
  write_safetensors(dir / "model.safetensors", {{"a_f32", DType::kF32, {5}, f32, sizeof f32},
                                                {"b_bf16", DType::kBF16, {4}, bf16, sizeof bf16},
                                                {"c_f16", DType::kF16, {3}, f16, sizeof f16},
                                                {"d_ok", DType::kF16, {2}, fine, sizeof fine}});
  const auto bad = find_non_finite_weights(Checkpoint::open(dir));
  ASSERT_EQ(bad.size(), 3u);
  EXPECT_EQ(bad[0].name, "a_f32");
  EXPECT_EQ(bad[0].nan, 1);
  EXPECT_EQ(bad[0].inf, 2);
  EXPECT_EQ(bad[0].first_index, 1);
  EXPECT_EQ(bad[1].name, "b_bf16");
  EXPECT_EQ(bad[1].nan, 1);
  EXPECT_EQ(bad[1].inf, 1);
  EXPECT_EQ(bad[1].first_index, 1);
  EXPECT_EQ(bad[2].name, "c_f16");
  EXPECT_EQ(bad[2].nan, 1);
  EXPECT_EQ(bad[2].inf, 0);
  EXPECT_EQ(bad[2].first_index, 2);
  EXPECT_EQ(bad[2].file, (dir / "model.safetensors").string());
}

}  // namespace
}  // namespace flashdllm
