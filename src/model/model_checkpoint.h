// The weight map of each family (tensor names and shapes, reference §A.2 for LLaDA) and the checks
// of a checkpoint against its config. PyTorch nn.Linear layout [out, in]; Hq = n_heads·head_dim,
// Hkv = n_kv_heads·head_dim, F = mlp_hidden_size, E = embedding_size, D = d_model.
//
//   role          LLaDA (model.transformer.)            Dream                                      shape
//   embedding     wte.weight                            model.embed_tokens.weight                  [E, D]
//   attn_norm     blocks.{i}.attn_norm.weight           model.layers.{i}.input_layernorm.weight    [D]
//   q / k / v     blocks.{i}.{q,k,v}_proj.weight        model.layers.{i}.self_attn.{q,k,v}_proj.weight [Hq|Hkv, D]
//   q/k/v bias    -                                     model.layers.{i}.self_attn.{q,k,v}_proj.bias   [Hq|Hkv]
//   attn_out      blocks.{i}.attn_out.weight            model.layers.{i}.self_attn.o_proj.weight   [D, Hq]
//   ff_norm       blocks.{i}.ff_norm.weight             model.layers.{i}.post_attention_layernorm.weight [D]
//   gate / up     blocks.{i}.{ff_proj,up_proj}.weight   model.layers.{i}.mlp.{gate,up}_proj.weight [F, D]
//   down          blocks.{i}.ff_out.weight              model.layers.{i}.mlp.down_proj.weight      [D, F]
//   final_norm    ln_f.weight                           model.norm.weight                          [D]
//   lm_head       ff_out.weight                         lm_head.weight (absent when tied)          [E, D]
//
// LLaDA-MoE uses Dream's names (the HF layout: model.layers.{i}.…, no biases) plus
//   q_norm / k_norm    model.layers.{i}.self_attn.{q,k}_norm.weight           [Dh]   (ModelConfig::qk_norm)
//   router             model.layers.{i}.mlp.gate.weight                       [n_experts, D]
//   expert gate / up   model.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight [F, D]
//   expert down        model.layers.{i}.mlp.experts.{e}.down_proj.weight      [D, F]
// in place of the dense gate / up / down (F = the expert width, mlp_hidden_size).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/model_config.h"

namespace flashdllm {

class Tokenizer;

/// What a weight tensor is, whatever its family calls it.
enum class WeightRole;

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  WeightRole role{};
};

enum class WeightRole {
  kEmbedding,
  kAttnNorm,
  kQ,
  kQBias,
  kK,
  kKBias,
  kV,
  kVBias,
  kAttnOut,
  kFfNorm,
  kGate,
  kUp,
  kDown,
  kFinalNorm,
  kLmHead,
  kQNorm,       ///< per-head q RMSNorm weight (ModelConfig::qk_norm)
  kKNorm,       ///< per-head k RMSNorm weight
  kRouter,      ///< MoE router [n_experts, D]
  kExpertGate,  ///< MoE expert `expert`'s gate [F, D]
  kExpertUp,    ///< ... up [F, D]
  kExpertDown,  ///< ... down [D, F]
};
/// The checkpoint name of `role` in cfg.family's weight map (`layer` for the per-layer roles,
/// `expert` for the expert roles). A tied head (cfg.tied_head) is read from the embedding's name.
std::string weight_name(const ModelConfig& cfg, WeightRole role, int64_t layer = 0, int64_t expert = 0);

/// Every tensor a checkpoint with config `cfg` must hold, in a fixed order: the embedding, then
/// per layer attn_norm, q, (q bias), k, (k bias), v, (v bias), (q_norm, k_norm), attn_out, ff_norm,
/// then gate, up, down (dense) or the router and per expert gate, up, down (MoE), then the final
/// norm and (untied) the LM head.
std::vector<ExpectedTensor> model_expected_tensors(const ModelConfig& cfg);
/// Their number: per layer 9 (+3 with q/k/v biases, +2 with QK-norm; MoE: the 3 dense FFN tensors
/// become 1 + 3·n_experts) + 2, + 1 for an untied head.
int64_t model_expected_tensor_count(const ModelConfig& cfg) noexcept;
/// The i-th of them, made on demand (checks walk these and stop at the first missing tensor instead
/// of building a list whose size only the config claims). Throws Error(kInvalidArgument) for i
/// outside [0, count).
ExpectedTensor model_expected_tensor(const ModelConfig& cfg, int64_t i);

/// The name of the block scales of FP8 weight `weight` (Hugging Face: "<name>_scale_inv", e.g.
/// "model.layers.0.self_attn.q_proj.weight_scale_inv").
std::string fp8_scale_name(const std::string& weight);
/// True for the roles that are linear layers quantised in a block-FP8 model (q, k, v, o, gate, up,
/// down); the LM head may be either (an untied one); embedding, norms, biases and routers never.
bool fp8_linear_role(WeightRole role) noexcept;

/// Checks that `ckpt` holds exactly the expected tensors (no missing, no unexpected), each with
/// the expected shape and a dtype in {F32, F16, BF16} (dtypes may differ between tensors).
/// A block-FP8 checkpoint (cfg.fp8_checkpoint) has every fp8_linear_role tensor (and optionally an
/// untied LM head) in F8_E4M3, each with its fp8_scale_name tensor (F32, F16 or BF16) of shape
/// [ceil(N/128), ceil(K/128)] for a weight [N, K]; F8_E4M3 anywhere else, or without the config,
/// is refused. Throws one Error(kInvalidCheckpoint) naming the file and tensor at fault (for a missing
/// tensor: the index of a sharded checkpoint, else model.safetensors), with actual and expected
/// shapes; Error(kUnsupported) for an FP8 mixture-of-experts checkpoint.
void validate_model_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg);

/// The family's mask token ("<|mdm_mask|>" for LLaDA, "<|mask|>" for Dream) and end-of-turn
/// token ("<|eot_id|>", "<|im_end|>"; their ids come from the tokenizer).
const char* mask_token_name(const ModelConfig& cfg) noexcept;

/// The mask token's text for the tokenizer file `tokenizer_file`: the "mask_token" field of the
/// tokenizer_config.json beside it when present and not null (a string, or transformers' AddedToken
/// object {"content": ...}; Dream's and LLaDA2's files name "<|mask|>", LLaDA-8B's has none), else
/// mask_token_name(cfg). The small LLaDA-MoE model (models/llada-moe-arith-*) uses LLaDA's tokenizer
/// and names "<|mdm_mask|>" this way. A tokenizer_config.json that cannot be read, is not JSON or not
/// an object also gives the default (the chat template's lookup reports such a file where the
/// template is used). Throws Error(kInvalidCheckpoint) naming the file and field when mask_token is
/// neither a non-empty string nor an object with a non-empty string "content".
std::string mask_token_name(const ModelConfig& cfg, const std::filesystem::path& tokenizer_file);
/// The end-of-turn token names a family's tokenizers use, in the order end_of_turn_id tries them:
/// LLaDA "<|eot_id|>", Dream "<|im_end|>", LLaDA-MoE "<|role_end|>" (the Ling tokenizer) then
/// "<|eot_id|>" (a LLaDA tokenizer, as models/llada-moe-arith-12m ships).
std::vector<const char*> end_of_turn_token_names(const ModelConfig& cfg);
/// The id of the first of end_of_turn_token_names(cfg) the tokenizer has; nullopt when none.
std::optional<int32_t> end_of_turn_id(const Tokenizer& tok, const ModelConfig& cfg);

/// Checks that the tokenizer `tok` (read from `tokenizer_file`) agrees with the config's special
/// ids: the mask token (mask_token_name(cfg, tokenizer_file)) exists at exactly mask_token_id; eos_token_id and
/// pad_token_id are special tokens of the tokenizer, and "<|endoftext|>", when present, is
/// eos_token_id; the end-of-turn token (end_of_turn_id), when present, is a special token;
/// and every token id is inside the embedding table (vocab_size() <= embedding_size). A
/// tokenizer.json lacking one added token shifts the ids of all later ones (Hugging Face's
/// assignment rule, which Tokenizer follows), and the model would then decode and commit the wrong
/// ids; these checks refuse it. Throws Error(kInvalidCheckpoint) naming `tokenizer_file`, the token
/// and the config field.
void validate_tokenizer(const Tokenizer& tok, const ModelConfig& cfg, const std::filesystem::path& tokenizer_file);
/// validate_tokenizer with LLaDA's token names whatever cfg.family says.
void validate_llada_tokenizer(const Tokenizer& tok, const ModelConfig& cfg,
                              const std::filesystem::path& tokenizer_file);

/// Checks a `model.safetensors.index.json` without its shards: the weight_map keys are exactly
/// the expected tensors and metadata.total_size (required) equals the expected parameter bytes
/// for a 2-byte (BF16/F16) or 4-byte (F32) dtype — so a mixed-dtype index is rejected. Returns
/// the bytes per parameter implied (2 or 4). Throws Error(kIo) if the file cannot be read,
/// Error(kInvalidCheckpoint) naming the file and the first offending tensor (missing ones in
/// model_expected_tensors order).
int validate_model_index(const std::filesystem::path& index_json, const ModelConfig& cfg);

}  // namespace flashdllm
