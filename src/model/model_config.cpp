// config.json: the dispatch on model_type, the checks every family shares and the derived counts
// (see model_config.h). The families' own keys are read in family_llada.cpp and family_dream.cpp.
#include "model/model_config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/file.h"
#include "model/config_reader.h"

namespace flashdllm {

namespace {

struct FamilyEntry {
  const char* model_type;    // config.json "model_type"
  const char* architecture;  // the upstream class named in "architectures"
  ModelFamily family;
  ModelConfig (*parse)(const nlohmann::json&, const std::string&);
};

constexpr FamilyEntry kFamilies[] = {
    {"llada", "LLaDAModelLM", ModelFamily::kLlada, model_detail::parse_llada_config},
    {"Dream", "DreamModel", ModelFamily::kDream, model_detail::parse_dream_config},
};

/// `architectures`, when present: a list of strings naming no other family's upstream class.
void check_architectures(const nlohmann::json& j, const FamilyEntry& fam, const std::string& src) {
  auto it = j.find("architectures");
  if (it == j.end() || it->is_null()) return;
  FDLLM_CHECK_CKPT(it->is_array(), "{}: field 'architectures' must be a list of strings (got {})", src, it->dump());
  for (const auto& a : *it) {
    FDLLM_CHECK_CKPT(a.is_string(), "{}: field 'architectures' must be a list of strings (got {})", src, it->dump());
    for (const FamilyEntry& other : kFamilies)
      FDLLM_CHECK_CKPT(other.family == fam.family || a.get<std::string>() != other.architecture,
                       "{}: model_type '{}' ({}) contradicts architectures entry '{}' (a {} model)", src,
                       fam.model_type, family_name(fam.family), a.get<std::string>(), family_name(other.family));
  }
}

}  // namespace

const char* supported_model_types() noexcept { return "\"llada\" (LLaDA), \"Dream\" (Dream)"; }

int64_t ModelConfig::parameter_count() const noexcept {
  const int64_t q = n_heads * head_dim, kv = n_kv_heads * head_dim;
  const int64_t attn = 2 * d_model * q + 2 * d_model * kv + (qkv_bias ? q + 2 * kv : 0);  // q, o; k, v; biases
  const int64_t mlp = 3 * d_model * mlp_hidden_size;                                      // gate, up, down
  const int64_t norms = 2 * d_model;                                                      // attention, MLP norms
  return (tied_head ? 1 : 2) * embedding_size * d_model + n_layers * (attn + mlp + norms) + d_model;
}

namespace model_detail {

void check_sizes_and_eps(ModelConfig& c, const std::string& src, const char* len_key, const char* eps_key, double eps) {
  FDLLM_CHECK_CKPT(c.embedding_size >= c.vocab_size, "{}: embedding_size = {} is smaller than vocab_size = {}", src,
                   c.embedding_size, c.vocab_size);
  FDLLM_CHECK_CKPT(c.embedding_size <= std::numeric_limits<int32_t>::max(),
                   "{}: embedding_size = {} does not fit 32-bit token ids", src, c.embedding_size);
  FDLLM_CHECK_CKPT(c.max_sequence_length <= kMaxSequenceLength,
                   "{}: field '{}' = {} is above the supported {} (the RoPE tables and K/V stores are sized from it)",
                   src, len_key, c.max_sequence_length, kMaxSequenceLength);
  // Guard the size products used by parameter_count() and the weight shapes.
  constexpr int64_t kLimit = int64_t{1} << 50;  // far beyond any real model, far below overflow
  int64_t p = 0;
  const bool overflow = __builtin_mul_overflow(c.d_model, c.d_model, &p) || p > kLimit ||
                        __builtin_mul_overflow(c.d_model, c.mlp_hidden_size, &p) || p > kLimit ||
                        __builtin_mul_overflow(c.d_model, c.embedding_size, &p) || p > kLimit ||
                        c.n_layers > (int64_t{1} << 20);
  FDLLM_CHECK_CKPT(!overflow, "{}: sizes too large (d_model {}, mlp_hidden_size {}, embedding_size {}, n_layers {})",
                   src, c.d_model, c.mlp_hidden_size, c.embedding_size, c.n_layers);
  // Used in float arithmetic: a positive value that rounds to 0 (or a subnormal) as a float is refused.
  FDLLM_CHECK_CKPT(eps >= std::numeric_limits<float>::min() && eps < 1.0,
                   "{}: field '{}' = {} must be in (0, 1) and a normal float32 (>= {})", src, eps_key, eps,
                   std::numeric_limits<float>::min());
  c.rms_norm_eps = static_cast<float>(eps);
}

int32_t token_id(const ModelConfig& c, const std::string& src, const char* key, int64_t v) {
  FDLLM_CHECK_CKPT(v >= 0 && v < c.embedding_size, "{}: field '{}' = {} is outside [0, embedding_size = {})", src, key,
                   v, c.embedding_size);
  return static_cast<int32_t>(v);
}

}  // namespace model_detail

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source) {
  FDLLM_CHECK_CKPT(j.is_object(), "{}: config must be a JSON object", source);
  const model_detail::FieldReader r(j, source, "");
  const std::string type = r.string("model_type");
  for (const FamilyEntry& fam : kFamilies) {
    if (type != fam.model_type) continue;
    check_architectures(j, fam, source);
    return fam.parse(j, source);
  }
  FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "{}: unsupported model_type '{}' (supported: {})", source, type,
             supported_model_types());
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  return parse_model_config(read_json_file(path, /*reject_duplicate_keys=*/true), path.string());
}

}  // namespace flashdllm
