// LLaDA checkpoint name/shape checks: the golden g1 checkpoint, the real LLaDA-8B and LLaDA-1.5
// indexes (validated without their weights), and malformed tiny checkpoints built in a temp dir.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "core/check.h"
#include "model/model_checkpoint.h"

namespace flashdllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kInstructDir = test::repo_data_dir() / "llada-8b-instruct";

void expect_error(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::printf("  error: %s\n", e.what());
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message lacks '" << p << "': " << e.what();
    }
    return;
  }
  ADD_FAILURE() << "no error thrown";
}

// A tiny config: d_model 8, 2 heads (head_dim 4), 2 layers, mlp 16, vocab 32 (+ 8 padding rows).
ModelConfig tiny_config() {
  json j = json::parse(std::ifstream(kInstructDir / "config.json"));
  j["d_model"] = 8;
  j["n_heads"] = 2;
  j["n_kv_heads"] = 2;
  j["n_layers"] = 2;
  j["mlp_hidden_size"] = 16;
  j["vocab_size"] = 32;
  j["embedding_size"] = 40;
  j["mask_token_id"] = 31;
  j["eos_token_id"] = 30;
  j["pad_token_id"] = 30;
  return parse_model_config(j, "tiny-config.json");
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Writes every expected tensor of `cfg` (zeros) into dir/model.safetensors, after `edit` may
// change the list (drop, reshape, retype, add).
void write_tiny(const fs::path& dir, const ModelConfig& cfg, DType dt,
                const std::function<void(std::vector<ExpectedTensor>&, std::vector<DType>&)>& edit = {}) {
  std::vector<ExpectedTensor> ts = model_expected_tensors(cfg);
  std::vector<DType> dts(ts.size(), dt);
  if (edit) edit(ts, dts);
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<TensorToWrite> w;
  bufs.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    bufs.emplace_back(static_cast<size_t>(numel(ts[i].shape)) * dtype_size(dts[i]), 0);
    w.push_back({ts[i].name, dts[i], ts[i].shape, bufs.back().data(), bufs.back().size()});
  }
  write_safetensors(dir / "model.safetensors", w, {{"format", "pt"}});
}

// ---------------------------------------------------------------------------------------------

TEST(LladaExpectedTensors, MatchReferenceA2) {
  const ModelConfig cfg = load_model_config(kInstructDir / "config.json");
  const auto ts = model_expected_tensors(cfg);
  ASSERT_EQ(ts.size(), 291u);  // 32 layers x 9 + wte + ln_f + ff_out
  std::set<std::string> names;
  int64_t params = 0;
  for (const auto& t : ts) {
    names.insert(t.name);
    params += numel(t.shape);
  }
  EXPECT_EQ(names.size(), ts.size());
  EXPECT_EQ(params, cfg.parameter_count());
  auto shape_of = [&](const std::string& n) {
    for (const auto& t : ts)
      if (t.name == n) return t.shape;
    ADD_FAILURE() << "no " << n;
    return std::vector<int64_t>{};
  };
  using S = std::vector<int64_t>;
  EXPECT_EQ(shape_of("model.transformer.wte.weight"), (S{126464, 4096}));
  EXPECT_EQ(shape_of("model.transformer.ff_out.weight"), (S{126464, 4096}));
  EXPECT_EQ(shape_of("model.transformer.ln_f.weight"), (S{4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.31.attn_norm.weight"), (S{4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.0.q_proj.weight"), (S{4096, 4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.7.k_proj.weight"), (S{4096, 4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.7.v_proj.weight"), (S{4096, 4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.7.attn_out.weight"), (S{4096, 4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.12.ff_norm.weight"), (S{4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.12.ff_proj.weight"), (S{12288, 4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.12.up_proj.weight"), (S{12288, 4096}));
  EXPECT_EQ(shape_of("model.transformer.blocks.12.ff_out.weight"), (S{4096, 12288}));
}

TEST(LladaCheckpoint, GoldenG1) {
  const fs::path dir = test::golden_dir();
  const ModelConfig cfg = load_model_config(dir / "config.json");
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_FALSE(ck.sharded());
  validate_model_checkpoint(ck, cfg);
  EXPECT_EQ(ck.names().size(), model_expected_tensors(cfg).size());
  EXPECT_EQ(ck.total_bytes(), static_cast<size_t>(cfg.parameter_count()) * 4);
  using S = std::vector<int64_t>;
  const int64_t d = cfg.d_model, f = cfg.mlp_hidden_size, v = cfg.embedding_size;  // G1: 256, 512, 1024
  const std::string last = "model.transformer.blocks." + std::to_string(cfg.n_layers - 1) + ".";
  EXPECT_EQ(ck.get("model.transformer.wte.weight").shape, (S{v, d}));
  EXPECT_EQ(ck.get("model.transformer.ff_out.weight").shape, (S{v, d}));
  EXPECT_EQ(ck.get(last + "ff_out.weight").shape, (S{d, f}));
  EXPECT_EQ(ck.get(last + "ff_proj.weight").shape, (S{f, d}));
  EXPECT_EQ(ck.get("model.transformer.blocks.0.q_proj.weight").shape, (S{cfg.n_heads * cfg.head_dim, d}));
  EXPECT_EQ(ck.get("model.transformer.ln_f.weight").shape, (S{d}));
  for (const std::string& n : ck.names()) EXPECT_EQ(ck.get(n).dtype, DType::kF32) << n;
}

TEST(LladaIndex, RealInstructIndex) {
  const ModelConfig cfg = load_model_config(kInstructDir / "config.json");
  const fs::path index = kInstructDir / "model.safetensors.index.json";
  EXPECT_EQ(validate_model_index(index, cfg), 2);
  const json j = json::parse(std::ifstream(index));
  EXPECT_EQ(j["weight_map"].size(), 291u);
  EXPECT_EQ(j["metadata"]["total_size"].get<uint64_t>(), 16031162368u);
  std::set<std::string> shards;
  for (const auto& [name, shard] : j["weight_map"].items()) shards.insert(shard.get<std::string>());
  EXPECT_EQ(shards.size(), 6u);
}

TEST(LladaIndex, RealLlada15IndexWithInstructConfig) {
  // LLaDA 1.5 has the Instruct architecture (reference §A.1/A.4); its third-party config is not
  // used, the Instruct config is.
  const ModelConfig cfg = load_model_config(kInstructDir / "config.json");
  EXPECT_EQ(validate_model_index(test::repo_data_dir() / "llada-1.5" / "model.safetensors.index.json", cfg), 2);
}

TEST(LladaIndex, FourBytesPerParameter) {
  const ModelConfig cfg = tiny_config();
  const fs::path p = test::temp_dir() / "model.safetensors.index.json";
  json j;
  for (const auto& t : model_expected_tensors(cfg)) j["weight_map"][t.name] = "model-1.safetensors";
  j["metadata"]["total_size"] = 4 * cfg.parameter_count();
  std::ofstream(p) << j.dump();
  EXPECT_EQ(validate_model_index(p, cfg), 4);
}

class LladaIndexMalformed : public ::testing::Test {
 protected:
  // The real index, edited, written to a temp file.
  fs::path write(const std::function<void(json&)>& edit) {
    json j = json::parse(std::ifstream(kInstructDir / "model.safetensors.index.json"));
    edit(j);
    const fs::path p = test::temp_dir() / "model.safetensors.index.json";
    std::ofstream(p) << j.dump();
    return p;
  }
  ModelConfig cfg_ = load_model_config(kInstructDir / "config.json");
};

TEST_F(LladaIndexMalformed, MissingTensor) {
  const fs::path p = write([](json& j) { j["weight_map"].erase("model.transformer.blocks.17.up_proj.weight"); });
  expect_error([&] { validate_model_index(p, cfg_); }, ErrorCode::kInvalidCheckpoint,
               {p.string(), "missing tensor 'model.transformer.blocks.17.up_proj.weight'"});
}

TEST_F(LladaIndexMalformed, UnexpectedTensor) {
  const fs::path p = write([](json& j) {
    j["weight_map"]["model.transformer.blocks.0.q_proj.bias"] = "model-00001-of-00006.safetensors";
  });
  expect_error([&] { validate_model_index(p, cfg_); }, ErrorCode::kInvalidCheckpoint,
               {p.string(), "unexpected tensor 'model.transformer.blocks.0.q_proj.bias'"});
}

TEST_F(LladaIndexMalformed, WrongTotalSize) {
  const fs::path p = write([](json& j) { j["metadata"]["total_size"] = 16031162368 + 2; });
  expect_error([&] { validate_model_index(p, cfg_); }, ErrorCode::kInvalidCheckpoint,
               {p.string(), "total_size = 16031162370", "16031162368"});
}

TEST_F(LladaIndexMalformed, MissingTotalSize) {
  const fs::path p = write([](json& j) { j.erase("metadata"); });
  expect_error([&] { validate_model_index(p, cfg_); }, ErrorCode::kInvalidCheckpoint, {p.string(), "metadata"});
}

TEST_F(LladaIndexMalformed, ConfigOfAnotherSize) {
  // A 33-layer config does not match the 32-layer index: the first missing block-32 tensor is named.
  ModelConfig big = cfg_;
  big.n_layers = 33;
  const fs::path p = kInstructDir / "model.safetensors.index.json";
  expect_error([&] { validate_model_index(p, big); }, ErrorCode::kInvalidCheckpoint,
               {p.string(), "missing tensor 'model.transformer.blocks.32.attn_norm.weight'"});
}

// ---------------------------------------------------------------------------------------------
// validate_model_checkpoint on tiny checkpoints

TEST(LladaCheckpoint, TinyValidInEveryWeightDtype) {
  const ModelConfig cfg = tiny_config();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    const fs::path dir = test::temp_dir();
    write_tiny(dir, cfg, dt);
    const Checkpoint ck = Checkpoint::open(dir);
    EXPECT_NO_THROW(validate_model_checkpoint(ck, cfg)) << dtype_name(dt);
    EXPECT_EQ(ck.total_bytes(), static_cast<size_t>(cfg.parameter_count()) * dtype_size(dt));
  }
}

TEST(LladaCheckpoint, TinyValidSharded) {
  const ModelConfig cfg = tiny_config();
  const fs::path dir = test::temp_dir();
  const auto ts = model_expected_tensors(cfg);
  json idx;
  uint64_t total = 0;
  std::vector<std::vector<TensorToWrite>> shards(3);
  std::vector<std::vector<uint16_t>> bufs;
  bufs.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    bufs.emplace_back(static_cast<size_t>(numel(ts[i].shape)), uint16_t{0x3f80});
    shards[(i * 7) % 3].push_back({ts[i].name, DType::kBF16, ts[i].shape, bufs.back().data(), bufs.back().size() * 2});
    idx["weight_map"][ts[i].name] = "model-" + std::to_string((i * 7) % 3) + ".safetensors";
    total += bufs.back().size() * 2;
  }
  for (int s = 0; s < 3; ++s) write_safetensors(dir / ("model-" + std::to_string(s) + ".safetensors"), shards[s]);
  idx["metadata"]["total_size"] = total;
  std::ofstream(dir / "model.safetensors.index.json") << idx.dump();
  EXPECT_EQ(validate_model_index(dir / "model.safetensors.index.json", cfg), 2);
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.sharded());
  EXPECT_NO_THROW(validate_model_checkpoint(ck, cfg));
}

TEST(LladaCheckpointMalformed, MissingTensor) {
  const ModelConfig cfg = tiny_config();
  const fs::path dir = test::temp_dir();
  write_tiny(dir, cfg, DType::kBF16, [](auto& ts, auto& dts) {
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].name == "model.transformer.blocks.1.v_proj.weight") {
        ts.erase(ts.begin() + static_cast<long>(i));
        dts.erase(dts.begin() + static_cast<long>(i));
        break;
      }
  });
  const Checkpoint ck = Checkpoint::open(dir);
  expect_error(
      [&] { validate_model_checkpoint(ck, cfg); }, ErrorCode::kInvalidCheckpoint,
      {(dir / "model.safetensors").string(), "missing tensor 'model.transformer.blocks.1.v_proj.weight'", "[8, 8]"});
}

TEST(LladaCheckpointMalformed, ShapeMismatch) {
  const ModelConfig cfg = tiny_config();
  const fs::path dir = test::temp_dir();
  write_tiny(dir, cfg, DType::kBF16, [](auto& ts, auto&) {
    for (auto& t : ts)
      if (t.name == "model.transformer.blocks.0.ff_out.weight") t.shape = {16, 8};  // transposed
  });
  const Checkpoint ck = Checkpoint::open(dir);
  expect_error(
      [&] { validate_model_checkpoint(ck, cfg); }, ErrorCode::kInvalidCheckpoint,
      {(dir / "model.safetensors").string(), "'model.transformer.blocks.0.ff_out.weight'", "[16, 8]", "[8, 16]"});
}

TEST(LladaCheckpointMalformed, EmbeddingRowsMismatch) {
  const ModelConfig cfg = tiny_config();
  const fs::path dir = test::temp_dir();
  write_tiny(dir, cfg, DType::kBF16, [](auto& ts, auto&) {
    for (auto& t : ts)
      if (t.name == "model.transformer.wte.weight") t.shape = {32, 8};  // vocab_size rows, not embedding_size
  });
  const Checkpoint ck = Checkpoint::open(dir);
  expect_error([&] { validate_model_checkpoint(ck, cfg); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors", "'model.transformer.wte.weight'", "[32, 8]", "[40, 8]"});
}

TEST(LladaCheckpointMalformed, UnexpectedTensor) {
  const ModelConfig cfg = tiny_config();
  const fs::path dir = test::temp_dir();
  write_tiny(dir, cfg, DType::kBF16, [](auto& ts, auto& dts) {
    ts.push_back({"model.transformer.blocks.0.q_proj.bias", {8}});
    dts.push_back(DType::kBF16);
  });
  const Checkpoint ck = Checkpoint::open(dir);
  expect_error([&] { validate_model_checkpoint(ck, cfg); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors", "unexpected tensor 'model.transformer.blocks.0.q_proj.bias'"});
}

TEST(LladaCheckpointMalformed, UnsupportedWeightDtype) {
  const ModelConfig cfg = tiny_config();
  const fs::path dir = test::temp_dir();
  write_tiny(dir, cfg, DType::kBF16, [](auto& ts, auto& dts) {
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].name == "model.transformer.ln_f.weight") dts[i] = DType::kF64;
  });
  const Checkpoint ck = Checkpoint::open(dir);
  expect_error([&] { validate_model_checkpoint(ck, cfg); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors", "'model.transformer.ln_f.weight'", "F64"});
}

TEST(LladaCheckpointMalformed, GoldenAgainstTheWrongConfig) {
  const Checkpoint ck = Checkpoint::open(test::golden_dir());
  const ModelConfig g = load_model_config(test::golden_dir() / "config.json");
  expect_error([&] { validate_model_checkpoint(ck, load_model_config(kInstructDir / "config.json")); },
               ErrorCode::kInvalidCheckpoint,
               {(test::golden_dir() / "model.safetensors").string(), "'model.transformer.wte.weight'",
                "[" + std::to_string(g.embedding_size) + ", " + std::to_string(g.d_model) + "]", "[126464, 4096]"});
}

}  // namespace
}  // namespace flashdllm
