// Mixture-of-experts ops: moe_route and moe_experts (kernels/cuda/moe.h). Nothing here waits for
// the device: the sort, the tile list and the grouped GEMMs' work all stay on it, and every grid is
// bounded from T, k and E alone, so Backend::run_recorded captures and replays a MoE layer loop.
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {
namespace {

// Byte offset `off` rounded up to 16.
constexpr size_t align16(size_t off) noexcept { return (off + 15) / 16 * 16; }

}  // namespace

void CudaBackend::moe_route(Tensor router_logits, Tensor expert_bias, const MoeRouting& routing, Tensor expert_ids,
                            Tensor expert_weights) {
  static constexpr const char* kOp = "moe_route";
  const int64_t T = opcheck::expect_moe_route_operands(router_logits, expert_bias, routing, expert_ids, expert_weights,
                                                       DeviceKind::kCUDA);
  const int64_t E = routing.n_experts, k = routing.top_k;
  FDLLM_CHECK(E <= kernels::kMoeMaxExperts, ErrorCode::kUnsupported,
              "{}: {} experts (the CUDA router supports at most {})", kOp, E, kernels::kMoeMaxExperts);
  if (T == 0) return;
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::MoeRouteArgs a;
  a.logits = router_logits.ptr<float>();
  a.ids = expert_ids.ptr<int32_t>();
  a.weights = expert_weights.ptr<float>();
  a.bias = routing.expert_bias ? expert_bias.ptr<float>() : nullptr;
  a.tokens = T;
  a.n_experts = static_cast<int>(E);
  a.top_k = static_cast<int>(k);
  a.sigmoid = routing.score == RouterScore::kSigmoid;
  const bool grouped = routing.group_limited();  // else every expert is a candidate
  a.n_groups = grouped ? routing.n_groups : 1;
  a.topk_groups = grouped ? routing.topk_groups : 1;
  a.renormalize = routing.renormalize && k > 1;  // top-1 keeps its score (core/moe_routing.h)
  a.scaling = routing.scaling;
  kernels::moe_route_f32(a, stream_);
  after_op(kOp);
}

void CudaBackend::moe_experts(Tensor x, Tensor expert_ids, Tensor expert_weights, Tensor w_gate_up, Tensor w_down,
                              Tensor out, bool accumulate, Tensor scratch) {
  static constexpr const char* kOp = "moe_experts";
  const opcheck::MoeExpertsShape shape = opcheck::expect_moe_experts_operands(
      x, expert_ids, expert_weights, w_gate_up, w_down, out, scratch, DType::kBF16, DeviceKind::kCUDA);
  const int64_t T = shape.T, D = shape.D, k = shape.k, E = shape.E, F = shape.F;
  FDLLM_CHECK(E >= 1 && E <= kernels::kMoeMaxExperts && k <= kernels::kMoeMaxTopK, ErrorCode::kUnsupported,
              "{}: {} experts, top_k {} (the CUDA kernels support at most {} experts and top_k {})", kOp, E, k,
              kernels::kMoeMaxExperts, kernels::kMoeMaxTopK);
  if (T == 0) return;
  // Scratch (16-byte aligned regions): y F32 [M, D] | gate|up BF16 [M, 2F] | SwiGLU BF16 [M, F] | the
  // int32 sort and tile list (moe_meta_ints). moe_scratch_elements covers it (backend.h).
  const int64_t M = T * k;
  auto* base = static_cast<char*>(scratch.data);
  const size_t gu_off = align16(static_cast<size_t>(M * D) * 4);
  const size_t act_off = align16(gu_off + static_cast<size_t>(M * 2 * F) * 2);
  const size_t meta_off = align16(act_off + static_cast<size_t>(M * F) * 2);
  FDLLM_CHECK_ARG(meta_off + static_cast<size_t>(kernels::moe_meta_ints(M, E)) * 4 <= scratch.nbytes(),
                  "{}: scratch {} is too small for the device sort of {} pairs over {} experts", kOp,
                  scratch.describe(), M, E);
  for (const Tensor* t : {&x, &expert_ids, &expert_weights, &w_gate_up, &w_down, &out})
    FDLLM_CHECK_ARG(!overlap(scratch, *t), "{}: 'scratch' overlaps another operand ({})", kOp, t->describe());
  auto* y = reinterpret_cast<float*>(base);
  auto* gu = reinterpret_cast<__nv_bfloat16*>(base + gu_off);
  auto* act = reinterpret_cast<__nv_bfloat16*>(base + act_off);
  auto* meta = reinterpret_cast<int32_t*>(base + meta_off);
  const kernels::MoeMeta m = kernels::moe_meta_view(meta, M);
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::moe_plan(expert_ids.ptr<int32_t>(), M, static_cast<int>(E), meta, flags(), stream_);
  kernels::MoeGemmArgs g;
  g.tiles = m.tiles;
  g.n_tiles = m.n_tiles;
  g.max_tiles = kernels::moe_max_tiles(M, E);
  g.a = bf16(x);  // gate|up: x's rows gathered through the sort
  g.pair_of_slot = m.pair_of_slot;
  g.top_k = static_cast<int>(k);
  g.w = bf16(w_gate_up);
  g.out = gu;
  g.out_f32 = false;
  g.n = 2 * F;
  g.k = D;
  kernels::moe_grouped_gemm_bf16(g, stream_);
  kernels::swiglu_bf16(gu, M, F, act, stream_);
  g.a = act;  // down: the SwiGLU rows in group order, fp32 out
  g.pair_of_slot = nullptr;
  g.w = bf16(w_down);
  g.out = y;
  g.out_f32 = true;
  g.n = D;
  g.k = F;
  kernels::moe_grouped_gemm_bf16(g, stream_);
  kernels::MoeCombineArgs c;
  c.y = y;
  c.ids = expert_ids.ptr<int32_t>();
  c.weights = expert_weights.ptr<float>();
  c.slot_of_pair = m.slot_of_pair;
  c.out = bf16(out);
  c.accumulate = accumulate;
  c.tokens = T;
  c.top_k = static_cast<int>(k);
  c.d = D;
  kernels::moe_combine_bf16(c, stream_);
  after_op(kOp);
}

}  // namespace flashdllm::cuda_impl
