// The LLaDA-MoE family's config.json: parse_model_config's "llada" branch for LLaDAMoEModelLM
// (model_config.h lists the keys).
//
// Sources: LLaDAConfig (configuration_lladamoe.py, InfiniTensor/InfiniLM @ eb8d0ff; the hub file,
// as dInfer's tools/ copy) for the keys and their defaults, and the upstream forward
// (modeling_lladamoe.py, InfiniLM @ 0a7e522, OLMoE's layout) for what the keys really do. The real
// LLaDA-MoE-7B-A1B config.json could not be read (docs/decisions.md says what is assumed). Policy,
// as for Dream:
//  * Sizes, the RoPE base and eos are required; LLaDAConfig's -1 defaults describe no model.
//  * Keys whose class default would break or change the upstream forward are required or refused
//    by name: partial_rotary_factor must be 1.0 (the default -1 gives a negative rotary width),
//    moe_layer_freq must mark every layer MoE (dense layers are not implemented), a shared expert,
//    an expert bias, clip_qkv, RoPE scaling and attention biases are refused.
//  * Keys the upstream block ignores are ignored here too: it hard-codes norm_topk_prob = False and
//    a softmax router and never reads routed_scaling_factor or router_num_group / router_topk_group
//    (a warning where the config claims otherwise).
//  * The mask id is not in the real config.json (the model card passes generate(mask_id=156895));
//    a `mask_token_id` key, when present, wins (the golden checkpoint has one).
#include <string>

#include "core/log.h"
#include "model/config_reader.h"

namespace flashdllm::model_detail {

namespace {

/// The model card's mask id of LLaDA-MoE-7B-A1B (the Ling tokenizer's <|mask|>).
constexpr int64_t kLladaMoeMaskId = 156895;

/// What the upstream forward would compute differently, or cannot compute: refused by name.
void check_unsupported(const FieldReader& r, const json& j, const std::string& src) {
  const std::string act = r.string_or("hidden_act", "silu");
  FDLLM_CHECK_CKPT(act == "silu", "{}: unsupported hidden_act '{}' (supported: \"silu\", the SwiGLU experts)", src,
                   act);
  const auto dump = [&](const char* key) { return j.contains(key) ? j[key].dump() : std::string(); };
  FDLLM_CHECK_CKPT(r.find("rope_scaling") == nullptr,
                   "{}: unsupported rope_scaling = {} (supported: null; RoPE scaling is not implemented)", src,
                   dump("rope_scaling"));
  FDLLM_CHECK_CKPT(r.find("clip_qkv") == nullptr,
                   "{}: unsupported clip_qkv = {} (supported: null; q/k/v clipping is not implemented)", src,
                   dump("clip_qkv"));
  FDLLM_CHECK_CKPT(!r.boolean_or("attention_bias", false),
                   "{}: unsupported attention_bias = true (supported: false; attention biases are not implemented)",
                   src);
  FDLLM_CHECK_CKPT(!r.boolean_or("moe_router_enable_expert_bias", false),
                   "{}: unsupported moe_router_enable_expert_bias = true (supported: false or null; the upstream "
                   "block adds the bias to the routing probabilities, which is not implemented)",
                   src);
  // Absent = LLaDAConfig's -1, which the upstream layer would build as a shared expert of width -1.
  FDLLM_CHECK_CKPT(j.contains("shared_expert_intermediate_size") && j["shared_expert_intermediate_size"].is_null(),
                   "{}: unsupported shared_expert_intermediate_size = {} (supported: null; a shared expert is not "
                   "implemented{})",
                   src, dump("shared_expert_intermediate_size"),
                   j.contains("shared_expert_intermediate_size") ? "" : "; absent means LLaDAConfig's -1");
}

/// The keys the upstream block reads differently from their name: warned about, never applied.
void warn_ignored(const FieldReader& r, const std::string& src) {
  if (r.boolean_or("norm_topk_prob", false))
    logger().warn("{}: norm_topk_prob = true is ignored: LLaDA-MoE's block hard-codes no renormalisation", src);
  const std::string score = r.string_or("moe_router_score_function", "softmax");
  if (score != "softmax")
    logger().warn("{}: moe_router_score_function '{}' is ignored: LLaDA-MoE's block always uses softmax", src, score);
}

}  // namespace

ModelConfig parse_llada_moe_config(const json& j, const std::string& source) {
  const std::string& src = source;
  FieldReader r(j, src, "LLaDAConfig's");
  ModelConfig c;
  c.family = ModelFamily::kLladaMoe;
  c.model_type = r.string("model_type");  // "llada" (parse_model_config dispatched on it)
  check_unsupported(r, j, src);
  warn_ignored(r, src);

  // Sizes.
  c.d_model = r.positive("hidden_size");
  c.n_layers = r.positive("num_hidden_layers");
  c.n_heads = r.positive("num_attention_heads");
  c.n_kv_heads = r.integer_or("num_key_value_heads", c.n_heads);
  FDLLM_CHECK_CKPT(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0,
                   "{}: num_key_value_heads = {} does not divide num_attention_heads = {}", src, c.n_kv_heads,
                   c.n_heads);
  FDLLM_CHECK_CKPT(c.d_model % c.n_heads == 0, "{}: hidden_size = {} is not divisible by num_attention_heads = {}", src,
                   c.d_model, c.n_heads);
  c.head_dim = c.d_model / c.n_heads;
  FDLLM_CHECK_CKPT(c.head_dim % 2 == 0,
                   "{}: head_dim = hidden_size / num_attention_heads = {} is odd (RoPE rotates pairs; supported: even)",
                   src, c.head_dim);
  const json* prf = r.find("partial_rotary_factor");
  FDLLM_CHECK_CKPT(prf != nullptr && prf->is_number() && prf->get<double>() == 1.0,
                   "{}: unsupported partial_rotary_factor = {} (supported: 1.0, RoPE over the whole head; absent "
                   "means LLaDAConfig's -1, which breaks the upstream RoPE)",
                   src, prf != nullptr ? prf->dump() : std::string("absent"));
  c.mlp_hidden_size = r.positive("expert_intermediate_size");
  c.vocab_size = r.positive("vocab_size");
  c.embedding_size = c.vocab_size;  // embed_tokens and lm_head are [vocab_size, hidden_size]
  c.max_sequence_length = r.integer_or("max_position_embeddings", 4096);
  FDLLM_CHECK_CKPT(c.max_sequence_length > 0, "{}: field 'max_position_embeddings' = {} must be positive", src,
                   c.max_sequence_length);
  c.tied_head = r.boolean_or("tie_word_embeddings", false);
  c.qk_norm = r.boolean_or("qk_layernorm", false);  // None (the class default) -> no q/k norms

  // The mixture of experts: every layer's FFN (moe_layer_freq all non-zero).
  const int64_t experts = r.positive("num_experts"), top_k = r.positive("num_experts_per_tok");
  FDLLM_CHECK_CKPT(experts <= (int64_t{1} << 16), "{}: field 'num_experts' = {} is above the supported {}", src,
                   experts, int64_t{1} << 16);
  FDLLM_CHECK_CKPT(top_k <= experts, "{}: num_experts_per_tok = {} exceeds num_experts = {}", src, top_k, experts);
  const json* freq = r.find("moe_layer_freq");
  FDLLM_CHECK_CKPT(freq != nullptr && freq->is_array() && static_cast<int64_t>(freq->size()) == c.n_layers,
                   "{}: field 'moe_layer_freq' must list one entry per layer ({} layers; got {})", src, c.n_layers,
                   freq != nullptr ? freq->dump() : std::string("absent"));
  for (size_t i = 0; i < freq->size(); ++i)
    FDLLM_CHECK_CKPT((*freq)[i].is_number_integer() && (*freq)[i].get<int64_t>() != 0,
                     "{}: unsupported moe_layer_freq[{}] = {} (supported: every layer MoE, non-zero entries; dense "
                     "layers of dense_intermediate_size are not implemented)",
                     src, i, (*freq)[i].dump());
  c.moe.n_experts = static_cast<int32_t>(experts);
  c.moe.top_k = static_cast<int32_t>(top_k);
  c.moe.score = RouterScore::kSoftmax;  // LLaDAMoESparseMoeBlock: softmax, norm_topk_prob = False
  c.moe.renormalize = false;
  int64_t p = 0;
  FDLLM_CHECK_CKPT(!__builtin_mul_overflow(experts * 3, c.d_model * c.mlp_hidden_size, &p) && p < (int64_t{1} << 50),
                   "{}: sizes too large (num_experts {}, hidden_size {}, expert_intermediate_size {})", src, experts,
                   c.d_model, c.mlp_hidden_size);

  // Numerics.
  c.rope_theta = r.number("rope_theta");
  FDLLM_CHECK_CKPT(c.rope_theta > 0.0, "{}: field 'rope_theta' = {} must be positive", src, c.rope_theta);
  check_sizes_and_eps(c, src, "max_position_embeddings", "rms_norm_eps", r.number_or("rms_norm_eps", 1e-5));

  // Special ids.
  c.eos_token_id = token_id(c, src, "eos_token_id", r.integer("eos_token_id"));
  c.pad_token_id = token_id(c, src, "pad_token_id", r.integer_or("pad_token_id", c.eos_token_id));
  if (r.find("bos_token_id") != nullptr) c.bos_token_id = token_id(c, src, "bos_token_id", r.integer("bos_token_id"));
  const int64_t mask = r.integer_or("mask_token_id", kLladaMoeMaskId);
  FDLLM_CHECK_CKPT(mask >= 0 && mask < c.embedding_size,
                   "{}: mask_token_id = {}{} is outside [0, vocab_size = {}) (add the checkpoint's mask id as "
                   "'mask_token_id')",
                   src, mask, r.find("mask_token_id") ? "" : " (absent: the model card's id)", c.embedding_size);
  c.mask_token_id = static_cast<int32_t>(mask);
  check_mask_not_eos(c, src);
  return c;
}

}  // namespace flashdllm::model_detail
