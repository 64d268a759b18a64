// Small, pure decision rules shared by the denoisers (unit-tested in tests/denoise).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace flashdllm {

/// LLaDA's per-block schedule (reference §B, generate.py get_num_transfer_tokens): `n_masked`
/// tokens over `steps` steps, base = n / steps each, the first n % steps steps get one more.
/// Throws Error(kInvalidArgument) if steps <= 0 or n_masked < 0.
std::vector<int64_t> quota_schedule(int64_t n_masked, int64_t steps);

/// Indices of the `k` largest confidences (descending; ties -> lower index first). k is clamped
/// to [0, conf.size()]. (LLaDA low-confidence remasking: commit the top-k.)
std::vector<int64_t> top_k_indices(std::span<const double> conf, int64_t k);

/// Confidence-threshold rule (Fast-dLLM `get_transfer_index` with threshold; Flash-dLLM ε):
/// every index with conf >= threshold, plus the single most confident one even if below.
/// Returned in descending confidence order (ties -> lower index first). Empty input -> empty.
std::vector<int64_t> threshold_indices(std::span<const double> conf, double threshold);

}  // namespace flashdllm
