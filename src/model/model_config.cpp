// config.json: the dispatch on model_type, the checks every family shares and the derived counts
// (see model_config.h). The families' own keys are read in family_llada.cpp and family_dream.cpp.
#include "model/model_config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/fp8.h"
#include "io/file.h"
#include "model/config_reader.h"

namespace flashdllm {

namespace {

struct FamilyEntry {
  const char* model_type;    // config.json "model_type"
  const char* architecture;  // the upstream class named in "architectures"
  ModelFamily family;
  ModelConfig (*parse)(const nlohmann::json&, const std::string&);
  /// Families sharing a model_type ("llada": LLaDA and LLaDA-MoE) are told apart by architectures,
  /// or without one by this key being present (nullptr: the family taken when none decides).
  const char* marker_key;
};

constexpr FamilyEntry kFamilies[] = {
    {"llada", "LLaDAModelLM", ModelFamily::kLlada, model_detail::parse_llada_config, nullptr},
    {"llada", "LLaDAMoEModelLM", ModelFamily::kLladaMoe, model_detail::parse_llada_moe_config, "num_experts"},
    {"Dream", "DreamModel", ModelFamily::kDream, model_detail::parse_dream_config, nullptr},
};

/// True when `architectures` (a list, when present) names `arch`.
bool names_architecture(const nlohmann::json& j, const char* arch) {
  auto it = j.find("architectures");
  if (it == j.end() || !it->is_array()) return false;
  for (const auto& a : *it)
    if (a.is_string() && a.get<std::string>() == arch) return true;
  return false;
}

/// The family of model_type `type`: the only entry, or among several the one architectures names,
/// else the one whose marker key is present, else the one without a marker. nullptr: none.
const FamilyEntry* select_family(const nlohmann::json& j, const std::string& type) {
  const FamilyEntry* fallback = nullptr;
  const FamilyEntry* marked = nullptr;
  for (const FamilyEntry& fam : kFamilies) {
    if (type != fam.model_type) continue;
    if (names_architecture(j, fam.architecture)) return &fam;
    if (fam.marker_key == nullptr) {
      if (fallback == nullptr) fallback = &fam;
    } else if (marked == nullptr && j.contains(fam.marker_key)) {
      marked = &fam;
    }
  }
  return marked != nullptr ? marked : fallback;
}

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

const char* supported_model_types() noexcept {
  return "\"llada\" (LLaDA; LLaDA-MoE with architectures LLaDAMoEModelLM), \"Dream\" (Dream)";
}

int64_t ModelConfig::parameter_count() const noexcept {
  const int64_t q = n_heads * head_dim, kv = n_kv_heads * head_dim;
  const int64_t attn = 2 * d_model * q + 2 * d_model * kv + (qkv_bias ? q + 2 * kv : 0);  // q, o; k, v; biases
  const int64_t experts = moe.on() ? moe.n_experts : 1;
  const int64_t mlp = experts * 3 * d_model * mlp_hidden_size + (moe.on() ? moe.n_experts * d_model : 0);  // + router
  const int64_t norms = 2 * d_model + (qk_norm ? 2 * head_dim : 0);  // attention, MLP norms; q/k norms
  return (tied_head ? 1 : 2) * embedding_size * d_model + n_layers * (attn + mlp + norms) + d_model;
}

int64_t ModelConfig::active_parameter_count() const noexcept {
  const int64_t idle = moe.on() ? int64_t{moe.n_experts - moe.top_k} * 3 * d_model * mlp_hidden_size : 0;
  return parameter_count() - (tied_head ? 0 : embedding_size * d_model) - n_layers * idle;
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

void check_mask_not_eos(const ModelConfig& c, const std::string& src) {
  FDLLM_CHECK_CKPT(c.mask_token_id != c.eos_token_id && c.mask_token_id != c.pad_token_id,
                   "{}: mask_token_id = {} equals eos_token_id / pad_token_id ({} / {}); the sampler must tell masks "
                   "from padding",
                   src, c.mask_token_id, c.eos_token_id, c.pad_token_id);
}

}  // namespace model_detail

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source) {
  FDLLM_CHECK_CKPT(j.is_object(), "{}: config must be a JSON object", source);
  const model_detail::FieldReader r(j, source, "");
  const std::string type = r.string("model_type");
  if (const FamilyEntry* fam = select_family(j, type)) {
    check_architectures(j, *fam, source);
    ModelConfig c = fam->parse(j, source);
    parse_quantization_config(j, source, c);
    return c;
  }
  FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "{}: unsupported model_type '{}' (supported: {})", source, type,
             supported_model_types());
}

void parse_quantization_config(const nlohmann::json& j, const std::string& source, ModelConfig& cfg) {
  const auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return;
  FDLLM_CHECK_CKPT(it->is_object(), "{}: field 'quantization_config' must be an object, got {}", source, it->dump());
  const nlohmann::json& q = *it;
  const auto method = q.find("quant_method");
  FDLLM_CHECK_CKPT(method != q.end() && method->is_string(),
                   "{}: field 'quantization_config.quant_method' is missing or not a string", source);
  FDLLM_CHECK(method->get_ref<const std::string&>() == "fp8", ErrorCode::kUnsupported,
              "{}: field 'quantization_config.quant_method' = '{}' is not supported (supported: fp8, block-scaled "
              "e4m3 weights)",
              source, method->get_ref<const std::string&>());
  const auto block = q.find("weight_block_size");
  const bool block_ok = block != q.end() && block->is_array() && block->size() == 2 &&
                        (*block)[0].is_number_integer() && (*block)[1].is_number_integer() &&
                        (*block)[0].get<int64_t>() == kFp8Block && (*block)[1].get<int64_t>() == kFp8Block;
  FDLLM_CHECK_CKPT(block_ok,
                   "{}: field 'quantization_config.weight_block_size' must be [{}, {}] (128 x 128 weight blocks with "
                   "one scale each; per-tensor FP8 is not supported), got {}",
                   source, kFp8Block, kFp8Block, block == q.end() ? std::string("nothing") : block->dump());
  // Optional fields, checked when present (transformers' FineGrainedFP8Config defaults).
  auto expect_string = [&](const char* key, const char* want, const char* why) {
    const auto f = q.find(key);
    if (f == q.end() || f->is_null()) return;
    FDLLM_CHECK_CKPT(f->is_string() && f->get_ref<const std::string&>() == want,
                     "{}: field 'quantization_config.{}' must be \"{}\" ({}), got {}", source, key, want, why,
                     f->dump());
  };
  expect_string("activation_scheme", "dynamic",
                "per-token 1 x 128 activation scales; static input scales are not "
                "supported");
  expect_string("fmt", "e4m3", "e4m3 weights");
  cfg.fp8_checkpoint = true;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  return parse_model_config(read_json_file(path, /*reject_duplicate_keys=*/true), path.string());
}

}  // namespace flashdllm
