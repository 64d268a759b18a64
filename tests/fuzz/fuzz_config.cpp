// Fuzz target: config.json. A config that parses must be self-consistent (head_dim x n_heads =
// d_model, ids inside the embedding table, sizes positive) and its size products must not overflow.
#include <string_view>

#include <nlohmann/json.hpp>

#include "flashdllm/status.h"
#include "fuzz/fuzz_common.h"
#include "io/file.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"

using namespace flashdllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json j = parse_json_text({reinterpret_cast<const char*>(data), size}, "config.json");
    const ModelConfig c = parse_model_config(j, "config.json");
    fuzz::require(c.d_model > 0 && c.n_layers > 0 && c.n_heads > 0 && c.mlp_hidden_size > 0);
    fuzz::require(c.head_dim * c.n_heads == c.d_model && c.head_dim % 2 == 0);
    fuzz::require(c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0);
    fuzz::require(c.vocab_size > 0 && c.embedding_size >= c.vocab_size);
    for (int32_t id : {c.mask_token_id, c.eos_token_id, c.pad_token_id})
      fuzz::require(id >= 0 && id < c.embedding_size);
    fuzz::require(c.max_sequence_length > 0 && c.rope_theta > 0 && c.rms_norm_eps > 0);
    fuzz::require(c.parameter_count() > 0);
    const int64_t per_layer = c.qkv_bias ? 12 : 9;  // + q/k/v biases
    if (c.n_layers <= 64)
      fuzz::require(model_expected_tensors(c).size() ==
                    static_cast<size_t>(per_layer * c.n_layers + (c.tied_head ? 2 : 3)));
  } catch (const Error&) {
  }
  return 0;
}
