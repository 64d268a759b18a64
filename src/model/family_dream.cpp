// The Dream family's config.json: parse_model_config's "Dream" branch (model_config.h).
//
// Source: Dream-org/Dream-v0-Instruct-7B (configuration_dream.py's DreamConfig, modeling_dream.py;
// the copy read is monash-yann/dllm-research @ db71702, models/Dream-7B-Instruct/) and the real
// config.json of Dream-v0-Instruct-7B (docs/decisions.md). Policy, as for LLaDA:
//  * Sizes, the context length and the special ids are required: DreamConfig's defaults (a 4096 /
//    32-layer model, mask 151666) describe no real checkpoint, so an absent size is an error.
//  * Numerical switches take DreamConfig's defaults when absent (rms_norm_eps 1e-6,
//    tie_word_embeddings false) and are then validated; everything the upstream forward would do
//    differently (sliding windows, RoPE scaling, mrope, another activation) is refused by name.
//  * The attention's q/k/v biases are hard-coded in DreamAttention (bias=True; o_proj bias=False),
//    not read from the config: qkv_bias is always set. An `attention_bias` / `mlp_bias` key (some
//    derived configs carry one) is accepted when false and refused when true (it would claim an
//    o_proj or MLP bias the upstream code never builds).
//  * Dream predicts position i from output row i - 1 (generation_utils.py): logit_shift is set.
#include <string>

#include "model/config_reader.h"

namespace flashdllm::model_detail {

ModelConfig parse_dream_config(const json& j, const std::string& source) {
  const std::string& src = source;
  FieldReader r(j, src, "DreamConfig's");
  ModelConfig c;
  c.family = ModelFamily::kDream;
  c.model_type = r.string("model_type");  // "Dream" (parse_model_config dispatched on it)
  c.qkv_bias = true;
  c.logit_shift = true;

  // What the upstream forward would compute differently: refused, never ignored.
  const std::string act = r.string_or("hidden_act", "silu");
  FDLLM_CHECK_CKPT(act == "silu", "{}: unsupported hidden_act '{}' (supported: \"silu\", Dream's SwiGLU MLP)", src,
                   act);
  FDLLM_CHECK_CKPT(r.find("rope_scaling") == nullptr,
                   "{}: unsupported rope_scaling = {} (supported: null; RoPE scaling is not implemented)", src,
                   j.contains("rope_scaling") ? j["rope_scaling"].dump() : "");
  const struct {
    const char* key;
    const char* why;
  } switches[] = {
      {"use_sliding_window", "sliding-window attention is not implemented; Dream attends to the whole sequence"},
      {"use_mrope", "multimodal RoPE is not implemented"},
      {"attention_bias",
       "Dream's attention has q/k/v biases and no o_proj bias whatever this key says; true would "
       "claim an o_proj bias"},
      {"mlp_bias", "MLP biases are not implemented"},
  };
  for (const auto& s : switches)
    FDLLM_CHECK_CKPT(!r.boolean_or(s.key, false), "{}: unsupported {} = true (supported: false; {})", src, s.key,
                     s.why);

  // Sizes.
  c.d_model = r.positive("hidden_size");
  c.n_layers = r.positive("num_hidden_layers");
  c.n_heads = r.positive("num_attention_heads");
  c.n_kv_heads = r.positive("num_key_value_heads");
  FDLLM_CHECK_CKPT(c.n_heads % c.n_kv_heads == 0,
                   "{}: num_attention_heads = {} is not a multiple of num_key_value_heads = {} (grouped-query "
                   "attention shares each K/V head among a whole number of query heads)",
                   src, c.n_heads, c.n_kv_heads);
  FDLLM_CHECK_CKPT(c.d_model % c.n_heads == 0, "{}: hidden_size = {} is not divisible by num_attention_heads = {}", src,
                   c.d_model, c.n_heads);
  c.head_dim = c.d_model / c.n_heads;
  FDLLM_CHECK_CKPT(c.head_dim % 2 == 0,
                   "{}: head_dim = hidden_size / num_attention_heads = {} is odd (RoPE rotates pairs of dimensions; "
                   "supported: even)",
                   src, c.head_dim);
  const int64_t head_dim = r.integer_or("head_dim", c.head_dim);
  FDLLM_CHECK_CKPT(head_dim == c.head_dim,
                   "{}: unsupported head_dim = {} (supported: absent or hidden_size / num_attention_heads = {}, as "
                   "Dream's attention computes it)",
                   src, head_dim, c.head_dim);
  c.mlp_hidden_size = r.positive("intermediate_size");
  c.vocab_size = r.positive("vocab_size");
  c.embedding_size = c.vocab_size;  // embed_tokens and lm_head are [vocab_size, hidden_size]
  c.max_sequence_length = r.positive("max_position_embeddings");
  c.tied_head = r.boolean_or("tie_word_embeddings", false);

  // Numerics.
  c.rope_theta = r.number("rope_theta");
  FDLLM_CHECK_CKPT(c.rope_theta > 0.0, "{}: field 'rope_theta' = {} must be positive", src, c.rope_theta);
  check_sizes_and_eps(c, src, "max_position_embeddings", "rms_norm_eps", r.number_or("rms_norm_eps", 1e-6));

  // Special ids (config.json's mask_token_id is the one diffusion_generate uses: its generation
  // config is built from the model config, and the real generation_config.json has it null).
  c.mask_token_id = token_id(c, src, "mask_token_id", r.integer("mask_token_id"));
  c.eos_token_id = token_id(c, src, "eos_token_id", r.integer("eos_token_id"));
  c.pad_token_id = token_id(c, src, "pad_token_id", r.integer_or("pad_token_id", c.eos_token_id));
  if (r.find("bos_token_id") != nullptr) c.bos_token_id = token_id(c, src, "bos_token_id", r.integer("bos_token_id"));
  check_mask_not_eos(c, src);
  return c;
}

}  // namespace flashdllm::model_detail
