// What `flashdllm info` reports about a LLaDA checkpoint, gathered from its metadata alone:
// config.json, the safetensors headers (single file or index + shards) and the tokenizer files.
// No tensor data is read (the shards are memory-mapped and only their headers touched), so an 8B
// checkpoint answers in well under a second; find_non_finite_weights() is the one function here
// that reads every weight (`info --check-weights`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "flashdllm/precision.h"
#include "io/safetensors.h"
#include "model/model_config.h"

namespace flashdllm {

/// The facts a description of a LLaDA model prints.
struct ModelFacts {
  std::filesystem::path dir;
  ModelConfig config;
  std::string checkpoint_dtype;   // checkpoint_dtype_summary(), or "random (dummy)"
  uint64_t checkpoint_bytes = 0;  // sum of the tensors' bytes in the safetensors files (0 for dummy)
  int32_t eot_id = -1;            // the tokenizer's end-of-turn token (end_of_turn_id), -1 without one
  bool has_tokenizer = false;
  bool has_chat_template = false;
  std::string chat_template_problem;  // tokenizer_config.json asks for a template we cannot use: why
  ModelPrecision precision;           // --quantization / --kv-cache-dtype the model is (to be) loaded with
};

/// Throws Error(kIo) "model directory '<dir>' does not exist" or "... is not a directory".
void check_model_directory(const std::filesystem::path& dir);

/// Gathers the facts of the checkpoint directory `dir` without reading weights: config.json
/// (load_model_config), unless `dummy_weights` the safetensors headers (Checkpoint::open, then
/// validate_model_checkpoint against the config), tokenizer.json when present
/// (validate_llada_tokenizer), and whether tokenizer_config.json holds the LLaDA chat template.
/// Throws as those functions and check_model_directory do.
ModelFacts inspect_checkpoint(const std::filesystem::path& dir, bool dummy_weights = false);

/// "F32" / "BF16" / "F16" when every tensor has that dtype, else e.g. "BF16 (mixed: BF16 x 290, F32 x 1)".
std::string checkpoint_dtype_summary(const Checkpoint& ckpt);

/// Multi-line description: config, parameter count, checkpoint dtype and size, the weight memory
/// `backend` needs (model_weight_bytes; per rank of `tensor_parallel`) and its K/V cache per token,
/// tokenizer and chat template. `backend_label` names where it runs (empty: backend.name()).
/// Throws as model_shard when `tensor_parallel` does not divide the model.
std::string describe_model(const ModelFacts& facts, const Backend& backend, int tensor_parallel = 1,
                                 const std::string& backend_label = {});

/// One tensor holding NaN or ±Inf values.
struct NonFiniteTensor {
  std::string name;
  std::string file;
  int64_t nan = 0;
  int64_t inf = 0;
  int64_t first_index = -1;  // flat index of the first non-finite element
};

/// Reads every F32/F16/BF16 tensor of `ckpt` and lists those with non-finite values, in name order
/// (other dtypes are skipped). Reads the whole checkpoint from disk: seconds per GB.
std::vector<NonFiniteTensor> find_non_finite_weights(const Checkpoint& ckpt);

}  // namespace flashdllm
