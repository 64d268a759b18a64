// Name and shape checks of a LLaDA checkpoint against its config (reference §A.2).
//
// Expected tensors (PyTorch nn.Linear layout [out, in]):
//   model.transformer.wte.weight                      [embedding_size, d_model]
//   model.transformer.blocks.{i}.attn_norm.weight     [d_model]
//   model.transformer.blocks.{i}.{q,k,v}_proj.weight  [d_model, d_model]
//   model.transformer.blocks.{i}.attn_out.weight      [d_model, d_model]
//   model.transformer.blocks.{i}.ff_norm.weight       [d_model]
//   model.transformer.blocks.{i}.{ff_proj,up_proj}.weight [mlp_hidden_size, d_model]
//   model.transformer.blocks.{i}.ff_out.weight        [d_model, mlp_hidden_size]
//   model.transformer.ln_f.weight                     [d_model]
//   model.transformer.ff_out.weight                   [embedding_size, d_model]
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/model_config.h"

namespace flashdllm {

class Tokenizer;

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

/// Every tensor a LLaDA checkpoint with config `cfg` must hold, in a fixed order (wte, then per
/// layer attn_norm, q/k/v_proj, attn_out, ff_norm, ff_proj, up_proj, ff_out, then ln_f, ff_out).
std::vector<ExpectedTensor> model_expected_tensors(const ModelConfig& cfg);
/// Their number: 9 per layer + 3.
int64_t model_expected_tensor_count(const ModelConfig& cfg) noexcept;
/// The i-th of them, made on demand (checks walk these and stop at the first missing tensor instead
/// of building a list whose size only the config claims). Throws Error(kInvalidArgument) for i
/// outside [0, count).
ExpectedTensor model_expected_tensor(const ModelConfig& cfg, int64_t i);

/// Checks that `ckpt` holds exactly the expected tensors (no missing, no unexpected), each with
/// the expected shape and a dtype in {F32, F16, BF16} (dtypes may differ between tensors).
/// Throws one Error(kInvalidCheckpoint) naming the file and tensor at fault (for a missing tensor:
/// the index of a sharded checkpoint, else model.safetensors), with actual and expected shapes.
void validate_model_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg);

/// Checks that the tokenizer `tok` (read from `tokenizer_file`) agrees with the config's special
/// ids: the mask token "<|mdm_mask|>" exists at exactly mask_token_id; eos_token_id and pad_token_id
/// are special tokens of the tokenizer, and "<|endoftext|>", when present, is eos_token_id;
/// "<|eot_id|>", when present, is a special token; and every token id is inside the embedding table
/// (vocab_size() <= embedding_size). A tokenizer.json lacking one added token shifts the ids of all
/// later ones (Hugging Face's assignment rule, which Tokenizer follows), and the model would then
/// decode and commit the wrong ids; these checks refuse it. Throws Error(kInvalidCheckpoint) naming
/// `tokenizer_file`, the token and the config field.
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
