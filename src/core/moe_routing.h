// The router of a mixture-of-experts FFN as typed switches, shared by the model config (what a
// checkpoint's router is, model_config.h) and the backend op that runs it (Backend::moe_route).
// One description covers the routers of the families in view, so a new one is a configuration:
//
//   family        score    top-k  renormalise  expert bias        groups (n / top)  scaling  shared expert
//   LLaDA-MoE     softmax  8/64   no           no (flag, unused)  1 / 1             1        none
//   LLaDA2-mini   sigmoid  8/256  yes          yes (selection)    8 / 4             2.5      1 (width 512)
//
// Sources: LLaDA-MoE's LLaDAMoESparseMoeBlock (InfiniTensor/InfiniLM @ 0a7e522 modeling_lladamoe.py,
// OLMoE's block: softmax over all experts in fp32, top-k of the probabilities, norm_topk_prob
// hard-coded False, weights = the k probabilities); LLaDA2's config (shared/data/llada2-mini).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace flashdllm {

/// How a router turns its logits into scores.
enum class RouterScore : uint8_t {
  kSoftmax,  ///< softmax over all experts (LLaDA-MoE, OLMoE, Mixtral)
  kSigmoid,  ///< independent sigmoid per expert (DeepSeek-V3, LLaDA2)
};

/// "softmax" / "sigmoid".
constexpr const char* router_score_name(RouterScore s) noexcept {
  return s == RouterScore::kSigmoid ? "sigmoid" : "softmax";
}

/// One MoE layer's routing. Per token t with router logits z_t [n_experts]:
///   s = score(z_t)                                   (softmax or sigmoid, fp32 or better)
///   selection key = s (+ expert_bias when expert_bias; group-limited: the experts are n_groups
///                   consecutive groups, a group scores the sum of its two best keys, and only the
///                   experts of the topk_groups best groups are candidates; ties: the lower group)
///   experts = the top_k keys (ties: the lower expert index first)
///   weights = s[experts] (renormalise, when top_k > 1: divided by their sum + 1e-20), times scaling
/// (LLaDA2's LLaDA2MoeGate and DeepSeek-V3's noaux_tc gate: the bias steers the selection only,
/// and a top-1 router keeps its score.)
/// The CPU and CUDA backends implement every switch (a backend lacking one refuses it with
/// Error(kUnsupported) naming the switch); the config parser refuses unsupported values first,
/// naming the config.json field.
struct MoeRouting {
  int32_t n_experts = 0;  ///< routed experts E (0 = a dense FFN)
  int32_t top_k = 0;      ///< experts per token k, in [1, E]
  RouterScore score = RouterScore::kSoftmax;
  bool renormalize = false;  ///< weights divided by their sum over the k (norm_topk_prob)
  bool expert_bias = false;  ///< a learned per-expert bias on the selection key
  int32_t n_groups = 1;      ///< group-limited selection: experts split into n_groups groups ...
  int32_t topk_groups = 1;   ///< ... of which the topk_groups best hold the candidates (1 / 1 = off)
  float scaling = 1.0f;      ///< routed_scaling_factor: multiplies the weights

  bool on() const noexcept { return n_experts > 0; }
  /// Whether the group limit removes candidates (topk_groups == n_groups keeps every expert).
  bool group_limited() const noexcept { return n_groups > 1 && topk_groups < n_groups; }
};

/// Why `r` is not a valid router ("" when it is), naming the switch: top_k in [1, n_experts];
/// n_groups >= 1 dividing n_experts; topk_groups in [1, n_groups]; with groups, at least two experts
/// per group (a group's score is its two best keys) and top_k <= topk_groups x the group size;
/// a finite scaling. Used by the config parsers (with the config field's name) and the backends.
inline std::string moe_routing_error(const MoeRouting& r) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (r.n_experts < 1 || r.top_k < 1 || r.top_k > r.n_experts)
    return "top_k " + n(r.top_k) + " must be in [1, n_experts = " + n(r.n_experts) + "]";
  if (r.n_groups < 1 || r.n_experts % r.n_groups != 0)
    return "n_groups " + n(r.n_groups) + " must be >= 1 and divide n_experts = " + n(r.n_experts);
  if (r.topk_groups < 1 || r.topk_groups > r.n_groups)
    return "topk_groups " + n(r.topk_groups) + " must be in [1, n_groups = " + n(r.n_groups) + "]";
  const int64_t group = r.n_experts / r.n_groups;
  if (r.n_groups > 1 && group < 2)
    return "group-limited routing needs >= 2 experts per group (n_experts " + n(r.n_experts) + ", n_groups " +
           n(r.n_groups) + ")";
  if (r.top_k > int64_t{r.topk_groups} * group)
    return "top_k " + n(r.top_k) + " exceeds the " + n(int64_t{r.topk_groups} * group) +
           " experts of the topk_groups = " + n(r.topk_groups) + " best groups";
  if (!std::isfinite(r.scaling)) return "scaling " + std::to_string(r.scaling) + " must be finite";
  return {};
}

}  // namespace flashdllm
