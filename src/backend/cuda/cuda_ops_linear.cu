// Linear ops: matmul (cuBLASLt GemmLt) and qkv_rope_store (GEMM + rope_store; the fused kernel, never
// faster, is in bench/kernels/).
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

void CudaBackend::matmul(Tensor x, Tensor w, Tensor out, bool accumulate) {
  static constexpr const char* kOp = "matmul";
  expect(x, DType::kBF16, kOp, "x");
  expect(w, DType::kBF16, kOp, "w");
  FDLLM_CHECK_ARG(out.dtype == DType::kBF16 || out.dtype == DType::kF32,
                  "matmul: operand 'out' must be BF16 or F32, got {}", out.describe());
  expect(out, out.dtype, kOp, "out");
  const auto [T, N, K] = opcheck::expect_linear_shapes(x, w, nullptr, out, kOp);
  if (T == 0) return;
  FDLLM_CHECK_ARG(N > 0 && K > 0, "matmul: empty weight {}", w.describe());
  CUDA_CHECK(cudaSetDevice(device_));
  gemm_->matmul(bf16(x), bf16(w), out.data, out.dtype == DType::kF32 ? kernels::GemmOut::kF32 : kernels::GemmOut::kBF16,
                T, N, K, accumulate, stream_);
  after_op(kOp);
}

void CudaBackend::qkv_rope_store(Tensor xn, Tensor wqkv, const QkvExtras& extra, Tensor positions, Tensor rows,
                                 const RopeTable& rope, int n_heads, Tensor q_out, Tensor k_store, Tensor v_store,
                                 Tensor scratch) {
  static constexpr const char* kOp = "qkv_rope_store";
  Tensor bqkv = extra.bias;
  // No FP8 K/V cache yet (issue 48): check_precision refuses it at load; a direct call is refused here.
  FDLLM_CHECK(extra.kv_scale.numel() == 0, ErrorCode::kUnsupported,
              "{}: an FP8 K/V cache (--kv-cache-dtype fp8) is not supported by the CUDA backend yet", kOp);
  expect(xn, DType::kBF16, kOp, "xn");
  const bool fp8 = wqkv.dtype == DType::kF8E4M3;  // block-FP8 wqkv: its projection is matmul_fp8's
  expect(wqkv, fp8 ? DType::kF8E4M3 : DType::kBF16, kOp, "wqkv");
  FDLLM_CHECK_ARG(fp8 == (extra.weight_scale.numel() > 0),
                  "{}: block scales are given exactly for an F8E4M3 wqkv (wqkv {}, weight_scale {})", kOp,
                  wqkv.describe(), extra.weight_scale.describe());
  expect(positions, DType::kI32, kOp, "positions");
  expect(rows, DType::kI32, kOp, "rows");
  expect(rope.cos, DType::kF32, kOp, "rope.cos");
  expect(rope.sin, DType::kF32, kOp, "rope.sin");
  expect(q_out, DType::kBF16, kOp, "q_out");
  expect(k_store, DType::kBF16, kOp, "k_store");
  expect(v_store, DType::kBF16, kOp, "v_store");
  expect(scratch, DType::kBF16, kOp, "scratch");
  const int64_t T = xn.rows(), D = xn.row_size(), HD = q_out.row_size();
  const int n_kv = opcheck::kv_heads_of(q_out, k_store, n_heads, kOp);
  const int64_t Dh = HD / n_heads, KD = n_kv * Dh, W = HD + 2 * KD;
  FDLLM_CHECK_ARG(wqkv.rows() == W,
                  "{}: wqkv {} is not [(n_heads + 2·n_kv_heads)·head_dim = {}, d_model] for n_heads {}, n_kv_heads "
                  "{}, head_dim {}",
                  kOp, wqkv.describe(), W, n_heads, n_kv, Dh);
  FDLLM_CHECK_ARG(wqkv.row_size() == D, "qkv_rope_store: xn is {} but wqkv is {} (inner dimensions differ)",
                  xn.describe(), wqkv.describe());
  FDLLM_CHECK_ARG(bqkv.numel() == 0 || bqkv.numel() == W, "{}: bias {} must be empty or have {} elements", kOp,
                  bqkv.describe(), W);
  if (bqkv.numel() > 0) expect(bqkv, DType::kBF16, kOp, "bqkv");
  if (extra.qk_norm()) {
    expect(extra.q_norm, DType::kBF16, kOp, "q_norm");
    expect(extra.k_norm, DType::kBF16, kOp, "k_norm");
    FDLLM_CHECK_ARG(extra.q_norm.numel() == Dh && extra.k_norm.numel() == Dh,
                    "{}: q_norm {} and k_norm {} must both have head_dim = {} elements", kOp, extra.q_norm.describe(),
                    extra.k_norm.describe(), Dh);
    FDLLM_CHECK_ARG(std::isfinite(extra.norm_eps) && extra.norm_eps >= 0.0f,
                    "{}: QK-norm epsilon {} must be finite and non-negative", kOp, extra.norm_eps);
  }
  FDLLM_CHECK_ARG(Dh % 2 == 0, "qkv_rope_store: head_dim {} must be even", Dh);
  expect_numel(positions, T, kOp, "positions");
  expect_numel(rows, T, kOp, "rows");
  expect_matrix(q_out, T, HD, kOp, "q_out");
  FDLLM_CHECK_ARG(v_store.row_size() == KD && k_store.rows() == v_store.rows(),
                  "qkv_rope_store: K/V stores must both be [N, {}], got {} and {}", KD, k_store.describe(),
                  v_store.describe());
  FDLLM_CHECK_ARG(rope.cos.row_size() * 2 == Dh && rope.sin.row_size() * 2 == Dh && rope.cos.rows() == rope.sin.rows(),
                  "qkv_rope_store: RoPE tables must be [max_positions, {}], got cos {} and sin {}", Dh / 2,
                  rope.cos.describe(), rope.sin.describe());
  FDLLM_CHECK_ARG(scratch.numel() >= T * W, "qkv_rope_store: scratch {} holds fewer than {}·{} elements",
                  scratch.describe(), T, W);
  if (T == 0) return;
  CUDA_CHECK(cudaSetDevice(device_));
  Tensor qkv(scratch.data, DType::kBF16, DeviceKind::kCUDA, {T, W});
  for (const Tensor* t : std::initializer_list<const Tensor*>{&xn, &wqkv, &bqkv, &extra.q_norm, &extra.k_norm, &q_out,
                                                              &k_store, &v_store})
    FDLLM_CHECK_ARG(!overlap(qkv, *t), "qkv_rope_store: 'scratch' overlaps another operand ({})", t->describe());
  if (fp8)
    matmul_fp8(xn, wqkv, extra.weight_scale, qkv, false);
  else
    gemm_->matmul(bf16(xn), bf16(wqkv), qkv.data, kernels::GemmOut::kBF16, T, W, D, false, stream_);
  kernels::RopeStoreArgs a;
  a.qkv = bf16(qkv);
  a.bias = bqkv.numel() > 0 ? bf16(bqkv) : nullptr;
  a.q_norm = extra.qk_norm() ? bf16(extra.q_norm) : nullptr;
  a.k_norm = extra.qk_norm() ? bf16(extra.k_norm) : nullptr;
  a.norm_eps = extra.norm_eps;
  a.positions = positions.ptr<int32_t>();
  a.rows = rows.ptr<int32_t>();
  a.cos = rope.cos.ptr<float>();
  a.sin = rope.sin.ptr<float>();
  a.q_out = bf16(q_out);
  a.k_store = bf16(k_store);
  a.v_store = bf16(v_store);
  a.tokens = T;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv;
  a.head_dim = static_cast<int>(Dh);
  a.max_positions = rope.cos.rows();
  a.store_rows = k_store.rows();
  a.error_flags = flags();
  kernels::rope_store_bf16(a, stream_);
  after_op(kOp);
}

}  // namespace flashdllm::cuda_impl
