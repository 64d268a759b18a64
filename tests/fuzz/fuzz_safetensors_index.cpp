// Fuzz target: model.safetensors.index.json. The index is read from the fuzzer's bytes; next to it
// lie two fixed, valid shards ("a.safetensors": tensors x, y; "b.safetensors": tensor z), so the
// fuzzer can reach every index check (shard names, mapping, duplicates, total_size) with shards that
// exist. Each input also goes through validate_model_index against a tiny LLaDA config.
#include <string>

#include <nlohmann/json.hpp>

#include "flashdllm/status.h"
#include "fuzz/fuzz_common.h"
#include "io/safetensors.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"

using namespace flashdllm;

namespace {

const ModelConfig& tiny_config() {
  static const ModelConfig cfg = [] {
    nlohmann::json j = {{"model_type", "llada"},
                        {"block_type", "llama"},
                        {"activation_type", "silu"},
                        {"layer_norm_type", "rms"},
                        {"rope", true},
                        {"weight_tying", false},
                        {"d_model", 8},
                        {"n_layers", 2},
                        {"n_heads", 2},
                        {"mlp_hidden_size", 16},
                        {"vocab_size", 32},
                        {"max_sequence_length", 64},
                        {"rope_theta", 10000.0},
                        {"mask_token_id", 31},
                        {"eos_token_id", 30}};
    return parse_model_config(j, "tiny config");
  }();
  return cfg;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto& dir = fuzz::scratch_dir();
  const float v[6] = {1, 2, 3, 4, 5, 6};
  write_safetensors(dir / "a.safetensors", {{"x", DType::kF32, {2}, v, 8}, {"y", DType::kF32, {1}, v, 4}});
  write_safetensors(dir / "b.safetensors", {{"z", DType::kF32, {3}, v, 12}});
  (void)tiny_config();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& dir = fuzz::scratch_dir();
  const auto index = dir / "model.safetensors.index.json";
  fuzz::write_file(index, {reinterpret_cast<const char*>(data), size});
  try {
    const Checkpoint ck = Checkpoint::open(dir);
    size_t bytes = 0;
    for (const std::string& n : ck.names()) bytes += ck.get(n).nbytes;
    fuzz::require(bytes == ck.total_bytes());
  } catch (const Error&) {
  }
  try {
    const int per_param = validate_model_index(index, tiny_config());
    fuzz::require(per_param == 2 || per_param == 4);
  } catch (const Error&) {
  }
  return 0;
}
