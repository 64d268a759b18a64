// Log-probabilities of committed tokens (OpenAI `logprobs`): the one computation every denoiser
// calls for the requests that ask (SlotParams::logprobs >= 0), from the logits rows it committed
// from. The definition is TokenLogprob's (flashdllm/request.h; docs/decisions.md): log_softmax of
// the float32 row at temperature 1 over the whole vocabulary, in float64, before any top_p / top_k
// filtering; a suppressed token (logit -inf for the decoding rule: LLaDA's logits_eos_inf) gets
// probability 0. Requests that do not ask pay nothing.
//
// Where the rows live: the logits are on the backend's device (CUDA: device memory); the rows are
// copied to the host (V floats each, 0.5 MB at LLaDA's 126,464 ids) and reduced there, so the same
// code serves every backend and the CPU backend is the oracle of itself (no device kernel; the
// copy costs about a millisecond per 16 rows on a PCIe 4 H100, docs/serving.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "flashdllm/request.h"

namespace flashdllm {

/// Which ids a logits row's distribution treats specially.
struct LogprobIds {
  int32_t suppress = -1;  ///< logit taken as -inf (probability 0, never listed); -1 = none
  int32_t hidden = -1;    ///< never listed among the top alternatives (the mask id); its mass counts
};

/// The TokenLogprob of `token` in one logits row (V floats): logprob = row[token] − logsumexp(row)
/// (float64 sums, a max-shifted exp), and the `top_n` (<= V) most probable ids other than
/// ids.hidden / ids.suppress, most probable first, ties by lower id. A non-finite row gives a NaN
/// logprob (the selection already failed such a request). Throws Error(kInvalidArgument) for a
/// token outside [0, V) or top_n outside [0, SamplingParams::kMaxTopLogprobs].
TokenLogprob row_logprob(std::span<const float> row, int32_t token, int64_t top_n, const LogprobIds& ids);

/// Copies logits rows to the host and reads TokenLogprobs from them; one per denoiser, reused
/// (its host buffer grows to the largest copy).
class LogprobReader {
 public:
  /// Copies `rows` (F32 [n, V] on the backend's device, n >= 1) to the host; row i is then at(i, ...).
  void fetch(Backend& backend, Tensor rows);
  /// row_logprob of fetched row i (< the fetched rows).
  TokenLogprob at(int64_t i, int32_t token, int64_t top_n, const LogprobIds& ids) const;

 private:
  std::vector<float> host_;
  int64_t rows_ = 0, cols_ = 0;
};

}  // namespace flashdllm
