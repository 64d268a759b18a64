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

/// Dream's timesteps torch.linspace(1, eps, steps + 1) in float32 as PyTorch's CUDA kernel computes
/// them (Dream-org generation_utils.py `_sample`; aten RangeFactories.cu): step = (eps − 1) / steps,
/// the first half 1 + step·i, the second eps − step·(steps − i), each a fused multiply-add.
/// Throws Error(kInvalidArgument) if steps <= 0 or eps is not in (0, 1).
std::vector<float> dream_timesteps(int64_t steps, float eps);

/// Tokens Dream's sampler commits at step i of `steps` with n_masked masks left: int(n·(1 − t[i+1]/t[i]))
/// in float32, truncated; the last step commits all n_masked. t = dream_timesteps(steps, eps).
int64_t dream_transfer_count(int64_t n_masked, int64_t i, std::span<const float> t);

}  // namespace flashdllm
