// The LLaDA family's config.json (reference §A.1): parse_model_config's "llada" branch.
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
#include <cstring>
#include <limits>

#include "core/log.h"
#include "model/config_reader.h"

namespace flashdllm::model_detail {

namespace {

// The architecture keys (absent -> LLaDA ModelConfig default, then validated): every switch this
// engine does not implement is refused naming the key, never ignored.
void check_architecture(FieldReader& r, const json& j, const std::string& src) {
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
  FDLLM_CHECK_CKPT(!qkv_bias,
                   "{}: unsupported include_qkv_bias = true (supported: false; q/k/v biases are not implemented)", src);
  const bool ln_bias = r.boolean_or("bias_for_layer_norm", include_bias);
  FDLLM_CHECK_CKPT(
      !ln_bias, "{}: unsupported bias_for_layer_norm = true (supported: false; layer norm biases are not implemented)",
      src);
  const bool mqa = r.boolean_or("multi_query_attention", false);
  FDLLM_CHECK_CKPT(!mqa, "{}: unsupported multi_query_attention = true (supported: false or null; no GQA/MQA)", src);
  const int64_t group = r.integer_or("block_group_size", 1);
  FDLLM_CHECK_CKPT(group == 1, "{}: unsupported block_group_size = {} (supported: 1)", src, group);
  // Position-encoding extensions found in modified LLaDA configs: reject rather than ignore.
  FDLLM_CHECK_CKPT(r.find("rope_scaling") == nullptr,
                   "{}: unsupported rope_scaling = {} (supported: null; RoPE scaling is not implemented)", src,
                   j.contains("rope_scaling") ? j["rope_scaling"].dump() : "");
  FDLLM_CHECK_CKPT(!r.boolean_or("yarn", false),
                   "{}: unsupported yarn = true (supported: false; YaRN is not implemented)", src);
  if (!r.boolean_or("rope_full_precision", true))
    logger().warn("{}: rope_full_precision = false; this engine always applies RoPE in fp32", src);
}

}  // namespace

ModelConfig parse_llada_config(const json& j, const std::string& source) {
  const std::string& src = source;
  FDLLM_CHECK_CKPT(j.is_object(), "{}: config must be a JSON object", src);
  FieldReader r(j, src, "LLaDA's ModelConfig");
  ModelConfig c;
  c.family = ModelFamily::kLlada;

  // Model family and block type.
  c.model_type = r.string("model_type");  // "llada" (parse_model_config dispatched on it)
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
  c.max_sequence_length = r.positive("max_sequence_length");

  // Numerics.
  c.rope_theta = r.number("rope_theta");
  FDLLM_CHECK_CKPT(c.rope_theta > 0.0, "{}: field 'rope_theta' = {} must be positive", src, c.rope_theta);
  const double eps = r.number_or("rms_norm_eps", 1e-5);
  check_sizes_and_eps(c, src, "max_sequence_length", "rms_norm_eps", eps);

  // Special ids.
  c.mask_token_id = token_id(c, src, "mask_token_id", r.integer("mask_token_id"));
  c.eos_token_id = token_id(c, src, "eos_token_id", r.integer("eos_token_id"));
  c.pad_token_id = token_id(c, src, "pad_token_id", r.integer_or("pad_token_id", c.eos_token_id));
  return c;
}

}  // namespace flashdllm::model_detail
