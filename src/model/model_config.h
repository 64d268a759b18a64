// ModelConfig: the architecture description of a checkpoint, parsed from the Hugging Face
// `config.json` exactly as users download it and dispatched on its `model_type` to one parser per
// family (LLaDA: family_llada.cpp, reference §A.1; Dream: family_dream.cpp; LLaDA-MoE:
// family_llada_moe.cpp). Everything the one
// forward function (model.h) and the weight map (model_checkpoint.h) need is a field here; nothing
// downstream asks which family it runs except where an algorithm differs (the samplers).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/moe_routing.h"

namespace flashdllm {

/// The longest max_sequence_length accepted (LLaDA: 4096; Dream: max_position_embeddings 131072).
/// The engine sizes its RoPE tables (and the position range of every request) from it, so a config
/// must not claim more than this.
inline constexpr int64_t kMaxSequenceLength = int64_t{1} << 17;

/// The model families this engine implements. A family fixes the weight map (tensor names), the
/// config keys and what its upstream modeling file hard-codes (e.g. Dream's q/k/v biases).
enum class ModelFamily {
  kLlada,  ///< model_type "llada": LLaDA-8B / LLaDA-1.5 (GSAI-ML), OLMo-style names
  kDream,  ///< model_type "Dream": Dream-v0 7B, DiffuCoder, Dream-Coder (Qwen2.5 layout)
  /// model_type "llada" with architectures LLaDAMoEModelLM (or, without architectures, a
  /// `num_experts` key): LLaDA-MoE-7B-A1B Base/Instruct (OLMoE layout, QK-norm, MoE FFNs)
  kLladaMoe,
};
/// "LLaDA" / "Dream". Inline: params.cpp names the family without linking the model library.
inline const char* family_name(ModelFamily f) noexcept {
  switch (f) {
    case ModelFamily::kDream: return "Dream";
    case ModelFamily::kLladaMoe: return "LLaDA-MoE";
    default: return "LLaDA";
  }
}
/// The model_type values parse_model_config accepts, as its error lists them.
const char* supported_model_types() noexcept;

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlada;
  int64_t d_model = 0;              // hidden size (LLaDA-8B 4096; Dream-7B 3584)
  int64_t n_layers = 0;             // 32; 28
  int64_t n_heads = 0;              // query heads: 32; 28
  int64_t n_kv_heads = 0;           // K/V heads (GQA when < n_heads; divides n_heads): 32; 4
  int64_t head_dim = 0;             // d_model / n_heads: 128; 128
  int64_t mlp_hidden_size = 0;      // gate/up width: 12288; 18944; MoE: each expert's (LLaDA-MoE 1024)
  int64_t vocab_size = 0;           // 126464; 152064
  int64_t embedding_size = 0;       // rows of the embedding and the LM head (>= vocab_size)
  int64_t max_sequence_length = 0;  // longest prompt + canvas the engine accepts: 4096; 131072
  double rope_theta = 0.0;          // 500000; 1e6
  float rms_norm_eps = 0.0f;        // 1e-5; 1e-6
  /// q/k/v projections carry biases, added after the projection and before RoPE (Dream: always,
  /// its attention hard-codes bias=True; LLaDA: never). The output projection has none.
  bool qkv_bias = false;
  /// The LM head is the embedding matrix (no separate head tensor in the checkpoint).
  bool tied_head = false;
  /// The model is trained to predict position p from the output row p - 1 (Dream: its sampler
  /// reads `cat([logits[:, :1], logits[:, :-1]])`). model_forward does NOT apply it: its row i is
  /// the model's raw output at query row i, exactly as upstream. A denoiser on a shifted model
  /// reads the logits of position p from the row of position p - 1 (the row of position 0 for
  /// p = 0), so that row must be among its logit rows (and a query row of the forward).
  bool logit_shift = false;
  /// Per-head RMSNorm of q and k (weights [head_dim] each, eps rms_norm_eps) after the projection and
  /// before RoPE (LLaDA-MoE's qk_layernorm; Backend::qkv_rope_store's QkvExtras).
  bool qk_norm = false;
  /// The FFN of every layer is a mixture of SwiGLU experts when moe.on(): moe.n_experts experts of
  /// width mlp_hidden_size, routed as core/moe_routing.h says (LLaDA-MoE-7B: 64 experts, top 8,
  /// softmax, no renormalisation). Off (n_experts 0): the dense SwiGLU MLP.
  MoeRouting moe;
  /// Width of a shared expert every token runs beside the routed ones (LLaDA2: 512); 0 = none.
  /// Parsed so that the switch exists; no family with one is implemented yet (refused).
  int64_t shared_expert_size = 0;
  /// The checkpoint stores block-FP8 linear weights (config.json `quantization_config` with
  /// quant_method "fp8", weight_block_size [128, 128], activation_scheme "dynamic"; Hugging Face's
  /// FP8 format): each linear weight F8_E4M3 with its `<name>_scale_inv` F32 [ceil(N/128),
  /// ceil(K/128)] beside it (model_checkpoint.h). Parsed for every family (parse_quantization_config).
  bool fp8_checkpoint = false;
  int32_t mask_token_id = -1;  // LLaDA 126336 (<|mdm_mask|>); Dream 151666 (<|mask|>)
  int32_t eos_token_id = -1;   // LLaDA 126081 (<|endoftext|>); Dream 151643 (<|endoftext|>)
  int32_t pad_token_id = -1;   // = eos in both
  int32_t bos_token_id = -1;   // Dream 151643; -1 when the config has none (LLaDA)
  /// End-of-turn id when config.json names one; -1 otherwise (LLaDA's <|eot_id|> and Dream's
  /// <|im_end|> come from the tokenizer, not from config.json).
  int32_t eot_token_id = -1;
  std::string model_type;  // as config.json spells it: "llada", "Dream"
  std::string block_type;  // LLaDA: "llama"; empty for other families

  /// Query heads per K/V head (1 without GQA; 7 for Dream-7B).
  int64_t kv_group() const noexcept { return n_kv_heads > 0 ? n_heads / n_kv_heads : 0; }
  /// Width of one K (or V) row of one layer: n_kv_heads · head_dim.
  int64_t kv_width() const noexcept { return n_kv_heads * head_dim; }

  /// Number of parameters implied by the shapes: embedding + blocks + final norm + LM head (none
  /// when tied), a block being q/o (d_model·H·Dh each), k/v (d_model·Hkv·Dh each), their biases,
  /// 3·d_model·mlp_hidden_size and 2 norms. LLaDA-8B: 8,015,581,184 (reference §A.2); Dream-7B:
  /// 7,615,616,512 (its index's total_size / 2).
  int64_t parameter_count() const noexcept;
  /// Parameters one token's forward uses (MoE: the "active" count of model cards): parameter_count
  /// without the embedding matrix (a token reads one row; with a tied head it is the LM head and
  /// counts) and without the n_experts − top_k experts a token does not run, per layer.
  /// LLaDA-MoE-7B-A1B (vocabulary 157184): 1,397,823,488 of 7,356,880,896. Dense: parameter_count
  /// minus the embedding.
  int64_t active_parameter_count() const noexcept;
};

/// Parses and validates a `config.json` object, dispatched on its `model_type` (required):
/// "llada" -> the LLaDA parser, "Dream" -> the Dream parser. `architectures`, when present, must
/// be a list of strings and may not name another family's architecture (LLaDAModelLM / DreamModel).
/// `source` names the file in messages.
///
/// LLaDA (family_llada.cpp). Required (error when absent or null): model_type, d_model, n_layers,
/// n_heads, vocab_size, max_sequence_length, rope_theta, mask_token_id, eos_token_id. Defaults:
/// n_kv_heads null/absent -> n_heads; embedding_size null/absent -> vocab_size; mlp_hidden_size
/// null/absent -> mlp_ratio (default 4) x d_model; pad_token_id -> eos_token_id; rms_norm_eps ->
/// 1e-5. Architecture switches take the default of LLaDA's own `ModelConfig` (configuration_llada.py)
/// when absent, as the reference loader does, and are then checked, so e.g. an absent
/// `weight_tying` means tied and is rejected. Supported values only: block_type "llama",
/// activation_type "silu" (LLaDA's gated MLP: silu(ff_proj x) * up_proj x; "swiglu" would make the
/// block split ff_proj's output in halves — a different network), layer_norm_type "rms", rope true,
/// alibi / include_bias / include_qkv_bias / bias_for_layer_norm / weight_tying /
/// attention_layer_norm / scale_logits / input_emb_norm / multi_query_attention false,
/// layer_norm_with_affine true, block_group_size 1, rope_scaling null, yarn false, n_kv_heads ==
/// n_heads, d_model % n_heads == 0 with an even head_dim, sizes > 0, embedding_size >= vocab_size
/// (and < 2^31), max_sequence_length <= kMaxSequenceLength, token ids in [0, embedding_size).
/// rope_full_precision false is accepted with a warning (RoPE is always computed in fp32).
///
/// Dream (family_dream.cpp; keys of Dream-org/Dream-v0-Instruct-7B/config.json, HF Qwen2 style).
/// Required: hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
/// intermediate_size, vocab_size, max_position_embeddings (-> max_sequence_length), rope_theta,
/// mask_token_id, eos_token_id. Defaults (DreamConfig's): rms_norm_eps 1e-6, tie_word_embeddings
/// false, hidden_act "silu"; pad_token_id -> eos_token_id; bos_token_id -> none. Supported values
/// only: hidden_act "silu", rope_scaling null, use_sliding_window false, use_mrope false,
/// attention_bias / mlp_bias absent or false (the upstream attention hard-codes q/k/v biases and no
/// o bias whatever they say; true would claim an o bias), head_dim absent or hidden_size /
/// num_attention_heads, num_attention_heads % num_key_value_heads == 0, plus the sizes, eps and
/// id checks above. qkv_bias and logit_shift are set; tied_head = tie_word_embeddings.
///
/// LLaDA-MoE (family_llada_moe.cpp; the keys of LLaDAConfig, configuration_lladamoe.py, model_type
/// "llada"; selected over LLaDA by architectures "LLaDAMoEModelLM" or, without architectures, by a
/// `num_experts` key). Required: hidden_size, num_hidden_layers, num_attention_heads, vocab_size,
/// rope_theta, num_experts, num_experts_per_tok, expert_intermediate_size, eos_token_id,
/// partial_rotary_factor (1.0: the class default -1 breaks upstream RoPE), moe_layer_freq (one
/// non-zero entry per layer: every FFN is MoE). Defaults (LLaDAConfig's): num_key_value_heads ->
/// num_attention_heads, max_position_embeddings 4096, rms_norm_eps 1e-5, qk_layernorm false,
/// tie_word_embeddings false, pad_token_id -> eos_token_id; mask_token_id (not in the real file)
/// -> 156895, the model card's. Refused: hidden_act other than "silu", rope_scaling, attention_bias
/// true, clip_qkv, shared_expert_intermediate_size other than null, moe_router_enable_expert_bias
/// true, dense layers (a 0 in moe_layer_freq). norm_topk_prob, moe_router_score_function,
/// routed_scaling_factor and router_*_group are ignored as the upstream block ignores them (softmax,
/// no renormalisation, scaling 1, no groups).
///
/// Other keys (training options, dropouts, "golden_notes", ...) are ignored. Throws
/// Error(kInvalidCheckpoint) whose message names `source`, the field and its value and says what
/// is supported (an unknown model_type: the value and supported_model_types()); integers must be
/// JSON integers (4096.0 is rejected), booleans JSON booleans, strings JSON strings.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);

/// Reads and parses `path` (a config.json). Throws Error(kIo) if unreadable,
/// Error(kInvalidCheckpoint) naming the file for invalid JSON, else as above.
/// Reads config.json's optional `quantization_config` into cfg.fp8_checkpoint (absent or null: off).
/// Present, it must be an object with quant_method "fp8" (Error(kUnsupported) naming the field for
/// another method), weight_block_size exactly [128, 128] and, when given, activation_scheme
/// "dynamic" and fmt "e4m3"; anything else is Error(kInvalidCheckpoint) naming
/// `quantization_config.<field>` and `source`. parse_model_config calls it for every family.
void parse_quantization_config(const nlohmann::json& j, const std::string& source, ModelConfig& cfg);

ModelConfig load_model_config(const std::filesystem::path& path);

}  // namespace flashdllm
