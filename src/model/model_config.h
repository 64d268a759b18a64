// ModelConfig: the model hyper-parameters of a LLaDA checkpoint (reference §A.1), parsed from
// the Hugging Face `config.json` exactly as users download it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace flashdllm {

/// The longest max_sequence_length accepted (LLaDA: 4096). The engine sizes its RoPE tables (and
/// the position range of every request) from it, so a config must not claim more than this.
inline constexpr int64_t kMaxSequenceLength = int64_t{1} << 17;

struct ModelConfig {
  int64_t d_model = 0;              // hidden size (4096 for LLaDA-8B)
  int64_t n_layers = 0;             // 32
  int64_t n_heads = 0;              // 32
  int64_t n_kv_heads = 0;           // == n_heads (no GQA in LLaDA)
  int64_t head_dim = 0;             // d_model / n_heads (128)
  int64_t mlp_hidden_size = 0;      // gate/up width (12288)
  int64_t vocab_size = 0;           // 126464
  int64_t embedding_size = 0;       // rows of wte and the LM head (>= vocab_size)
  int64_t max_sequence_length = 0;  // 4096: longest prompt + canvas the engine accepts
  double rope_theta = 0.0;          // 500000
  float rms_norm_eps = 0.0f;        // 1e-5
  int32_t mask_token_id = -1;       // 126336 (<|mdm_mask|>)
  int32_t eos_token_id = -1;        // 126081 (<|endoftext|>), also the pad id
  int32_t pad_token_id = -1;
  std::string model_type;           // "llada"
  std::string block_type;           // "llama"

  /// Number of parameters implied by the shapes (embedding + blocks + final norm + LM head):
  /// 2 * embedding_size * d_model + n_layers * (4 d_model^2 + 3 d_model mlp_hidden_size +
  /// 2 d_model) + d_model (8,015,581,184 for LLaDA-8B, reference §A.2).
  int64_t parameter_count() const noexcept;
};

/// Parses and validates a LLaDA `config.json` object. `source` names the file in messages.
///
/// Required (error when absent or null): model_type, d_model, n_layers, n_heads, vocab_size,
/// max_sequence_length, rope_theta, mask_token_id, eos_token_id. Defaults: n_kv_heads null/absent
/// -> n_heads; embedding_size null/absent -> vocab_size; mlp_hidden_size null/absent ->
/// mlp_ratio (default 4) x d_model; pad_token_id -> eos_token_id; rms_norm_eps -> 1e-5.
/// Architecture switches take the default of LLaDA's own `ModelConfig` (configuration_llada.py)
/// when absent, as the reference loader does, and are then checked, so e.g. an absent
/// `weight_tying` means tied and is rejected. Supported values only: model_type "llada",
/// block_type "llama", activation_type "silu" (LLaDA's gated MLP: silu(ff_proj x) * up_proj x;
/// "swiglu" would make the block split ff_proj's output in halves — a different network),
/// layer_norm_type "rms", rope true, alibi / include_bias / include_qkv_bias /
/// bias_for_layer_norm / weight_tying / attention_layer_norm / scale_logits / input_emb_norm /
/// multi_query_attention false, layer_norm_with_affine true, block_group_size 1, rope_scaling
/// null, yarn false, n_kv_heads == n_heads, d_model % n_heads == 0 with an even head_dim, sizes
/// > 0, embedding_size >= vocab_size (and < 2^31), max_sequence_length <= kMaxSequenceLength, token
/// ids in [0, embedding_size).
/// rope_full_precision false is accepted with a warning (RoPE is always computed in fp32).
/// Other keys (training options, dropouts, "golden_notes", ...) are ignored.
///
/// Throws Error(kInvalidCheckpoint) whose message names `source`, the field and its value and
/// says what is supported; integers must be JSON integers (4096.0 is rejected), booleans JSON
/// booleans, strings JSON strings.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source);

/// Reads and parses `path` (a config.json). Throws Error(kIo) if unreadable,
/// Error(kInvalidCheckpoint) naming the file for invalid JSON, else as above.
ModelConfig load_model_config(const std::filesystem::path& path);

}  // namespace flashdllm
