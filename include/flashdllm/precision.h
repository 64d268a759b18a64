// How a model's numbers are stored: the weights' quantisation (`--quantization`) and the K/V
// cache's dtype (`--kv-cache-dtype`), typed, carried from EngineOptions::precision to the model
// loader (load_model_weights) and reported by `info`. The owner of these two switches.
//
//  * WeightQuantization::kFp8: every linear layer's weight (q|k|v, o, gate|up, down; not the
//    embedding, the norms or the LM head) in e4m3 with one fp32 scale per 128 x 128 block, its input
//    quantised per token in 1 x 128 groups (W8A8, DeepSeek-V3's block FP8; core/fp8.h). A checkpoint
//    stored so (config.json quantization_config, `*.weight_scale_inv` tensors) loads that way
//    whatever this says; kFp8 quantises a BF16 / F16 / F32 checkpoint while loading it.
//  * KvCacheDtype::kFp8: K and V rows stored in e4m3 with one static fp32 scale per (layer, K/V
//    head) (1.0, vLLM's default without calibrated scales; docs/decisions.md).
// Backends that lack a route refuse it at load with Error(kUnsupported) naming the option
// (Backend::check_precision).
#pragma once

#include <optional>
#include <string_view>

namespace flashdllm {

enum class WeightQuantization {
  kNone,  ///< "none": the checkpoint's values in the backend's weight dtype (or an FP8 checkpoint's FP8)
  kFp8,   ///< "fp8": block-scaled e4m3 weights, per-token-group e4m3 activations
};

enum class KvCacheDtype {
  kAuto,  ///< "auto": the backend's activation dtype
  kFp8,   ///< "fp8": e4m3 with per-(layer, head) scales
};

struct ModelPrecision {
  WeightQuantization quantization = WeightQuantization::kNone;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
};

constexpr const char* weight_quantization_name(WeightQuantization q) noexcept {
  return q == WeightQuantization::kFp8 ? "fp8" : "none";
}
constexpr const char* kv_cache_dtype_name(KvCacheDtype d) noexcept { return d == KvCacheDtype::kFp8 ? "fp8" : "auto"; }

/// "none" | "fp8"; nullopt otherwise.
inline std::optional<WeightQuantization> parse_weight_quantization(std::string_view s) noexcept {
  if (s == "none") return WeightQuantization::kNone;
  if (s == "fp8") return WeightQuantization::kFp8;
  return std::nullopt;
}
/// "auto" | "fp8"; nullopt otherwise.
inline std::optional<KvCacheDtype> parse_kv_cache_dtype(std::string_view s) noexcept {
  if (s == "auto") return KvCacheDtype::kAuto;
  if (s == "fp8") return KvCacheDtype::kFp8;
  return std::nullopt;
}

}  // namespace flashdllm
