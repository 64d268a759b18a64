// The operand checks of every backend's ops (backend.h: "every op validates shapes and dtypes and
// throws Error(kInvalidArgument) naming the op and the operand"), written once for the CPU and the
// CUDA backend. Header-only: the CUDA backend's .cu files include it too.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "core/check.h"
#include "core/fp8.h"
#include "core/moe_routing.h"
#include "core/tensor.h"
#include "core/verify_mask.h"

namespace flashdllm::opcheck {

/// t lives on `device`, has `dtype` and data (or no elements).
inline void expect(const Tensor& t, DType dtype, DeviceKind device, const char* op, const char* operand) {
  FDLLM_CHECK_ARG(t.device == device, "{}: operand '{}' ({}) is not in {}", op, operand, t.describe(),
                  device == DeviceKind::kCUDA ? "CUDA device memory" : "host memory");
  FDLLM_CHECK_ARG(t.dtype == dtype, "{}: operand '{}' must be {}, got {}", op, operand, dtype_name(dtype),
                  t.describe());
  FDLLM_CHECK_ARG(t.data != nullptr || t.numel() == 0, "{}: operand '{}' ({}) has no data", op, operand, t.describe());
}

/// t is [rows, cols] (rows() x row_size()).
inline void expect_matrix(const Tensor& t, int64_t rows, int64_t cols, const char* op, const char* operand) {
  FDLLM_CHECK_ARG(t.rows() == rows && t.row_size() == cols, "{}: operand '{}' must be [{}, {}], got {}", op, operand,
                  rows, cols, t.describe());
}

/// t has n elements.
inline void expect_numel(const Tensor& t, int64_t n, const char* op, const char* operand) {
  FDLLM_CHECK_ARG(t.numel() == n, "{}: operand '{}' must have {} elements, got {}", op, operand, n, t.describe());
}

/// Whether the bytes of a and b overlap (empty tensors overlap nothing).
inline bool overlap(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

/// An output that must not share bytes with an input.
inline void expect_disjoint(const Tensor& out, const Tensor& in, const char* op, const char* out_name,
                            const char* in_name) {
  FDLLM_CHECK_ARG(!overlap(out, in), "{}: operand '{}' must not overlap '{}'", op, out_name, in_name);
}

/// The sizes of a linear layer's product out[T, N] (+)= x[T, K] · w[N, K]ᵀ (matmul, matmul_fp8).
struct LinearShape {
  int64_t T = 0, N = 0, K = 0;
};

/// The shape checks of matmul / matmul_fp8 (the dtypes and devices are the caller's): w 2-D with
/// x's inner dimension, out [T, N] disjoint from x and w, and with an FP8 weight (w_scale non-null)
/// its block scales [ceil(N/128), ceil(K/128)]. Throws Error(kInvalidArgument) naming `op` and the
/// operand.
inline LinearShape expect_linear_shapes(const Tensor& x, const Tensor& w, const Tensor* w_scale, const Tensor& out,
                                        const char* op) {
  const LinearShape s{x.rows(), w.rows(), x.row_size()};
  FDLLM_CHECK_ARG(w.ndim == 2 && w.row_size() == s.K, "{}: x is {} but w is {} (inner dimensions differ)", op,
                  x.describe(), w.describe());
  if (w_scale != nullptr)
    FDLLM_CHECK_ARG(w_scale->ndim == 2 && w_scale->rows() == fp8_blocks(s.N) && w_scale->row_size() == fp8_blocks(s.K),
                    "{}: w_scale is {}, but w {} in 128 x 128 blocks needs [{}, {}]", op, w_scale->describe(),
                    w.describe(), fp8_blocks(s.N), fp8_blocks(s.K));
  expect_matrix(out, s.T, s.N, op, "out");
  expect_disjoint(out, x, op, "out", "x");
  expect_disjoint(out, w, op, "out", "w");
  return s;
}

/// The K/V heads of an attention op's operands (backend.h, grouped-query attention): q [*, H·Dh]
/// with H = n_heads, k [*, Hkv·Dh]; Hkv must be >= 1 and divide H. Throws Error(kInvalidArgument)
/// naming `op` otherwise.
inline int kv_heads_of(const Tensor& q, const Tensor& k, int n_heads, const char* op) {
  const int64_t HD = q.row_size(), KD = k.row_size();
  FDLLM_CHECK_ARG(n_heads > 0 && HD % n_heads == 0, "{}: {} columns of q not divisible by n_heads {}", op, HD, n_heads);
  const int64_t Dh = HD / n_heads;
  FDLLM_CHECK_ARG(Dh > 0 && KD > 0 && KD % Dh == 0 && n_heads % (KD / Dh) == 0,
                  "{}: K/V width {} is not a whole number of K/V heads of head_dim {} dividing n_heads {} (q {}, k {})",
                  op, KD, Dh, n_heads, q.describe(), k.describe());
  return static_cast<int>(KD / Dh);
}

/// The operands of Backend::attention_verify on a backend of activation dtype `act` on `device`:
/// q, out [Tq, H·Dh]; k_tile, v_tile [Tq, Hkv·Dh]; k_store, v_store [N, Hkv·Dh] (kv_heads_of);
/// key_rows I32; table I32 [n_tiles, kVerifyTileInts] (VerifyTile rows). Returns Hkv.
inline int expect_verify_operands(const Tensor& q, const Tensor& k_store, const Tensor& v_store, const Tensor& key_rows,
                                  const Tensor& k_tile, const Tensor& v_tile, const Tensor& table, int n_heads,
                                  const Tensor& out, DType act, DeviceKind device) {
  static constexpr const char* kOp = "attention_verify";
  expect(q, act, device, kOp, "q");
  expect(k_store, act, device, kOp, "k_store");
  expect(v_store, act, device, kOp, "v_store");
  expect(key_rows, DType::kI32, device, kOp, "key_rows");
  expect(k_tile, act, device, kOp, "k_tile");
  expect(v_tile, act, device, kOp, "v_tile");
  expect(table, DType::kI32, device, kOp, "table");
  expect(out, act, device, kOp, "out");
  const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows();
  const int kv_heads = kv_heads_of(q, k_store, n_heads, kOp);
  const int64_t KD = k_store.row_size();
  expect_matrix(v_store, N, KD, kOp, "v_store");
  expect_matrix(k_tile, Tq, KD, kOp, "k_tile");
  expect_matrix(v_tile, Tq, KD, kOp, "v_tile");
  expect_matrix(out, Tq, HD, kOp, "out");
  FDLLM_CHECK_ARG(table.numel() % kVerifyTileInts == 0, "{}: table must be [n_tiles, {}] (VerifyTile rows), got {}",
                  kOp, kVerifyTileInts, table.describe());
  return kv_heads;
}

/// The operands of Backend::moe_route on `device`: router_logits F32 [T, E] with E = routing.n_experts;
/// a valid routing (moe_routing_error); expert_ids I32 [T, top_k]; expert_weights F32 [T, top_k];
/// expert_bias F32 of E elements when routing.expert_bias, else empty. Returns T; throws
/// Error(kInvalidArgument) naming the op and the operand or the switch otherwise.
inline int64_t expect_moe_route_operands(const Tensor& router_logits, const Tensor& expert_bias,
                                         const MoeRouting& routing, const Tensor& expert_ids,
                                         const Tensor& expert_weights, DeviceKind device) {
  static constexpr const char* kOp = "moe_route";
  expect(router_logits, DType::kF32, device, kOp, "router_logits");
  expect(expert_ids, DType::kI32, device, kOp, "expert_ids");
  expect(expert_weights, DType::kF32, device, kOp, "expert_weights");
  const int64_t T = router_logits.rows(), E = router_logits.row_size(), k = routing.top_k;
  FDLLM_CHECK_ARG(E == routing.n_experts && k >= 1 && k <= E,
                  "{}: router_logits {} for {} experts, top_k {} (must be in [1, n_experts])", kOp,
                  router_logits.describe(), routing.n_experts, k);
  expect_matrix(expert_ids, T, k, kOp, "expert_ids");
  expect_matrix(expert_weights, T, k, kOp, "expert_weights");
  const std::string bad = moe_routing_error(routing);
  FDLLM_CHECK_ARG(bad.empty(), "{}: {}", kOp, bad);
  if (routing.expert_bias) {
    expect(expert_bias, DType::kF32, device, kOp, "expert_bias");
    FDLLM_CHECK_ARG(expert_bias.numel() == E, "{}: expert_bias {} must have {} elements", kOp, expert_bias.describe(),
                    E);
  } else {
    FDLLM_CHECK_ARG(expert_bias.numel() == 0, "{}: expert_bias {} given but the routing has none", kOp,
                    expert_bias.describe());
  }
  return T;
}

/// The sizes of a Backend::moe_experts call.
struct MoeExpertsShape {
  int64_t T = 0, D = 0, k = 0, E = 0, F = 0;  ///< rows, model width, top_k, experts, expert width
};

/// The operands of Backend::moe_experts on a backend of activation dtype `act` (weights `act`,
/// scratch `act`) on `device`: x [T, D]; expert_ids I32 [T, k >= 1]; expert_weights F32 [T, k];
/// w_gate_up [E, 2F, D]; w_down [E, D, F]; out [T, D], not aliasing x; scratch of at least
/// Backend::moe_scratch_elements(T, k, E, D, F) elements. Returns the sizes; throws
/// Error(kInvalidArgument) naming the op and the operand otherwise.
inline MoeExpertsShape expect_moe_experts_operands(const Tensor& x, const Tensor& expert_ids,
                                                   const Tensor& expert_weights, const Tensor& w_gate_up,
                                                   const Tensor& w_down, const Tensor& out, const Tensor& scratch,
                                                   DType act, DeviceKind device) {
  static constexpr const char* kOp = "moe_experts";
  expect(x, act, device, kOp, "x");
  expect(expert_ids, DType::kI32, device, kOp, "expert_ids");
  expect(expert_weights, DType::kF32, device, kOp, "expert_weights");
  expect(w_gate_up, act, device, kOp, "w_gate_up");
  expect(w_down, act, device, kOp, "w_down");
  expect(out, act, device, kOp, "out");
  expect(scratch, act, device, kOp, "scratch");
  MoeExpertsShape m;
  m.T = x.rows();
  m.D = x.row_size();
  m.k = expert_ids.row_size();
  FDLLM_CHECK_ARG(w_gate_up.ndim == 3 && w_down.ndim == 3 && w_gate_up.shape[0] == w_down.shape[0] &&
                      w_gate_up.shape[1] % 2 == 0 && w_gate_up.shape[2] == m.D && w_down.shape[1] == m.D &&
                      w_down.shape[2] * 2 == w_gate_up.shape[1],
                  "{}: w_gate_up {} and w_down {} are not [E, 2F, D] and [E, D, F] for D = {}", kOp,
                  w_gate_up.describe(), w_down.describe(), m.D);
  m.E = w_gate_up.shape[0];
  m.F = w_down.shape[2];
  FDLLM_CHECK_ARG(expert_ids.rows() == m.T && m.k >= 1, "{}: expert_ids {} is not [{}, top_k]", kOp,
                  expert_ids.describe(), m.T);
  expect_matrix(expert_weights, m.T, m.k, kOp, "expert_weights");
  expect_matrix(out, m.T, m.D, kOp, "out");
  FDLLM_CHECK_ARG(!overlap(out, x), "{}: out must not alias x", kOp);
  const int64_t need = Backend::moe_scratch_elements(m.T, m.k, m.E, m.D, m.F);
  FDLLM_CHECK_ARG(scratch.numel() >= need, "{}: scratch {} holds fewer than the {} elements of {} rows x top_k {}", kOp,
                  scratch.describe(), need, m.T, m.k);
  return m;
}

}  // namespace flashdllm::opcheck
