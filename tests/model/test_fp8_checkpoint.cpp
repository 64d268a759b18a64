// Block-FP8 checkpoints and precision options (model_checkpoint.h, model.h, flashdllm/precision.h) on
// the embedded small model (d_model 256, 2 heads of 128, mlp 768, vocabulary 2368):
//  * config.json's quantization_config: each bad field refused naming `quantization_config.<field>`;
//  * an FP8 copy of the checkpoint written here (linear weights F8_E4M3 with `*.weight_scale_inv`,
//    as Hugging Face stores them) loads to exactly the weights --quantization fp8 makes from the BF16
//    original, and gives the same logits; an F8_E4M3 LM head (2368 rows: a partial last block) loads
//    with its ceil-div scale grid; a missing or misshapen scale tensor, or F8 without the config, is
//    refused naming the tensor;
//  * --kv-cache-dtype fp8: every K store value is an e4m3 value (scale 1.0), and the verify pass
//    (gathered cached rows + fresh tile K/V) agrees with the full forward as in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "core/fp8.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

/// Writes a safetensors file (header length, JSON header padded to 8 bytes, data).
void write_safetensors(const fs::path& path, const std::vector<OutTensor>& ts) {
  json h = json::object();
  size_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string head = h.dump();
  head.resize((head.size() + 7) / 8 * 8, ' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = head.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(head.data(), static_cast<std::streamsize>(head.size()));
  for (const auto& t : ts) f.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
}

template <class T>
std::vector<char> bytes_of(const std::vector<T>& v) {
  std::vector<char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct Fp8CopyOptions {
  bool fp8_head = false;      // quantise the LM head too
  std::string drop;           // leave this tensor out
  std::string reshape_scale;  // give this scale tensor a wrong shape
  bool config = true;         // write quantization_config
};

/// A copy of the small model whose linear weights are F8_E4M3 + F32 `*_scale_inv` (quantize_fp8_blocks).
fs::path fp8_copy(const Fp8CopyOptions& o) {
  const fs::path src = test::default_model_dir(), dir = test::temp_dir();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"})
    fs::create_symlink(src / f, dir / f);
  json cfg = test::load_json(src / "config.json");
  if (o.config)
    cfg["quantization_config"] = {
        {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"}};
  std::ofstream(dir / "config.json") << cfg.dump(2);
  const ModelConfig c = load_model_config(src / "config.json");
  const Checkpoint ckpt = Checkpoint::open(src);
  std::vector<OutTensor> out;
  for (int64_t i = 0; i < model_expected_tensor_count(c); ++i) {
    const ExpectedTensor e = model_expected_tensor(c, i);
    const TensorInfo& t = ckpt.get(e.name);
    const bool quantise = fp8_linear_role(e.role) || (o.fp8_head && e.role == WeightRole::kLmHead);
    if (!quantise) {
      const auto* p = static_cast<const char*>(t.data);
      out.push_back({e.name, t.dtype, t.shape, std::vector<char>(p, p + t.nbytes)});
      continue;
    }
    const int64_t N = t.shape[0], K = t.shape[1];
    std::vector<float> w(static_cast<size_t>(N * K)), s(static_cast<size_t>(fp8_blocks(N) * fp8_blocks(K)));
    std::vector<uint8_t> q(w.size());
    convert_to_f32(t.dtype, t.data, w.data(), w.size());
    quantize_fp8_blocks(w.data(), N, K, q.data(), s.data());
    out.push_back({e.name, DType::kF8E4M3, t.shape, bytes_of(q)});
    const std::string sn = fp8_scale_name(e.name);
    std::vector<int64_t> sshape{fp8_blocks(N), fp8_blocks(K)};
    if (sn == o.reshape_scale) sshape = {fp8_blocks(K), fp8_blocks(N)};
    if (sn != o.drop) out.push_back({sn, DType::kF32, sshape, bytes_of(s)});
  }
  write_safetensors(dir / "model.safetensors", out);
  return dir;
}

Fp8CopyOptions with_head() {
  Fp8CopyOptions o;
  o.fp8_head = true;
  return o;
}
Fp8CopyOptions dropping(const std::string& name) {
  Fp8CopyOptions o;
  o.drop = name;
  return o;
}
Fp8CopyOptions reshaping(const std::string& name) {
  Fp8CopyOptions o;
  o.reshape_scale = name;
  return o;
}
Fp8CopyOptions without_config() {
  Fp8CopyOptions o;
  o.config = false;
  return o;
}

json small_config() { return test::load_json(test::default_model_dir() / "config.json"); }

TEST(Fp8Config, BadQuantizationConfigIsNamed) {
  const std::string src = "cfg.json";
  auto with = [&](json q) {
    json j = small_config();
    j["quantization_config"] = std::move(q);
    return j;
  };
  const json good = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  EXPECT_TRUE(parse_model_config(with(good), src).fp8_checkpoint);
  EXPECT_FALSE(parse_model_config(small_config(), src).fp8_checkpoint);
  json bad = good;
  bad["weight_block_size"] = {64, 128};
  test::expect_error([&] { parse_model_config(with(bad), src); }, ErrorCode::kInvalidCheckpoint,
                     {src, "quantization_config.weight_block_size", "[64,128]"});
  bad.erase("weight_block_size");
  test::expect_error([&] { parse_model_config(with(bad), src); }, ErrorCode::kInvalidCheckpoint,
                     {"quantization_config.weight_block_size"});
  bad = good;
  bad["quant_method"] = "gptq";
  test::expect_error([&] { parse_model_config(with(bad), src); }, ErrorCode::kUnsupported,
                     {"quantization_config.quant_method", "gptq"});
  bad = good;
  bad["activation_scheme"] = "static";
  test::expect_error([&] { parse_model_config(with(bad), src); }, ErrorCode::kInvalidCheckpoint,
                     {"quantization_config.activation_scheme", "static"});
  bad = good;
  bad["fmt"] = "e5m2";
  test::expect_error([&] { parse_model_config(with(bad), src); }, ErrorCode::kInvalidCheckpoint,
                     {"quantization_config.fmt"});
  test::expect_error([&] { parse_model_config(with(json::array()), src); }, ErrorCode::kInvalidCheckpoint,
                     {"'quantization_config' must be an object"});
}

/// The raw bytes of a tensor on the CPU backend.
std::vector<char> raw(const Tensor& t) {
  const auto* p = static_cast<const char*>(t.data);
  return std::vector<char>(p, p + t.nbytes());
}

TEST(Fp8Checkpoint, LoadsAsQuantisingAtLoadDoes) {
  auto be = make_cpu_backend(2);
  const fs::path dir = fp8_copy({});
  const Model stored = test::load_model(*be, dir);
  const Model made = test::load_model(*be, test::default_model_dir(), {}, {WeightQuantization::kFp8});
  const Model fp32 = test::load_model(*be, test::default_model_dir());
  ASSERT_TRUE(stored.weights.fp8_layers && made.weights.fp8_layers);
  for (size_t l = 0; l < stored.weights.layers.size(); ++l) {
    const LayerWeights &a = stored.weights.layers[l], &b = made.weights.layers[l];
    EXPECT_EQ(a.wqkv.dtype, DType::kF8E4M3);
    EXPECT_EQ(a.wqkv_scale.rows(), 6);  // q | k | v: 256 rows each, 2 blocks each
    for (auto [x, y] : {std::pair{&a.wqkv, &b.wqkv},
                        {&a.wqkv_scale, &b.wqkv_scale},
                        {&a.attn_out, &b.attn_out},
                        {&a.attn_out_scale, &b.attn_out_scale},
                        {&a.w_gate_up, &b.w_gate_up},
                        {&a.w_gate_up_scale, &b.w_gate_up_scale},
                        {&a.ff_out, &b.ff_out},
                        {&a.ff_out_scale, &b.ff_out_scale}})
      ASSERT_EQ(raw(*x), raw(*y)) << "layer " << l;
  }
  EXPECT_EQ(stored.weights.lm_head.dtype, DType::kF32);  // unquantised in both
  EXPECT_LT(stored.weights.bytes, fp32.weights.bytes);
  const std::vector<std::vector<int32_t>> seqs = {{5, 17, 300, 2304, 2304, 9, 2304, 41}, {100, 2304, 7}};
  const std::vector<float> a = test::full_logits(*be, stored, seqs), b = test::full_logits(*be, made, seqs);
  const std::vector<float> ref = test::full_logits(*be, fp32, seqs);
  EXPECT_EQ(a, b);
  // 13 layers of W8A8 products (2^-4 per factor): the logits move by a few percent of their range
  // (measured 0.043), far above fp32 noise and far below a broken scale (O(1)).
  const double err = test::rel_max_err(a, ref);
  std::cout << "FP8 weights: logits rel max err vs fp32 " << err << "\n";
  EXPECT_GT(err, 1e-4);
  EXPECT_LT(err, 0.15);
}

TEST(Fp8Checkpoint, Fp8LmHeadHasAPartialBlock) {
  auto be = make_cpu_backend(2);
  const Model m = test::load_model(*be, fp8_copy(with_head()));
  ASSERT_EQ(m.weights.lm_head.dtype, DType::kF8E4M3);
  EXPECT_EQ(m.weights.lm_head_scale.rows(), 19);  // ceil(2368 / 128)
  EXPECT_EQ(m.weights.lm_head_scale.row_size(), 2);
  const Model fp32 = test::load_model(*be, test::default_model_dir());
  const std::vector<std::vector<int32_t>> seqs = {{5, 17, 300, 2304, 2304, 9}};
  const double err = test::rel_max_err(test::full_logits(*be, m, seqs), test::full_logits(*be, fp32, seqs));
  std::cout << "FP8 weights and LM head: logits rel max err vs fp32 " << err << "\n";
  EXPECT_GT(err, 1e-4);
  EXPECT_LT(err, 0.15);
}

TEST(Fp8Checkpoint, MissingOrMisshapenScalesAreNamed) {
  auto be = make_cpu_backend(1);
  const std::string scale = "model.transformer.blocks.3.ff_out.weight_scale_inv";
  test::expect_error([&] { test::load_model(*be, fp8_copy(dropping(scale))); }, ErrorCode::kInvalidCheckpoint,
                     {"missing tensor '" + scale + "'", "model.transformer.blocks.3.ff_out.weight", "[2, 6]"});
  const std::string ds = "model.transformer.blocks.0.ff_out.weight_scale_inv";  // [256, 768]: blocks [2, 6]
  test::expect_error([&] { test::load_model(*be, fp8_copy(reshaping(ds))); }, ErrorCode::kInvalidCheckpoint,
                     {ds, "has shape [6, 2]", "needs [2, 6]"});
  test::expect_error([&] { test::load_model(*be, fp8_copy(without_config())); }, ErrorCode::kInvalidCheckpoint,
                     {"F8_E4M3", "quantization_config"});
}

TEST(Fp8Precision, FusedMatricesNeedWholeBlocks) {
  auto be = make_cpu_backend(1);
  ModelConfig c = load_model_config(test::default_model_dir() / "config.json");
  c.mlp_hidden_size = 700;  // gate | up would not start the up rows on a block boundary
  test::expect_error([&] { make_dummy_weights(*be, c, 1, {}, {WeightQuantization::kFp8}); }, ErrorCode::kUnsupported,
                     {"mlp_hidden_size = 700", "multiples of 128"});
}

// --load-format dummy with --quantization fp8: every linear weight is the fp32 dummy weight's block
// quantisation (the values the benchmarks of an 8B shape run on), the other tensors are unchanged.
TEST(Fp8Precision, DummyWeightsAreTheQuantisedDummyWeights) {
  auto be = make_cpu_backend(1);
  const ModelConfig c = load_model_config(test::default_model_dir() / "config.json");
  const ModelWeights w8 = make_dummy_weights(*be, c, 7, {}, {WeightQuantization::kFp8});
  const ModelWeights w32 = make_dummy_weights(*be, c, 7);
  ASSERT_TRUE(w8.fp8_layers);
  auto expect_quantised = [&](const Tensor& q, const Tensor& scale, const Tensor& ref, const char* what) {
    ASSERT_EQ(q.dtype, DType::kF8E4M3) << what;
    const int64_t N = ref.rows(), K = ref.row_size();
    std::vector<uint8_t> want(static_cast<size_t>(N * K));
    std::vector<float> want_scale(static_cast<size_t>(fp8_blocks(N) * fp8_blocks(K)));
    quantize_fp8_blocks(ref.ptr<float>(), N, K, want.data(), want_scale.data());
    EXPECT_EQ(0, std::memcmp(q.data, want.data(), want.size())) << what;
    EXPECT_EQ(0, std::memcmp(scale.data, want_scale.data(), want_scale.size() * sizeof(float))) << what;
  };
  for (size_t i : {size_t{0}, w8.layers.size() - 1}) {
    const auto &l8 = w8.layers[i], &l32 = w32.layers[i];
    expect_quantised(l8.wqkv, l8.wqkv_scale, l32.wqkv, "wqkv");
    expect_quantised(l8.attn_out, l8.attn_out_scale, l32.attn_out, "attn_out");
    expect_quantised(l8.w_gate_up, l8.w_gate_up_scale, l32.w_gate_up, "w_gate_up");
    expect_quantised(l8.ff_out, l8.ff_out_scale, l32.ff_out, "ff_out");
    EXPECT_EQ(0, std::memcmp(l8.attn_norm.data, l32.attn_norm.data, l32.attn_norm.nbytes()));
  }
  EXPECT_EQ(w8.lm_head.dtype, DType::kF32) << "the LM head stays unquantised";
  EXPECT_EQ(0, std::memcmp(w8.lm_head.data, w32.lm_head.data, w32.lm_head.nbytes()));
  EXPECT_EQ(0, std::memcmp(w8.wte.data, w32.wte.data, w32.wte.nbytes()));
}

TEST(Fp8KvCache, StoredRowsAreE4m3AndEveryPathReadsThem) {
  auto be = make_cpu_backend(2);
  const Model m = test::load_model(*be, test::default_model_dir(), {}, {WeightQuantization::kNone, KvCacheDtype::kFp8});
  const Model fp32 = test::load_model(*be, test::default_model_dir());
  ASSERT_TRUE(m.weights.fp8_kv);
  ASSERT_EQ(m.weights.layers[0].kv_scale.numel(), 4);  // K heads then V heads
  const std::vector<int32_t> x = {5, 17, 300, 2304, 2304, 9, 2304, 41, 66, 2304, 2304, 12};
  std::vector<float> last_k;
  const std::vector<float> got = test::forward_logits(*be, m, test::full_recompute_batch({x}), &last_k);
  ASSERT_FALSE(last_k.empty());
  for (float v : last_k) ASSERT_EQ(e4m3_round(v, 1.0f), v) << "a K value that is not an e4m3 value";
  const double err = test::rel_max_err(got, test::full_logits(*be, fp32, {x}));
  std::cout << "FP8 K/V: logits rel max err vs fp32 " << err << "\n";
  EXPECT_GT(err, 1e-6);
  EXPECT_LT(err, 0.15);
  // The verify pass reads rounded cached rows and rounds its own fresh K/V the same way: it agrees
  // with the full forward as closely as the fp32 engine does (different summation orders only).
  EXPECT_LE(test::verify_vs_full_forward(*be, m, x, 3, 7), 10 * test::kFp32OpRelTol);
}

}  // namespace
}  // namespace flashdllm
