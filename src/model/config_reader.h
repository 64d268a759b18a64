// The typed reader of config.json fields and the per-family parsers behind parse_model_config
// (model_config.h). Private to src/model.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "model/model_config.h"

namespace flashdllm::model_detail {

using nlohmann::json;

/// Reads typed fields of one config object; every error is Error(kInvalidCheckpoint) naming the
/// source file, the field and its value. JSON null counts as absent.
class FieldReader {
 public:
  /// `defaults`: whose defaults an absent key takes, for messages ("LLaDA's ModelConfig").
  FieldReader(const json& j, const std::string& source, const char* defaults)
      : j_(j), src_(source), defaults_(defaults) {}

  /// The value of `key`, nullptr when absent or JSON null.
  const json* find(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  int64_t integer(const char* key) const {
    const json* v = find(key);
    FDLLM_CHECK_CKPT(v != nullptr, "{}: missing required field '{}'", src_, key);
    return as_integer(key, *v);
  }
  int64_t integer_or(const char* key, int64_t dflt) const {
    const json* v = find(key);
    return v ? as_integer(key, *v) : dflt;
  }
  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    FDLLM_CHECK_CKPT(v > 0, "{}: field '{}' = {} must be positive", src_, key, v);
    return v;
  }
  double number(const char* key) const {
    const json* v = find(key);
    FDLLM_CHECK_CKPT(v != nullptr, "{}: missing required field '{}'", src_, key);
    return as_number(key, *v);
  }
  double number_or(const char* key, double dflt) const {
    const json* v = find(key);
    return v ? as_number(key, *v) : dflt;
  }
  bool boolean_or(const char* key, bool dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    FDLLM_CHECK_CKPT(v->is_boolean(), "{}: field '{}' must be true or false (got {})", src_, key, v->dump());
    return v->get<bool>();
  }
  std::string string_or(const char* key, const char* dflt) const {
    const json* v = find(key);
    if (!v) return dflt;
    FDLLM_CHECK_CKPT(v->is_string(), "{}: field '{}' must be a string (got {})", src_, key, v->dump());
    return v->get<std::string>();
  }
  std::string string(const char* key) const {
    FDLLM_CHECK_CKPT(find(key) != nullptr, "{}: missing required field '{}'", src_, key);
    return string_or(key, "");
  }

  /// " (absent: <defaults> default)" or "" — appended to messages about defaulted switches.
  std::string absent_note(const char* key) const {
    return find(key) ? std::string() : " (absent: " + std::string(defaults_) + " default)";
  }
  const std::string& source() const noexcept { return src_; }

 private:
  int64_t as_integer(const char* key, const json& v) const {
    FDLLM_CHECK_CKPT(v.is_number_integer(), "{}: field '{}' must be an integer (got {})", src_, key, v.dump());
    FDLLM_CHECK_CKPT(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()},
                     "{}: field '{}' = {} is too large", src_, key, v.dump());
    return v.get<int64_t>();
  }
  double as_number(const char* key, const json& v) const {
    FDLLM_CHECK_CKPT(v.is_number(), "{}: field '{}' must be a number (got {})", src_, key, v.dump());
    const double d = v.get<double>();
    FDLLM_CHECK_CKPT(std::isfinite(d), "{}: field '{}' must be finite", src_, key);
    return d;
  }

  const json& j_;
  const std::string& src_;
  const char* defaults_;
};

/// The checks every family shares, run by each parser once its sizes are set: the size products
/// far from overflow, embedding_size >= vocab_size and fitting 32-bit ids, max_sequence_length
/// (read from field `len_key`) <= kMaxSequenceLength, then rms_norm_eps (`eps`, read from field
/// `eps_key`) a normal float in (0, 1), stored in c.rms_norm_eps.
void check_sizes_and_eps(ModelConfig& c, const std::string& src, const char* len_key, const char* eps_key, double eps);

/// `v` (field `key`) as a token id: inside [0, c.embedding_size), else Error(kInvalidCheckpoint).
int32_t token_id(const ModelConfig& c, const std::string& src, const char* key, int64_t v);

/// Error(kInvalidCheckpoint) when mask_token_id equals eos_token_id or pad_token_id.
void check_mask_not_eos(const ModelConfig& c, const std::string& src);

/// model_type "llada" (family_llada.cpp) and "Dream" (family_dream.cpp); see parse_model_config.
ModelConfig parse_llada_config(const json& j, const std::string& source);
ModelConfig parse_dream_config(const json& j, const std::string& source);
/// LLaDA-MoE's LLaDAConfig keys (family_llada_moe.cpp).
ModelConfig parse_llada_moe_config(const json& j, const std::string& source);

}  // namespace flashdllm::model_detail
