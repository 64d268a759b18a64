// Checkpoint facts from metadata alone, their description, and the non-finite weight scan
// (see model_info.h).
#include "model/model_info.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "core/check.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "model/model_checkpoint.h"

namespace flashdllm {

namespace fs = std::filesystem;

void check_model_directory(const fs::path& dir) {
  std::error_code ec;
  FDLLM_CHECK(fs::is_directory(dir, ec), ErrorCode::kIo, "model directory '{}' {}", dir.string(),
              fs::exists(dir, ec) ? "is not a directory" : "does not exist");
}

ModelFacts inspect_checkpoint(const fs::path& dir, bool dummy_weights) {
  check_model_directory(dir);
  std::error_code ec;
  ModelFacts f;
  f.dir = dir;
  f.config = load_model_config(dir / "config.json");
  if (dummy_weights) {
    f.checkpoint_dtype = "random (dummy)";
  } else {
    const Checkpoint ckpt = Checkpoint::open(dir);  // headers only: the shards are mapped, not read
    validate_model_checkpoint(ckpt, f.config);
    f.checkpoint_dtype = checkpoint_dtype_summary(ckpt);
    f.checkpoint_bytes = ckpt.total_bytes();
  }
  if (std::optional<Tokenizer> found = Tokenizer::from_model_dir(dir)) {  // as Engine::load: or Qwen2's files
    const Tokenizer& tok = *found;
    validate_tokenizer(tok, f.config, Tokenizer::model_dir_source(dir));
    f.has_tokenizer = true;
    if (auto id = end_of_turn_id(tok, f.config)) f.eot_id = *id;
  }
  // As Engine::load: a missing or foreign template only matters when the chat template is asked for;
  // one the checkpoint asks for but this build cannot use is named.
  const ChatTemplateLookup chat = find_chat_template(dir);
  f.has_chat_template = chat.chat.has_value();
  if (chat.unusable) f.chat_template_problem = chat.error;
  return f;
}

std::string checkpoint_dtype_summary(const Checkpoint& ckpt) {
  std::map<std::string, int64_t> counts;
  for (const std::string& n : ckpt.names()) ++counts[dtype_name(ckpt.find(n)->dtype)];
  if (counts.size() == 1) return counts.begin()->first;
  std::string parts;
  for (const auto& [name, n] : counts) parts += fmt::format("{}{} x {}", parts.empty() ? "" : ", ", name, n);
  const TensorInfo* wte = ckpt.find("model.transformer.wte.weight");  // the embedding's dtype: LLaDA, else Dream
  if (wte == nullptr) wte = ckpt.find("model.embed_tokens.weight");
  return fmt::format("{} (mixed: {})", wte ? dtype_name(wte->dtype) : "?", parts);
}

namespace {

/// The "precision" lines of describe_model: weights and K/V cache.
std::string describe_precision(const ModelConfig& c, const ModelPrecision& p) {
  const bool fp8 = c.fp8_checkpoint || p.quantization == WeightQuantization::kFp8;
  std::string s = fmt::format(
      "precision         weights {}\n",
      !fp8 ? "as stored (no quantisation)"
      : c.fp8_checkpoint
          ? "block FP8 from the checkpoint (e4m3, 128 x 128 weight blocks, activations per token in 1 x 128 groups)"
          : "block FP8, quantised at load (--quantization fp8: e4m3, 128 x 128 weight blocks, activations per token "
            "in 1 x 128 groups; LM head unquantised)");
  s += fmt::format("                  K/V cache {}\n",
                   p.kv_cache_dtype == KvCacheDtype::kFp8
                       ? "fp8 (e4m3, static scale 1.0 per layer and K/V head; the CPU backend keeps the e4m3 values "
                         "in its fp32 store)"
                       : "auto (the activation dtype)");
  return s;
}

}  // namespace

std::string describe_model(const ModelFacts& f, const Backend& backend, int tensor_parallel,
                                 const std::string& backend_label) {
  const ModelConfig& c = f.config;
  const int64_t params = c.parameter_count();
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const size_t dev_bytes = model_weight_bytes(backend, c, {0, tensor_parallel, nullptr}, f.precision);
  std::string s;
  s += fmt::format("model directory   {}\n", f.dir.string());
  if (c.family == ModelFamily::kLlada)
    s += fmt::format("architecture      LLaDA ({} / {} block), bidirectional, RoPE theta {}\n", c.model_type,
                     c.block_type, c.rope_theta);
  else
    s += fmt::format("architecture      {} (model_type {}), bidirectional, RoPE theta {}\n", family_name(c.family),
                     c.model_type, c.rope_theta);
  s += fmt::format("d_model           {}\n", c.d_model);
  s += fmt::format("n_layers          {}\n", c.n_layers);
  s += fmt::format("n_heads           {} (head_dim {}, n_kv_heads {})\n", c.n_heads, c.head_dim, c.n_kv_heads);
  if (c.family != ModelFamily::kLlada) {  // LLaDA's lines stay as they were (scripts read them)
    s += fmt::format("attention         {}, q/k/v bias {}, {} LM head\n",
                     c.kv_group() > 1 ? fmt::format("GQA: {} query heads per K/V head", c.kv_group()) : "MHA",
                     c.qkv_bias ? "yes" : "no", c.tied_head ? "tied" : "untied");
    s += fmt::format("logit shift       {}\n", c.logit_shift ? "yes: position p is predicted by logits row p - 1 "
                                                                "(row 0 for p = 0)"
                                                              : "no");
  }
  if (c.qk_norm) s += "QK-norm           yes (per-head RMSNorm of q and k before RoPE)\n";
  if (c.moe.on()) {
    s += fmt::format("experts           {}, top-{} per token ({} router, {}renormalised), expert width {}\n",
                     c.moe.n_experts, c.moe.top_k, router_score_name(c.moe.score), c.moe.renormalize ? "" : "not ",
                     c.mlp_hidden_size);
  } else {
    s += fmt::format("mlp_hidden_size   {}\n", c.mlp_hidden_size);
  }
  s += fmt::format("vocab_size        {} (embedding_size {})\n", c.vocab_size, c.embedding_size);
  s += fmt::format("max_sequence_len  {}\n", c.max_sequence_length);
  s += fmt::format("special ids       mask {}, eos {}, pad {}, eot {}\n", c.mask_token_id, c.eos_token_id,
                   c.pad_token_id, f.eot_id);
  s += fmt::format("parameters        {} ({:.3f} B)\n", params, static_cast<double>(params) / 1e9);
  if (c.moe.on()) {
    const int64_t active = c.active_parameter_count();
    s += fmt::format(
        "active parameters {} ({:.3f} B per token: the top-{} experts, attention, norms, LM head; "
        "not the embedding matrix)\n",
        active, static_cast<double>(active) / 1e9, c.moe.top_k);
  }
  s += fmt::format("checkpoint dtype  {} ({:.3f} GiB on disk)\n", f.checkpoint_dtype,
                   static_cast<double>(f.checkpoint_bytes) / gib);
  s += fmt::format("backend           {}\n", backend_label.empty() ? backend.name() : backend_label);
  s += fmt::format("weights in memory {:.3f} GiB ({}){}\n", static_cast<double>(dev_bytes) / gib,
                   dtype_name(backend.weight_dtype()), tensor_parallel > 1 ? " per rank" : "");
  s += describe_precision(c, f.precision);
  // K and V of every layer, n_kv_heads heads each (Dream-7B at bf16: 56 KiB; LLaDA-8B: 512 KiB).
  const int64_t act = static_cast<int64_t>(dtype_size(backend.activation_dtype()));
  const int64_t kv_per_token = 2 * c.n_layers * c.kv_width() * act;
  auto kib = [](int64_t b) { return b % 1024 == 0 ? fmt::format(" = {} KiB", b / 1024) : std::string(); };
  s += fmt::format("KV cache / token  {} bytes{}{} (e.g. {:.3f} GiB for 32 slots x 1536 positions, all layers)\n",
                   kv_per_token, kib(kv_per_token),
                   act == 2 ? std::string() : fmt::format(" ({} bytes{} at bf16)", kv_per_token / act * 2,
                                                          kib(kv_per_token / act * 2)),
                   static_cast<double>(kv_per_token) * 32 * 1536 / gib);
  std::error_code ec;
  s += fmt::format("tokenizer         {}\n", !f.has_tokenizer                                     ? "none (token ids only)"
                                            : std::filesystem::exists(f.dir / "tokenizer.json", ec) ? "tokenizer.json"
                                                                                                   : "vocab.json + merges.txt (Qwen2 BPE)");
  s +=
      fmt::format("chat template     {}\n", f.has_chat_template               ? "the checkpoint's own (Jinja, tokenizer_config.json)"
                                            : f.chat_template_problem.empty() ? "none"
                                                                              : "unusable: " + f.chat_template_problem);
  return s;
}

namespace {

/// Counts NaN and ±Inf among `n` elements of `dtype` at `data` (possibly unaligned) by their bits.
template <typename Bits>
void scan_bits(const void* data, int64_t n, Bits exp_mask, Bits mant_mask, NonFiniteTensor& out) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (int64_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, p + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
    if ((b & exp_mask) != exp_mask) continue;
    if (out.first_index < 0) out.first_index = i;
    ((b & mant_mask) != 0 ? out.nan : out.inf) += 1;
  }
}

}  // namespace

std::vector<NonFiniteTensor> find_non_finite_weights(const Checkpoint& ckpt) {
  std::vector<NonFiniteTensor> out;
  for (const std::string& name : ckpt.names()) {
    const TensorInfo& t = *ckpt.find(name);
    NonFiniteTensor r{name, t.file};
    switch (t.dtype) {
      case DType::kF32: scan_bits<uint32_t>(t.data, t.numel(), 0x7f800000u, 0x007fffffu, r); break;
      case DType::kBF16: scan_bits<uint16_t>(t.data, t.numel(), 0x7f80u, 0x007fu, r); break;
      case DType::kF16: scan_bits<uint16_t>(t.data, t.numel(), 0x7c00u, 0x03ffu, r); break;
      default: continue;
    }
    if (r.first_index >= 0) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace flashdllm
