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

// The checks of a block-FP8 product's operands (x: its bf16 input, or the SwiGLU output it is made
// from): dtypes, devices and the shapes of expect_linear_shapes.
opcheck::LinearShape expect_fp8_operands(Tensor x, Tensor w, Tensor w_scale, Tensor out, const char* op,
                                         const char* x_name = "x") {
  expect(x, DType::kBF16, op, x_name);
  expect(w, DType::kF8E4M3, op, "w");
  expect(w_scale, DType::kF32, op, "w_scale");
  FDLLM_CHECK_ARG(out.dtype == DType::kBF16 || out.dtype == DType::kF32,
                  "{}: operand 'out' must be BF16 or F32, got {}", op, out.describe());
  expect(out, out.dtype, op, "out");
  const opcheck::LinearShape shape = opcheck::expect_linear_shapes(x, w, &w_scale, out, op);
  FDLLM_CHECK_ARG(shape.T == 0 || (shape.N > 0 && shape.K > 0), "{}: empty weight {}", op, w.describe());
  return shape;
}

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

// cuBLASLt's block-scaled FP8 GEMM: the activations quantised into the scratch by `quantise` (xq
// [Tp, K] e4m3, Tp = T padded to kernels::fp8_padded_rows with zero rows and zero scales, the scales
// outer-major with stride Tp), then the GEMM with the weight as A and its scales as stored (copied
// into the scratch with the row stride rounded up to kCublasFp8Scales.weight_ld_align, zero-filled,
// when ceil(K/128) is not a multiple of it), straight into out when no rows were padded, else into
// the scratch and from there into out; false (the quantisation done in vain, nothing written to out)
// when cuBLASLt has none.
bool CudaBackend::fp8_gemm(int64_t T, int64_t K, const Fp8Quantiser& quantise, Tensor w, Tensor w_scale, Tensor out,
                           bool accumulate) {
  constexpr kernels::Fp8ScaleLayouts L = kernels::kCublasFp8Scales;
  static_assert(L.roles == kernels::Fp8Roles::kWeightAsA && !L.weight_transposed && L.act_outer_major &&
                    kernels::fp8_padded_rows(1) % L.act_ld_align == 0,
                "fp8_gemm lays the operands out as the H100 probe established (bench/results/2026-12-07-fp8-gemm/)");
  const int64_t N = w.rows(), Tp = kernels::fp8_padded_rows(T);
  const int64_t kb = fp8_blocks(K), ws_ld = (kb + L.weight_ld_align - 1) / L.weight_ld_align * L.weight_ld_align;
  const auto out_type = out.dtype == DType::kF32 ? kernels::GemmOut::kF32 : kernels::GemmOut::kBF16;
  const size_t xq_bytes = aligned(static_cast<size_t>(Tp * K));
  const size_t xs_bytes = aligned(static_cast<size_t>(kb * Tp) * sizeof(float));
  const size_t ws_bytes = ws_ld == kb ? 0 : aligned(static_cast<size_t>(fp8_blocks(N) * ws_ld) * sizeof(float));
  const size_t staged_bytes = Tp == T ? 0 : aligned(static_cast<size_t>(Tp * N) * dtype_size(out.dtype));
  auto* base = static_cast<char*>(ensure_fp8_scratch(xq_bytes + xs_bytes + ws_bytes + staged_bytes));
  auto* xq = reinterpret_cast<uint8_t*>(base);
  auto* xs = reinterpret_cast<float*>(base + xq_bytes);
  const float* ws = w_scale.ptr<float>();
  if (ws_ld != kb) {
    auto* padded = reinterpret_cast<float*>(base + xq_bytes + xs_bytes);
    CUDA_CHECK(cudaMemsetAsync(padded, 0, ws_bytes, stream_));
    CUDA_CHECK(cudaMemcpy2DAsync(padded, ws_ld * sizeof(float), ws, kb * sizeof(float), kb * sizeof(float),
                                 fp8_blocks(N), cudaMemcpyDeviceToDevice, stream_));
    ws = padded;
  }
  if (Tp != T) {  // zero rows and zero scales: the padded rows' products are 0 and never read
    CUDA_CHECK(cudaMemsetAsync(xq + T * K, 0, static_cast<size_t>((Tp - T) * K), stream_));
    CUDA_CHECK(cudaMemsetAsync(xs, 0, xs_bytes, stream_));
  }
  quantise(xq, xs, Tp);
  const auto* wq = static_cast<const uint8_t*>(w.data);
  if (Tp == T) return gemm_->matmul_fp8(xq, xs, wq, ws, out.data, out_type, T, N, K, accumulate, stream_);
  void* staged = base + xq_bytes + xs_bytes + ws_bytes;
  if (!gemm_->matmul_fp8(xq, xs, wq, ws, staged, out_type, Tp, N, K, false, stream_)) return false;
  kernels::add_into(staged, out.data, T * N, out.dtype == DType::kF32, accumulate, stream_);
  return true;
}

void CudaBackend::matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
  static constexpr const char* kOp = "matmul_fp8";
  const opcheck::LinearShape shape = expect_fp8_operands(x, w, w_scale, out, kOp);
  const int64_t T = shape.T, K = shape.K;
  if (T == 0) return;
  CUDA_CHECK(cudaSetDevice(device_));
  const auto quantise = [&](uint8_t* q, float* scales, int64_t ld) {
    kernels::quantize_fp8_groups_bf16(bf16(x), q, scales, T, K, kernels::Fp8ActScaleLayout{true, ld}, stream_);
  };
  if (fp8_gemm_applies(options_, traits_) && fp8_gemm(T, K, quantise, w, w_scale, out, accumulate)) {
    after_op(kOp);
    return;
  }
  dequantized_matmul_fp8(x, w, w_scale, out, accumulate);
  after_op(kOp);
}

// The dequantising route of a checked, non-empty product: bf16 operands holding the quantised
// values, then the bf16 GEMM.
void CudaBackend::dequantized_matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
  const int64_t T = x.rows(), K = x.row_size(), N = w.rows();
  const size_t xb_bytes = aligned(static_cast<size_t>(T * K) * 2);
  auto* b2 = static_cast<char*>(ensure_fp8_scratch(xb_bytes + aligned(static_cast<size_t>(N * K) * 2)));
  auto* xb = reinterpret_cast<__nv_bfloat16*>(b2);
  auto* wb = reinterpret_cast<__nv_bfloat16*>(b2 + xb_bytes);
  kernels::fake_quantize_fp8_groups_bf16(bf16(x), xb, T, K, stream_);
  kernels::dequantize_fp8_blocks_bf16(static_cast<const uint8_t*>(w.data), w_scale.ptr<float>(), N, K, wb, stream_);
  gemm_->matmul(xb, wb, out.data, out.dtype == DType::kF32 ? kernels::GemmOut::kF32 : kernels::GemmOut::kBF16, T, N, K,
                accumulate, stream_);
}

void CudaBackend::swiglu_matmul_fp8(Tensor gate_up, Tensor act, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
  static constexpr const char* kOp = "swiglu_matmul_fp8";
  expect(gate_up, DType::kBF16, kOp, "gate_up");
  FDLLM_CHECK_ARG(gate_up.row_size() % 2 == 0, "swiglu_matmul_fp8: gate_up width {} is odd", gate_up.row_size());
  const int64_t T = gate_up.rows(), F = gate_up.row_size() / 2;
  opcheck::expect_matrix(act, T, F, kOp, "act");
  expect_fp8_operands(act, w, w_scale, out, kOp, "act");
  opcheck::expect_disjoint(act, gate_up, kOp, "act", "gate_up");
  if (T > 0 && fp8_gemm_applies(options_, traits_)) {
    CUDA_CHECK(cudaSetDevice(device_));
    const auto quantise = [&](uint8_t* q, float* scales, int64_t ld) {
      kernels::swiglu_quantize_fp8_groups_bf16(bf16(gate_up), T, F, bf16(act), q, scales,
                                               kernels::Fp8ActScaleLayout{true, ld}, stream_);
    };
    if (fp8_gemm(T, F, quantise, w, w_scale, out, accumulate)) {
      after_op(kOp);
      return;
    }
  }
  swiglu(gate_up, act);  // the dequantising route, or a shape cuBLASLt refused (not tried again)
  if (T == 0) return;
  CUDA_CHECK(cudaSetDevice(device_));
  dequantized_matmul_fp8(act, w, w_scale, out, accumulate);
  after_op(kOp);
}

}  // namespace flashdllm::cuda_impl
