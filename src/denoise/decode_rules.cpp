#include "denoise/decode_rules.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace flashdllm {

std::vector<int64_t> quota_schedule(int64_t n_masked, int64_t steps) {
  FDLLM_CHECK_ARG(steps > 0, "steps per block must be positive, got {}", steps);
  FDLLM_CHECK_ARG(n_masked >= 0, "number of masked positions must be >= 0, got {}", n_masked);
  std::vector<int64_t> q(static_cast<size_t>(steps), n_masked / steps);
  for (int64_t i = 0; i < n_masked % steps; ++i) q[static_cast<size_t>(i)] += 1;
  return q;
}

namespace {
std::vector<int64_t> order_by_confidence(std::span<const double> conf) {
  std::vector<int64_t> idx(conf.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return conf[a] > conf[b]; });
  return idx;
}
}  // namespace

std::vector<int64_t> top_k_indices(std::span<const double> conf, int64_t k) {
  std::vector<int64_t> idx = order_by_confidence(conf);
  k = std::clamp<int64_t>(k, 0, static_cast<int64_t>(idx.size()));
  idx.resize(static_cast<size_t>(k));
  return idx;
}

std::vector<int64_t> threshold_indices(std::span<const double> conf, double threshold) {
  std::vector<int64_t> idx = order_by_confidence(conf);
  if (idx.empty()) return idx;
  size_t n = 1;
  while (n < idx.size() && conf[idx[n]] >= threshold) ++n;
  idx.resize(n);
  return idx;
}

}  // namespace flashdllm
