// LladaConfig: the model hyper-parameters of a LLaDA checkpoint (reference §A.1), parsed from
// the Hugging Face `config.json` exactly as users download it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace flashdllm {

struct LladaConfig {
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

  /// Number of parameters implied by the shapes (embedding + blocks + final norm + LM head).
  int64_t parameter_count() const noexcept;
};

/// Parses and validates a LLaDA `config.json` object. `source` names the file in messages.
/// Throws Error(kInvalidCheckpoint) naming the file and field for missing or ill-typed fields,
/// unknown `model_type` / `block_type`, and options this engine does not implement (ALiBi,
/// biases, weight tying, QK layer norm, logit scaling, non-RMS norms, non-SiLU activations,
/// rope disabled, d_model not divisible by n_heads, n_kv_heads != n_heads, ...).
LladaConfig parse_llada_config(const nlohmann::json& j, const std::string& source);

/// Reads and parses `path` (a config.json). Throws Error(kIo) if unreadable, else as above.
LladaConfig load_llada_config(const std::filesystem::path& path);

}  // namespace flashdllm
