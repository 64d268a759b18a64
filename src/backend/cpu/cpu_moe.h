// The CPU backend's mixture-of-experts ops (Backend::moe_route, Backend::moe_experts; the algorithm
// in core/moe_routing.h and backend.h). Internal to the CPU backend.
#pragma once

#include "backend/backend.h"

namespace flashdllm::cpu {

/// Backend::moe_route on host tensors with `threads` OpenMP threads.
void moe_route(int threads, Tensor router_logits, Tensor expert_bias, const MoeRouting& routing, Tensor expert_ids,
               Tensor expert_weights);

/// Backend::moe_experts on host tensors with `threads` OpenMP threads.
void moe_experts(int threads, Tensor x, Tensor expert_ids, Tensor expert_weights, Tensor w_gate_up, Tensor w_down,
                 Tensor out, bool accumulate, Tensor scratch);

}  // namespace flashdllm::cpu
