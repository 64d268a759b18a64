// Checks shared by every denoiser (see denoiser.h).
#include "denoise/denoiser.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/model_config.h"

namespace flashdllm {

SlotParams resolve_params(const SamplingParams& s, const DecodeSettings& d, bool exact_blocks) {
  SlotParams p;
  const int64_t B = d.effective_block_length();
  const bool whole_canvas =
      d.cache == CacheMode::kFlash || (d.cache == CacheMode::kNone && d.sampler == Sampler::kDream);
  p.gen_length = whole_canvas || exact_blocks ? s.gen_length : (s.gen_length + B - 1) / B * B;
  p.threshold = effective_threshold(d, s);
  p.steps = effective_steps(d, s.steps, p.gen_length);
  p.temperature = s.temperature;
  p.seed = s.seed;
  p.top_p = s.top_p;
  p.top_k = s.top_k;
  p.logprobs = s.logprobs;
  return p;
}

void check_prompt_ids(std::span<const int32_t> prompt, const ModelConfig& cfg) {
  FDLLM_CHECK_ARG(!prompt.empty(), "the prompt is empty (the model needs at least one prompt token)");
  for (size_t i = 0; i < prompt.size(); ++i) {
    FDLLM_CHECK_ARG(prompt[i] >= 0 && prompt[i] < cfg.embedding_size,
                    "prompt token {} at position {} is outside the vocabulary [0, {})", prompt[i], i,
                    cfg.embedding_size);
    FDLLM_CHECK_ARG(prompt[i] != cfg.mask_token_id,
                    "prompt position {} holds the mask token id {}; prompts must not contain masks", i,
                    cfg.mask_token_id);
  }
}

std::vector<size_t> check_selection(std::span<const int32_t> x0, std::span<const double> conf, int32_t mask_id,
                                    const char* where) {
  FDLLM_ASSERT_MSG(x0.empty() || x0.size() == conf.size(), "{}: {} selected tokens for {} confidences", where,
                   x0.size(), conf.size());
  std::vector<size_t> bad;
  for (size_t r = 0; r < conf.size(); ++r) {
    if (!std::isfinite(conf[r])) {
      bad.push_back(r);
      continue;
    }
    if (!x0.empty())
      FDLLM_ASSERT_MSG(x0[r] >= 0 && x0[r] != mask_id, "{}: token selection proposed {} for logits row {}", where,
                       x0[r], r);
  }
  return bad;
}

std::string nonfinite_error(std::span<const size_t> bad, std::span<const double> conf, size_t begin, size_t end,
                            const char* where) {
  const auto it = std::lower_bound(bad.begin(), bad.end(), begin);
  if (it == bad.end() || *it >= end) return {};
  return fmt::format(
      "{}: the model produced non-finite logits for this request (its logits row {} gives confidence "
      "{}): the checkpoint's weights hold NaN or Inf values, or this input overflows them (check the "
      "weights with `flashdllm info --check-weights`)",
      where, *it - begin, conf[*it]);
}

}  // namespace flashdllm
