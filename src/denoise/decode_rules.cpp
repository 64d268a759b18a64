#include "denoise/decode_rules.h"

#include <algorithm>
#include <cmath>
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

std::vector<float> dream_timesteps(int64_t steps, float eps) {
  FDLLM_CHECK_ARG(steps > 0 && steps < (int64_t{1} << 24), "dream_timesteps: steps must be in [1, 2^24), got {}",
                  steps);
  FDLLM_CHECK_ARG(eps > 0.0f && eps < 1.0f, "dream_timesteps: eps must be in (0, 1), got {}", eps);
  const int64_t n = steps + 1;
  const float start = 1.0f, end = eps;
  const float step = (end - start) / static_cast<float>(n - 1);
  const int64_t half = n / 2;
  std::vector<float> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] =
        i < half ? std::fma(step, static_cast<float>(i), start) : std::fma(-step, static_cast<float>(n - i - 1), end);
  return t;
}

int64_t dream_transfer_count(int64_t n_masked, int64_t i, std::span<const float> t) {
  const auto steps = static_cast<int64_t>(t.size()) - 1;
  FDLLM_CHECK_ARG(i >= 0 && i < steps && n_masked >= 0, "dream_transfer_count: step {} of {} with {} masks", i, steps,
                  n_masked);
  if (i == steps - 1) return n_masked;
  const float ratio = t[static_cast<size_t>(i + 1)] / t[static_cast<size_t>(i)];
  const float k = static_cast<float>(n_masked) * (1.0f - ratio);
  return std::clamp<int64_t>(static_cast<int64_t>(k), 0, n_masked);
}

}  // namespace flashdllm
