// Parsing and validation of a LLaDA config.json (reference §A.1).
//
// Policy (decided here, documented in model_config.h):
//  * Sizes and special token ids have no meaningful default: they are required.
//  * Architecture switches take the default of LLaDA's own `ModelConfig` dataclass
//    (configuration_llada.py, the class HF instantiates) when absent, exactly as the reference
//    loader does, and are then validated. Absent `weight_tying` therefore means "tied" and is
//    rejected, absent `rope` means "no RoPE" and is rejected, and so on.
//  * Keys this parser does not know are ignored (training-only options, "golden_notes", ...).
//  * activation_type must be "silu": LLaDA's llama block computes act(ff_proj x) * up_proj x, so
//    "silu" already gives SwiGLU. "swiglu" in that block would make the OLMo SwiGLU module split
//    ff_proj's output in halves and change ff_out's input width — a different network, rejected.
#include "model/model_config.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/log.h"
#include "io/file.h"

namespace flashdllm {

namespace {

using nlohmann::json;

class FieldReader {
 public:
  FieldReader(const json& j, const std::string& source) : j_(j), src_(source) {}

  /// The value of `key`, nullptr when absent or JSON null.
  const json* find(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  int64_t integer(const char* key) const {
    const json* v = find(key);
    FDLLM_CHECK_CKPT(v != nullptr, "{}: missing required field '{}'", src_, key);
    return as_integer(key, *v);
  }
  int64_t integer_or(const char* key, int64_t dflt) const {
    const json* v = find(key);
    return v ? as_integer(key, *v) : dflt;
  }
  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    FDLLM_CHECK_CKPT(v > 0, "{}: field '{}' = {} must be positive", src_, key, v);
    return v;
  }
  double number(const char* key) const {
    const json* v = find(key);
    FDLLM_CHECK_CKPT(v != nullptr, "{}: missing required field '{}'", src_, key);
    return as_number(key, *v);
  }
  double number_or(const char* key, double dflt) const {
    const json* v = find(key);
    return v ? as_number(key, *v) : dflt;
  }
  bool boolean_or(const char* key, bool dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    FDLLM_CHECK_CKPT(v->is_boolean(), "{}: field '{}' must be true or false (got {})", src_, key, v->dump());
    return v->get<bool>();
  }
  std::string string_or(const char* key, const char* dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    FDLLM_CHECK_CKPT(v->is_string(), "{}: field '{}' must be a string (got {})", src_, key, v->dump());
    return v->get<std::string>();
  }
  std::string string(const char* key) const {
    FDLLM_CHECK_CKPT(find(key) != nullptr, "{}: missing required field '{}'", src_, key);
    return string_or(key, "");
  }

  /// "absent; defaults to X" or "" — appended to messages about defaulted switches.
  std::string absent_note(const char* key) const {
    return find(key) ? std::string() : std::string(" (absent: LLaDA's ModelConfig default)");
  }

 private:
  int64_t as_integer(const char* key, const json& v) const {
    FDLLM_CHECK_CKPT(v.is_number_integer(), "{}: field '{}' must be an integer (got {})", src_, key, v.dump());
    FDLLM_CHECK_CKPT(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()},
                     "{}: field '{}' = {} is too large", src_, key, v.dump());
    return v.get<int64_t>();
  }
  double as_number(const char* key, const json& v) const {
    FDLLM_CHECK_CKPT(v.is_number(), "{}: field '{}' must be a number (got {})", src_, key, v.dump());
    const double d = v.get<double>();
    FDLLM_CHECK_CKPT(std::isfinite(d), "{}: field '{}' must be finite", src_, key);
    return d;
  }

  const json& j_;
  const std::string& src_;
};

// The architecture keys (absent -> LLaDA ModelConfig default, then validated): every switch this
// engine does not implement is refused naming the key, never ignored.
void check_architecture(FieldReader& r, const nlohmann::json& j, const std::string& src) {
  const std::string act = r.string_or("activation_type", "swiglu");
  FDLLM_CHECK_CKPT(act == "silu",
                   "{}: unsupported activation_type '{}'{} (supported: \"silu\", which with up_proj forms LLaDA's "
                   "SwiGLU MLP)",
                   src, act, r.absent_note("activation_type"));
  const std::string norm = r.string_or("layer_norm_type", "default");
  FDLLM_CHECK_CKPT(norm == "rms", "{}: unsupported layer_norm_type '{}'{} (supported: \"rms\")", src, norm,
                   r.absent_note("layer_norm_type"));

  struct Switch {
    const char* key;
    bool dflt;      // LLaDA ModelConfig default when absent
    bool required;  // the only value this engine implements
    const char* why;
  };
  const Switch switches[] = {
      {"alibi", false, false, "ALiBi position biases are not implemented; LLaDA uses RoPE"},
      {"rope", false, true, "RoPE is required; LLaDA uses RoPE and no other position encoding is implemented"},
      {"include_bias", false, false, "biases in linear layers are not implemented"},
      {"attention_layer_norm", false, false, "q/k layer norm is not implemented"},
      {"weight_tying", true, false, "tied embedding/LM head is not implemented; LLaDA has a separate ff_out"},
      {"scale_logits", false, false, "logit scaling is not implemented"},
      {"input_emb_norm", false, false, "input embedding norm is not implemented"},
      {"layer_norm_with_affine", true, true, "norms without a weight are not implemented"},
  };
  bool include_bias = false;
  for (const Switch& s : switches) {
    const bool v = r.boolean_or(s.key, s.dflt);
    FDLLM_CHECK_CKPT(v == s.required, "{}: unsupported {} = {}{} (supported: {}; {})", src, s.key, v,
                     r.absent_note(s.key), s.required, s.why);
    if (std::strcmp(s.key, "include_bias") == 0) include_bias = v;
  }
  // include_qkv_bias: Optional[bool] = False; bias_for_layer_norm: None -> include_bias.
  const bool qkv_bias = r.boolean_or("include_qkv_bias", false);
  FDLLM_CHECK_CKPT(!qkv_bias, "{}: unsupported include_qkv_bias = true (supported: false; q/k/v biases are not implemented)",
                   src);
  const bool ln_bias = r.boolean_or("bias_for_layer_norm", include_bias);
  FDLLM_CHECK_CKPT(!ln_bias,
                   "{}: unsupported bias_for_layer_norm = true (supported: false; layer norm biases are not implemented)",
                   src);
  const bool mqa = r.boolean_or("multi_query_attention", false);
  FDLLM_CHECK_CKPT(!mqa, "{}: unsupported multi_query_attention = true (supported: false or null; no GQA/MQA)", src);
  const int64_t group = r.integer_or("block_group_size", 1);
  FDLLM_CHECK_CKPT(group == 1, "{}: unsupported block_group_size = {} (supported: 1)", src, group);
  // Position-encoding extensions found in modified LLaDA configs: reject rather than ignore.
  FDLLM_CHECK_CKPT(r.find("rope_scaling") == nullptr,
                   "{}: unsupported rope_scaling = {} (supported: null; RoPE scaling is not implemented)", src,
                   j.contains("rope_scaling") ? j["rope_scaling"].dump() : "");
  FDLLM_CHECK_CKPT(!r.boolean_or("yarn", false), "{}: unsupported yarn = true (supported: false; YaRN is not implemented)",
                   src);
  if (!r.boolean_or("rope_full_precision", true))
    logger().warn("{}: rope_full_precision = false; this engine always applies RoPE in fp32", src);
}

}  // namespace

int64_t ModelConfig::parameter_count() const noexcept {
  const int64_t attn = 4 * d_model * d_model;         // q, k, v, attn_out (n_kv_heads == n_heads)
  const int64_t mlp = 3 * d_model * mlp_hidden_size;  // ff_proj, up_proj, ff_out
  const int64_t norms = 2 * d_model;                  // attn_norm, ff_norm
  return 2 * embedding_size * d_model + n_layers * (attn + mlp + norms) + d_model;
}

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source) {
  const std::string& src = source;
  FDLLM_CHECK_CKPT(j.is_object(), "{}: config must be a JSON object", src);
  FieldReader r(j, src);
  ModelConfig c;

  // Model family and block type.
  c.model_type = r.string("model_type");
  FDLLM_CHECK_CKPT(c.model_type == "llada", "{}: unsupported model_type '{}' (supported: \"llada\")", src,
                   c.model_type);
  c.block_type = r.string_or("block_type", "sequential");
  FDLLM_CHECK_CKPT(c.block_type == "llama", "{}: unsupported block_type '{}'{} (supported: \"llama\")", src,
                   c.block_type, r.absent_note("block_type"));

  check_architecture(r, j, src);

  // Sizes.
  c.d_model = r.positive("d_model");
  c.n_layers = r.positive("n_layers");
  c.n_heads = r.positive("n_heads");
  c.n_kv_heads = r.integer_or("n_kv_heads", c.n_heads);
  FDLLM_CHECK_CKPT(c.n_kv_heads == c.n_heads,
                   "{}: unsupported n_kv_heads = {} with n_heads = {} (supported: n_kv_heads == n_heads; no GQA/MQA)",
                   src, c.n_kv_heads, c.n_heads);
  FDLLM_CHECK_CKPT(c.d_model % c.n_heads == 0, "{}: d_model = {} is not divisible by n_heads = {}", src, c.d_model,
                   c.n_heads);
  c.head_dim = c.d_model / c.n_heads;
  FDLLM_CHECK_CKPT(c.head_dim % 2 == 0,
                   "{}: head_dim = d_model / n_heads = {} is odd (RoPE rotates pairs of dimensions; supported: even)",
                   src, c.head_dim);
  if (r.find("mlp_hidden_size") != nullptr) {
    c.mlp_hidden_size = r.positive("mlp_hidden_size");
  } else {  // null/absent: mlp_ratio * d_model, as LLaDA's block does
    const int64_t ratio = r.integer_or("mlp_ratio", 4);
    FDLLM_CHECK_CKPT(ratio > 0, "{}: field 'mlp_ratio' = {} must be positive", src, ratio);
    c.mlp_hidden_size = ratio * c.d_model;
  }
  c.vocab_size = r.positive("vocab_size");
  c.embedding_size = r.integer_or("embedding_size", c.vocab_size);
  FDLLM_CHECK_CKPT(c.embedding_size >= c.vocab_size, "{}: embedding_size = {} is smaller than vocab_size = {}", src,
                   c.embedding_size, c.vocab_size);
  FDLLM_CHECK_CKPT(c.embedding_size <= std::numeric_limits<int32_t>::max(),
                   "{}: embedding_size = {} does not fit 32-bit token ids", src, c.embedding_size);
  c.max_sequence_length = r.positive("max_sequence_length");
  FDLLM_CHECK_CKPT(c.max_sequence_length <= kMaxSequenceLength,
                   "{}: field 'max_sequence_length' = {} is above the supported {} (the RoPE tables and K/V stores "
                   "are sized from it)",
                   src, c.max_sequence_length, kMaxSequenceLength);

  // Guard the size products used by parameter_count() and the weight shapes.
  {
    constexpr int64_t kLimit = int64_t{1} << 50;  // far beyond any real model, far below overflow
    int64_t p = 0;
    const bool overflow = __builtin_mul_overflow(c.d_model, c.d_model, &p) || p > kLimit ||
                          __builtin_mul_overflow(c.d_model, c.mlp_hidden_size, &p) || p > kLimit ||
                          __builtin_mul_overflow(c.d_model, c.embedding_size, &p) || p > kLimit ||
                          c.n_layers > (int64_t{1} << 20);
    FDLLM_CHECK_CKPT(!overflow, "{}: sizes too large (d_model {}, mlp_hidden_size {}, embedding_size {}, n_layers {})",
                     src, c.d_model, c.mlp_hidden_size, c.embedding_size, c.n_layers);
  }

  // Numerics.
  c.rope_theta = r.number("rope_theta");
  FDLLM_CHECK_CKPT(c.rope_theta > 0.0, "{}: field 'rope_theta' = {} must be positive", src, c.rope_theta);
  const double eps = r.number_or("rms_norm_eps", 1e-5);
  // Used in float arithmetic: a positive value that rounds to 0 (or a subnormal) as a float is refused.
  FDLLM_CHECK_CKPT(eps >= std::numeric_limits<float>::min() && eps < 1.0,
                   "{}: field 'rms_norm_eps' = {} must be in (0, 1) and a normal float32 (>= {})", src, eps,
                   std::numeric_limits<float>::min());
  c.rms_norm_eps = static_cast<float>(eps);

  // Special ids.
  auto token_id = [&](const char* key, int64_t v) {
    FDLLM_CHECK_CKPT(v >= 0 && v < c.embedding_size, "{}: field '{}' = {} is outside [0, embedding_size = {})", src,
                     key, v, c.embedding_size);
    return static_cast<int32_t>(v);
  };
  c.mask_token_id = token_id("mask_token_id", r.integer("mask_token_id"));
  c.eos_token_id = token_id("eos_token_id", r.integer("eos_token_id"));
  c.pad_token_id = token_id("pad_token_id", r.integer_or("pad_token_id", c.eos_token_id));
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  return parse_model_config(read_json_file(path, /*reject_duplicate_keys=*/true), path.string());
}

}  // namespace flashdllm
