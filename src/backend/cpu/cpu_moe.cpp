// The CPU oracle of the mixture-of-experts FFN (cpu_moe.h): routing, then the rows permuted into
// per-expert groups (a counting sort by expert), each group's SwiGLU expert as two matrix products
// (dot products summed in double), and the weighted un-permutation. Every row's result is computed from its own values
// in a fixed order (its experts ascending, as upstream's index_add_ loop over experts), so it does not depend on its
// batch mates: the same tokens alone or in any batch (the engine's batch invariance).
#include "backend/cpu/cpu_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/operand_checks.h"
#include "core/check.h"

namespace flashdllm::cpu {
namespace {

/// out [n, N] = x [n, K] · w [N, K]ᵀ, each element one dot_f64 (double sums, one rounding): an
/// element depends on its own row and weight row only, never on n (an SGEMM may change its kernel,
/// hence its summation order, with the group's row count, and the group is the batch's business).
void gemm_nt(int threads, const float* x, const float* w, float* out, int64_t n, int64_t N, int64_t K) {
#pragma omp parallel for num_threads(threads) if (n * N * K >= (int64_t{1} << 16))
  for (int64_t j = 0; j < N; ++j)  // a weight row stays in cache while the group's rows pass it
    for (int64_t r = 0; r < n; ++r) out[r * N + j] = static_cast<float>(dot_f64(x + r * K, w + j * K, K));
}

/// s[i] = score(z[i]) for one row of router logits: softmax over the row or an independent sigmoid,
/// each computed in double and rounded to fp32 (upstream computes them in fp32).
void router_scores(RouterScore score, const float* z, int64_t E, float* s) {
  if (score == RouterScore::kSigmoid) {
    for (int64_t i = 0; i < E; ++i) s[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(z[i]))));
    return;
  }
  double m = -std::numeric_limits<double>::infinity(), sum = 0.0;
  for (int64_t i = 0; i < E; ++i) m = std::max(m, static_cast<double>(z[i]));
  for (int64_t i = 0; i < E; ++i) sum += std::exp(static_cast<double>(z[i]) - m);
  for (int64_t i = 0; i < E; ++i) s[i] = static_cast<float>(std::exp(static_cast<double>(z[i]) - m) / sum);
}

}  // namespace

void moe_route(int threads, Tensor router_logits, Tensor expert_bias, const MoeRouting& routing, Tensor expert_ids,
               Tensor expert_weights) {
  const int64_t T = opcheck::expect_moe_route_operands(router_logits, expert_bias, routing, expert_ids, expert_weights,
                                                       DeviceKind::kCPU);
  const int64_t E = routing.n_experts, k = routing.top_k;
  const float* bias = routing.expert_bias ? expert_bias.ptr<float>() : nullptr;
  const int64_t group = E / routing.n_groups;  // experts per group
  const bool grouped = routing.group_limited();
#pragma omp parallel num_threads(threads) if (T * E >= (int64_t{1} << 14))
  {
    std::vector<float> s(static_cast<size_t>(E)), key(static_cast<size_t>(E));
    std::vector<int32_t> order(static_cast<size_t>(E)), gorder(static_cast<size_t>(routing.n_groups));
    std::vector<float> gscore(static_cast<size_t>(routing.n_groups));
#pragma omp for
    for (int64_t t = 0; t < T; ++t) {
      const float* z = router_logits.ptr<float>() + t * E;
      int32_t* ids = expert_ids.ptr<int32_t>() + t * k;
      float* w = expert_weights.ptr<float>() + t * k;
      if (!std::all_of(z, z + E, [](float v) { return std::isfinite(v); })) {
        // NaN weights: the logits turn non-finite and the denoiser reports the slot.
        for (int64_t j = 0; j < k; ++j) {
          ids[j] = static_cast<int32_t>(j);
          w[j] = std::numeric_limits<float>::quiet_NaN();
        }
        continue;
      }
      router_scores(routing.score, z, E, s.data());
      for (int64_t i = 0; i < E; ++i) key[static_cast<size_t>(i)] = s[static_cast<size_t>(i)] + (bias ? bias[i] : 0.0f);
      std::iota(order.begin(), order.end(), 0);
      const auto by_key = [&](int32_t a, int32_t b) {  // descending key, ties: the lower index first
        const float ka = key[static_cast<size_t>(a)], kb = key[static_cast<size_t>(b)];
        return ka > kb || (ka == kb && a < b);
      };
      int64_t candidates = E;
      if (grouped) {
        // Group-limited selection: a group scores the sum of its two best keys; the experts of the
        // topk_groups best groups (ties: the lower group) are the candidates, moved to the front.
        for (int64_t g = 0; g < routing.n_groups; ++g) {
          const auto first = order.begin() + g * group;
          std::partial_sort(first, first + 2, first + group, by_key);
          gscore[static_cast<size_t>(g)] = key[static_cast<size_t>(first[0])] + key[static_cast<size_t>(first[1])];
        }
        std::iota(gorder.begin(), gorder.end(), 0);
        std::partial_sort(gorder.begin(), gorder.begin() + routing.topk_groups, gorder.end(),
                          [&](int32_t a, int32_t b) {
                            const float ga = gscore[static_cast<size_t>(a)], gb = gscore[static_cast<size_t>(b)];
                            return ga > gb || (ga == gb && a < b);
                          });
        for (int64_t j = 0; j < routing.topk_groups; ++j)
          for (int64_t i = 0; i < group; ++i)
            order[static_cast<size_t>(j * group + i)] =
                static_cast<int32_t>(gorder[static_cast<size_t>(j)] * group + i);
        candidates = routing.topk_groups * group;
      }
      std::partial_sort(order.begin(), order.begin() + k, order.begin() + candidates, by_key);
      float total = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        ids[j] = order[static_cast<size_t>(j)];
        w[j] = s[static_cast<size_t>(ids[j])];
        total += w[j];
      }
      const bool renorm = routing.renormalize && k > 1;  // top-1 keeps its score (LLaDA2, DeepSeek-V3)
      for (int64_t j = 0; j < k; ++j) {
        if (renorm) w[j] /= total + 1e-20f;
        w[j] *= routing.scaling;
      }
    }
  }
}

void moe_experts(int threads, Tensor x, Tensor expert_ids, Tensor expert_weights, Tensor w_gate_up, Tensor w_down,
                 Tensor out, bool accumulate, Tensor scratch) {
  static constexpr const char* kOp = "moe_experts";
  // Plain locals, not a structured binding: OpenMP regions and lambdas capture them (clang 14 refuses
  // to capture a binding).
  const opcheck::MoeExpertsShape shape = opcheck::expect_moe_experts_operands(
      x, expert_ids, expert_weights, w_gate_up, w_down, out, scratch, DType::kF32, DeviceKind::kCPU);
  const int64_t T = shape.T, D = shape.D, k = shape.k, E = shape.E, F = shape.F;
  if (T == 0) return;
  const int32_t* ids = expert_ids.ptr<int32_t>();
  // Counting sort of the T·k (row, choice) pairs by expert: slot[t·k + j] = its row in the groups.
  std::vector<int64_t> start(static_cast<size_t>(E) + 1, 0), slot(static_cast<size_t>(T * k));
  for (int64_t i = 0; i < T * k; ++i) {
    FDLLM_CHECK_ARG(ids[i] >= 0 && ids[i] < E, "{}: expert id {} at row {} is outside [0, {})", kOp, ids[i], i / k, E);
    ++start[static_cast<size_t>(ids[i]) + 1];
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t i = 0; i < T * k; ++i) slot[static_cast<size_t>(i)] = next[static_cast<size_t>(ids[i])]++;
  }
  const int64_t M = T * k;
  float* xp = scratch.ptr<float>();  // [M, D] the permuted rows
  float* gu = xp + M * D;            // [M, 2F]
  float* act = gu + M * 2 * F;       // [M, F]
  float* y = act + M * F;            // [M, D] expert outputs
  float* acc = y + M * D;            // [T, D] the weighted sums
#pragma omp parallel for num_threads(threads) if (M * D >= (int64_t{1} << 16))
  for (int64_t i = 0; i < M; ++i)
    std::memcpy(xp + slot[static_cast<size_t>(i)] * D, x.ptr<float>() + (i / k) * D, static_cast<size_t>(D) * 4);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = start[static_cast<size_t>(e)], n = start[static_cast<size_t>(e) + 1] - b;
    if (n == 0) continue;  // an expert no row chose
    gemm_nt(threads, xp + b * D, w_gate_up.ptr<float>() + e * 2 * F * D, gu + b * 2 * F, n, 2 * F, D);
#pragma omp parallel for num_threads(threads) if (n * F >= (int64_t{1} << 16))
    for (int64_t r = b; r < b + n; ++r)
      for (int64_t f = 0; f < F; ++f) act[r * F + f] = silu(gu[r * 2 * F + f]) * gu[r * 2 * F + F + f];
    gemm_nt(threads, act + b * F, w_down.ptr<float>() + e * D * F, y + b * D, n, D, F);
  }
  // Un-permutation: each row's weighted expert outputs summed in ascending expert order, from 0.
#pragma omp parallel for num_threads(threads) if (T * D * k >= (int64_t{1} << 16))
  for (int64_t t = 0; t < T; ++t) {
    float* a = acc + t * D;
    std::fill(a, a + D, 0.0f);
    std::vector<std::pair<int32_t, int64_t>> order;
    for (int64_t j = 0; j < k; ++j) order.emplace_back(ids[t * k + j], j);
    std::sort(order.begin(), order.end());
    for (const auto& [e, j] : order) {
      const float w = expert_weights.ptr<float>()[t * k + j];
      const float* ye = y + slot[static_cast<size_t>(t * k + j)] * D;
      for (int64_t i = 0; i < D; ++i) a[i] += ye[i] * w;
    }
    float* o = out.ptr<float>() + t * D;
    for (int64_t i = 0; i < D; ++i) o[i] = accumulate ? o[i] + a[i] : a[i];
  }
}

}  // namespace flashdllm::cpu
