// Log-probabilities of committed tokens; see token_logprobs.h.
#include "denoise/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "flashdllm/params.h"

namespace flashdllm {

TokenLogprob row_logprob(std::span<const float> row, int32_t token, int64_t top_n, const LogprobIds& ids) {
  const auto V = static_cast<int64_t>(row.size());
  FDLLM_CHECK_ARG(token >= 0 && token < V, "logprobs: token {} is outside the logits row's [0, {})", token, V);
  FDLLM_CHECK_ARG(top_n >= 0 && top_n <= SamplingParams::kMaxTopLogprobs, "logprobs: top_n {} is outside [0, {}]",
                  top_n, SamplingParams::kMaxTopLogprobs);
  const float* r = row.data();
  auto logit = [&](int64_t v) {
    return v == ids.suppress ? -std::numeric_limits<double>::infinity() : static_cast<double>(r[v]);
  };
  // logsumexp, shifted by the row's maximum (every exp in (0, 1]); float64 sums over V terms.
  double mx = -std::numeric_limits<double>::infinity();
  bool finite = true;
  for (int64_t v = 0; v < V; ++v) {
    if (!std::isfinite(r[v])) finite = false;
    mx = std::max(mx, logit(v));
  }
  TokenLogprob out;
  out.token = token;
  if (!finite || !std::isfinite(mx)) {
    out.logprob = std::numeric_limits<float>::quiet_NaN();
    return out;
  }
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(logit(v) - mx);
  const double lse = mx + std::log(sum);
  out.logprob = static_cast<float>(logit(token) - lse);
  if (top_n == 0) return out;
  // The top_n largest logits among the listable ids: one pass keeping a sorted list of top_n.
  std::vector<int32_t> best;
  best.reserve(static_cast<size_t>(top_n) + 1);
  auto better = [&](int32_t a, int32_t b) { return r[a] > r[b] || (r[a] == r[b] && a < b); };
  for (int64_t v = 0; v < V; ++v) {
    if (v == ids.hidden || v == ids.suppress) continue;
    const auto id = static_cast<int32_t>(v);
    if (static_cast<int64_t>(best.size()) == top_n && !better(id, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), id, better), id);
    if (static_cast<int64_t>(best.size()) > top_n) best.pop_back();
  }
  for (int32_t id : best) out.top.push_back({id, static_cast<float>(logit(id) - lse)});
  return out;
}

void LogprobReader::fetch(Backend& backend, Tensor rows) {
  FDLLM_CHECK_ARG(rows.dtype == DType::kF32 && rows.ndim == 2 && rows.rows() >= 1,
                  "logprobs: the logits rows must be F32 [n >= 1, V], got {}", rows.describe());
  rows_ = rows.rows();
  cols_ = rows.row_size();
  host_.resize(static_cast<size_t>(rows_ * cols_));
  backend.copy_to_host(host_.data(), rows);
}

TokenLogprob LogprobReader::at(int64_t i, int32_t token, int64_t top_n, const LogprobIds& ids) const {
  FDLLM_ASSERT_MSG(i >= 0 && i < rows_, "logprobs: row {} of {} fetched", i, rows_);
  return row_logprob(std::span<const float>(host_.data() + i * cols_, static_cast<size_t>(cols_)), token, top_n, ids);
}

}  // namespace flashdllm
