// Checks shared by every denoiser (see denoiser.h).
#include "denoise/denoiser.h"

#include <cmath>

#include "core/check.h"
#include "model/llada_config.h"

namespace flashdllm {

void check_prompt_ids(std::span<const int32_t> prompt, const LladaConfig& cfg) {
  FDLLM_CHECK_ARG(!prompt.empty(), "the prompt is empty (LLaDA needs at least one prompt token)");
  for (size_t i = 0; i < prompt.size(); ++i) {
    FDLLM_CHECK_ARG(prompt[i] >= 0 && prompt[i] < cfg.embedding_size,
                    "prompt token {} at position {} is outside the vocabulary [0, {})", prompt[i], i,
                    cfg.embedding_size);
    FDLLM_CHECK_ARG(prompt[i] != cfg.mask_token_id,
                    "prompt position {} holds the mask token id {}; prompts must not contain masks", i,
                    cfg.mask_token_id);
  }
}

void check_selection(std::span<const int32_t> x0, std::span<const double> conf, int32_t mask_id, const char* where) {
  for (size_t r = 0; r < conf.size(); ++r)
    FDLLM_CHECK(std::isfinite(conf[r]), ErrorCode::kInvalidCheckpoint,
                "{}: the model produced non-finite logits (logits row {} gives confidence {}): the checkpoint's "
                "weights hold NaN or Inf values (check them with `flashdllm info --check-weights`)",
                where, r, conf[r]);
  for (size_t r = 0; r < x0.size(); ++r)
    FDLLM_ASSERT_MSG(x0[r] >= 0 && x0[r] != mask_id, "{}: token selection proposed {} for logits row {}", where,
                     x0[r], r);
}

}  // namespace flashdllm
