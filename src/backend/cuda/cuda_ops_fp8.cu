// Block-FP8 linear layers (issue 48): matmul_fp8 on cuBLASLt's block-scaled FP8 GEMM or, where
// cuBLASLt has none (GPUs before Hopper, cuBLASLt before 12.9, a shape it refuses), the dequantising
// route; check_precision; and the scratch both use.
#include "backend/cuda/cuda_backend.h"
#include "core/fp8.h"
#include "kernels/cuda/fp8.h"

namespace flashdllm::cuda_impl {
namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void* CudaBackend::ensure_fp8_scratch(size_t bytes) {
  if (bytes > fp8_scratch_bytes_) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    graphs_cache_.clear();
    const size_t n = std::max(bytes, fp8_scratch_bytes_ + fp8_scratch_bytes_ / 2);
    fp8_scratch_.reset();
    fp8_scratch_bytes_ = 0;  // recorded only once the new array exists (the allocation may throw)
    fp8_scratch_ = device_alloc(n, "block-FP8 GEMM scratch");
    fp8_scratch_bytes_ = n;
  }
  return fp8_scratch_.get();
}

void CudaBackend::check_precision(bool fp8_weights, bool fp8_kv) const {
  (void)fp8_weights;  // matmul_fp8 runs on every GPU (the dequantising route where cuBLASLt has no FP8 GEMM)
  FDLLM_CHECK(!fp8_kv, ErrorCode::kUnsupported,
              "the CUDA backend does not have an FP8 K/V cache yet (--kv-cache-dtype fp8); use --kv-cache-dtype "
              "auto, or --device cpu");
}

// cuBLASLt's block-scaled FP8 GEMM: x quantised into the scratch (xq [T, K] e4m3, its scales as
// kernels::kCublasFp8Scales lays them out; the weight's scales transposed if cuBLASLt reads them so),
// then the GEMM; false (the quantisation done in vain, nothing written to out) when cuBLASLt has none.
bool CudaBackend::fp8_gemm(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
  const int64_t T = x.rows(), K = x.row_size(), N = w.rows(), nb = fp8_blocks(N), kb = fp8_blocks(K);
  const auto out_type = out.dtype == DType::kF32 ? kernels::GemmOut::kF32 : kernels::GemmOut::kBF16;
  constexpr kernels::Fp8ScaleLayouts L = kernels::kCublasFp8Scales;
  const int64_t ld = (T + L.act_ld_align - 1) / L.act_ld_align * L.act_ld_align;
  const size_t xq_bytes = aligned(static_cast<size_t>(T * K));
  const size_t xs_bytes = aligned(static_cast<size_t>(kb * (L.act_outer_major ? ld : T)) * sizeof(float));
  const size_t ws_bytes = L.weight_transposed ? aligned(static_cast<size_t>(nb * kb) * sizeof(float)) : 0;
  // With the activations as cuBLASLt's A the GEMM writes outᵀ [N, T]: into the scratch, then transposed.
  const bool x_as_a = L.roles == kernels::Fp8Roles::kActivationsAsA;
  const int64_t ot_ld = kernels::fp8_transposed_ld(T);
  const size_t ot_bytes = x_as_a ? aligned(static_cast<size_t>(N * ot_ld) * dtype_size(out.dtype)) : 0;
  auto* base = static_cast<char*>(ensure_fp8_scratch(xq_bytes + xs_bytes + ws_bytes + ot_bytes));
  auto* xq = reinterpret_cast<uint8_t*>(base);
  auto* xs = reinterpret_cast<float*>(base + xq_bytes);
  const float* ws = w_scale.ptr<float>();
  if (L.weight_transposed) {
    auto* wst = reinterpret_cast<float*>(base + xq_bytes + xs_bytes);
    kernels::transpose_f32(ws, wst, nb, kb, stream_);
    ws = wst;
  }
  kernels::quantize_fp8_groups_bf16(bf16(x), xq, xs, T, K, kernels::Fp8ActScaleLayout{L.act_outer_major, ld}, stream_);
  if (!x_as_a)
    return gemm_->matmul_fp8(xq, xs, static_cast<const uint8_t*>(w.data), ws, out.data, out_type, T, N, K, accumulate,
                             stream_);
  void* out_t = base + xq_bytes + xs_bytes + ws_bytes;
  if (!gemm_->matmul_fp8(xq, xs, static_cast<const uint8_t*>(w.data), ws, out_t, out_type, T, N, K, false, stream_,
                         kernels::Fp8Roles::kActivationsAsA))
    return false;
  kernels::transpose_into(out_t, ot_ld, out.data, N, T, out.dtype == DType::kF32, accumulate, stream_);
  return true;
}

void CudaBackend::matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
  static constexpr const char* kOp = "matmul_fp8";
  expect(x, DType::kBF16, kOp, "x");
  expect(w, DType::kF8E4M3, kOp, "w");
  expect(w_scale, DType::kF32, kOp, "w_scale");
  FDLLM_CHECK_ARG(out.dtype == DType::kBF16 || out.dtype == DType::kF32,
                  "matmul_fp8: operand 'out' must be BF16 or F32, got {}", out.describe());
  expect(out, out.dtype, kOp, "out");
  const int64_t T = x.rows(), K = x.row_size(), N = w.rows();
  FDLLM_CHECK_ARG(w.ndim == 2 && w.row_size() == K, "{}: x is {} but w is {} (inner dimensions differ)", kOp,
                  x.describe(), w.describe());
  const int64_t nb = fp8_blocks(N), kb = fp8_blocks(K);
  FDLLM_CHECK_ARG(w_scale.ndim == 2 && w_scale.rows() == nb && w_scale.row_size() == kb,
                  "{}: w_scale is {}, but w {} in 128 x 128 blocks needs [{}, {}]", kOp, w_scale.describe(),
                  w.describe(), nb, kb);
  expect_matrix(out, T, N, kOp, "out");
  expect_disjoint(out, x, kOp, "out", "x");
  expect_disjoint(out, w, kOp, "out", "w");
  if (T == 0) return;
  FDLLM_CHECK_ARG(N > 0 && K > 0, "matmul_fp8: empty weight {}", w.describe());
  CUDA_CHECK(cudaSetDevice(device_));
  if (fp8_gemm_applies(options_, traits_) && fp8_gemm(x, w, w_scale, out, accumulate)) {
    after_op(kOp);
    return;
  }
  // The dequantising route: bf16 operands holding the quantised values, then the bf16 GEMM.
  const size_t xb_bytes = aligned(static_cast<size_t>(T * K) * 2);
  auto* b2 = static_cast<char*>(ensure_fp8_scratch(xb_bytes + aligned(static_cast<size_t>(N * K) * 2)));
  auto* xb = reinterpret_cast<__nv_bfloat16*>(b2);
  auto* wb = reinterpret_cast<__nv_bfloat16*>(b2 + xb_bytes);
  kernels::fake_quantize_fp8_groups_bf16(bf16(x), xb, T, K, stream_);
  kernels::dequantize_fp8_blocks_bf16(static_cast<const uint8_t*>(w.data), w_scale.ptr<float>(), N, K, wb, stream_);
  gemm_->matmul(xb, wb, out.data, out.dtype == DType::kF32 ? kernels::GemmOut::kF32 : kernels::GemmOut::kBF16, T, N, K,
                accumulate, stream_);
  after_op(kOp);
}

}  // namespace flashdllm::cuda_impl
