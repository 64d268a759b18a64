// Dream's token selection on one logits row (cpu_ops.h select_row_dream; SelectParams::dream_rule).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace flashdllm::cpu {

SelectResult select_row_dream(const float* logits, int64_t V, uint32_t row_key, const SelectParams& p) {
  const bool sample = p.temperature > 0.0;
  // z = logits / T (T > 0), upstream's fp32 division; the suppressed token is removed outright.
  std::vector<double> z(static_cast<size_t>(V));
  std::vector<char> kept(static_cast<size_t>(V), 1);
  for (int64_t v = 0; v < V; ++v)
    z[v] = sample ? static_cast<double>(logits[v] / static_cast<float>(p.temperature)) : static_cast<double>(logits[v]);
  if (p.suppress_token >= 0 && p.suppress_token < V) kept[p.suppress_token] = 0;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  auto max_kept = [&] {
    double m = neg_inf;
    for (int64_t v = 0; v < V; ++v)
      if (kept[v]) m = std::max(m, z[v]);
    return m;
  };
  if (p.top_p < 1.0) {
    // top_p_logits: sort descending, drop the tokens past cumulative probability top_p, keeping the
    // first one that crosses it (the removal mask shifted right by one).
    std::vector<int32_t> order;
    order.reserve(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v)
      if (kept[v]) order.push_back(static_cast<int32_t>(v));
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
    const double m = order.empty() ? 0.0 : z[order[0]];
    double total = 0.0;
    for (int32_t v : order) total += std::exp(z[v] - m);
    double cum = 0.0;
    bool drop = false;
    for (int32_t v : order) {
      if (drop) kept[v] = 0;
      cum += std::exp(z[v] - m) / total;
      if (cum > p.top_p) drop = true;  // the next tokens go; this one stays
    }
  }
  if (p.top_k > 0 && p.top_k < V) {
    // top_k_logits: remove every logit below the k-th largest (ties with it stay).
    std::vector<double> vals;
    vals.reserve(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) vals.push_back(kept[v] ? z[v] : neg_inf);
    std::nth_element(vals.begin(), vals.begin() + (p.top_k - 1), vals.end(), std::greater<double>());
    const double kth = vals[static_cast<size_t>(p.top_k - 1)];
    for (int64_t v = 0; v < V; ++v)
      if (kept[v] && z[v] < kth) kept[v] = 0;
  }
  SelectResult r;
  double best = neg_inf;
  for (int64_t v = 0; v < V; ++v) {
    if (!kept[v] || v == p.exclude_token) continue;
    const double s = sample ? static_cast<double>(logits[v]) + gumbel_term(p, row_key, static_cast<uint32_t>(v)) : z[v];
    if (s > best || r.token < 0) {
      best = s;
      r.token = static_cast<int32_t>(v);
    }
  }
  if (r.token < 0) return r;  // nothing kept (cannot happen for finite rows)
  const double m = max_kept();
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v)
    if (kept[v]) sum += std::exp(z[v] - m);
  auto prob = [&](int64_t v) { return kept[v] ? std::exp(z[v] - m) / sum : 0.0; };
  switch (p.confidence) {
    case SelectConfidence::kProbability: r.confidence = prob(r.token); break;
    case SelectConfidence::kMargin: {
      double p1 = 0.0, p2 = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        const double q = prob(v);
        if (q > p1) {
          p2 = p1;
          p1 = q;
        } else if (q > p2) {
          p2 = q;
        }
      }
      r.confidence = p1 - p2;
      break;
    }
    case SelectConfidence::kNegEntropy: {
      double h = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        const double q = prob(v);
        h += q * std::log(q + 1e-10);
      }
      r.confidence = h;
      break;
    }
  }
  if (!std::isfinite(m)) r.confidence = std::numeric_limits<double>::quiet_NaN();
  return r;
}

}  // namespace flashdllm::cpu
