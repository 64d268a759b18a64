// Row-level primitives of the CPU backend. They define the exact semantics every other backend is
// tested against (tests/kernels compare CUDA ops with the CPU backend built from these).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "core/philox.h"

namespace flashdllm::cpu {

/// out = x * rsqrt(mean(x^2) + eps) * w, mean accumulated in double (reference §A.3 RMSNorm).
inline void rmsnorm_row(const float* x, const float* w, int64_t D, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(D) + static_cast<double>(eps)));
  for (int64_t i = 0; i < D; ++i) out[i] = (x[i] * r) * w[i];
}

/// Half-rotation RoPE of one head vector u [Dh] (reference §A.3, HF `rotate_half`):
/// out[i] = u[i]·cos_i − u[i+Dh/2]·sin_i,  out[i+Dh/2] = u[i+Dh/2]·cos_i + u[i]·sin_i.
inline void rope_head(const float* u, const float* cos, const float* sin, int64_t Dh, float* out) {
  const int64_t half = Dh / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = u[i], b = u[i + half];
    out[i] = a * cos[i] + (-b) * sin[i];
    out[i + half] = b * cos[i] + a * sin[i];
  }
}

/// Σ a[i]·b[i] in double with eight independent partial sums (vectorisable; the order differs
/// from a sequential sum by far less than fp32 rounding).
inline double dot_f64(const float* a, const float* b, int64_t n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t n8 = n / 8 * 8;
  int64_t i = 0;
  for (; i < n8; i += 8)
    for (int u = 0; u < 8; ++u) s[u] += static_cast<double>(a[i + u]) * static_cast<double>(b[i + u]);
  double t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) t += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return t;
}

/// One query row of one head over keys [k_begin, k_end) of a store with row stride `stride`
/// (k and v point at the head's first column). Scores and softmax in double. The definition of the
/// CPU attention: CpuBackend::attention runs cpu::attend_rows (cpu_attention.h), which blocks rows
/// and vectorises but returns exactly these bits.
inline void attend_row(const float* q, const float* k, const float* v, int64_t stride, int64_t k_begin, int64_t k_end,
                       int64_t Dh, float scale, std::vector<double>& scores, std::vector<double>& acc, float* out) {
  const int64_t n = k_end - k_begin;
  scores.resize(static_cast<size_t>(n));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    double d = dot_f64(q, k + (k_begin + j) * stride, Dh) * scale;
    scores[j] = d;
    m = std::max(m, d);
  }
  double sum = 0.0;
  std::fill(acc.begin(), acc.end(), 0.0);
  for (int64_t j = 0; j < n; ++j) {
    const double p = std::exp(scores[j] - m);
    sum += p;
    const float* vr = v + (k_begin + j) * stride;
    for (int64_t i = 0; i < Dh; ++i) acc[i] += p * vr[i];
  }
  for (int64_t i = 0; i < Dh; ++i) out[i] = static_cast<float>(acc[i] / sum);
}

/// SiLU(x) = x / (1 + e^-x) in fp32 (as torch.nn.functional.silu).
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

/// Gumbel perturbation −τ·ln(−ln u) of logit index v for a row (float64, counter-based).
inline double gumbel_term(const SelectParams& p, uint32_t row_key, uint32_t v) {
  const double u = philox_uniform(p.seed, p.step, row_key, v);
  return -p.temperature * std::log(-std::log(u));
}

struct SelectResult {
  int32_t token = -1;
  double confidence = 0.0;
};

/// Token choice and confidence of one logits row (reference §B; see SelectParams):
/// token = first argmax of logit (+ Gumbel term when τ > 0), suppress_token and exclude_token excluded;
/// confidence = softmax(logits without suppressed entries)[token], in f64 or f32.
/// Dream's rule (SelectParams::dream_rule; Dream-org generation_utils.py sample_tokens): z = logits / T
/// (T > 0), top_p then top_k filtering, p = softmax of the kept z in double; token = first argmax of
/// the kept z (T = 0) or of logits + Gumbel term (T > 0; the same draw as from p), exclude_token never
/// chosen; confidence p(token), top-1 − top-2 of p, or Σ p·log(p + 1e-10). NaN for a non-finite row.
SelectResult select_row_dream(const float* logits, int64_t V, uint32_t row_key, const SelectParams& p);

inline SelectResult select_row(const float* logits, int64_t V, uint32_t row_key, const SelectParams& p) {
  if (p.dream_rule) return select_row_dream(logits, V, row_key, p);
  SelectResult r;
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t v = 0; v < V; ++v) {
    if (v == p.suppress_token || v == p.exclude_token) continue;
    double s = logits[v];
    if (p.temperature > 0.0) s += gumbel_term(p, row_key, static_cast<uint32_t>(v));
    if (s > best || r.token < 0) {
      best = s;
      r.token = static_cast<int32_t>(v);
    }
  }
  auto excluded = [&](int64_t v) {
    return v == p.suppress_token || v == p.conf_suppress_a || v == p.conf_suppress_b;
  };
  if (excluded(r.token)) {
    r.confidence = 0.0;
    return r;
  }
  if (p.confidence_f64) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < V; ++v)
      if (!excluded(v)) m = std::max(m, static_cast<double>(logits[v]));
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v)
      if (!excluded(v)) sum += std::exp(static_cast<double>(logits[v]) - m);
    r.confidence = std::exp(static_cast<double>(logits[r.token]) - m) / sum;
  } else {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < V; ++v)
      if (!excluded(v)) m = std::max(m, logits[v]);
    float sum = 0.0f;
    for (int64_t v = 0; v < V; ++v)
      if (!excluded(v)) sum += std::exp(logits[v] - m);
    r.confidence = static_cast<double>(std::exp(logits[r.token] - m) / sum);
  }
  return r;
}

}  // namespace flashdllm::cpu
