// Row-wise ops: embedding, rmsnorm, swiglu, gather_rows, gather_columns.
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

void CudaBackend::embedding(Tensor table, Tensor ids, Tensor out) {
  static constexpr const char* kOp = "embedding";
  expect(table, DType::kBF16, kOp, "table");
  expect(ids, DType::kI32, kOp, "ids");
  expect(out, DType::kBF16, kOp, "out");
  const int64_t T = ids.numel(), V = table.rows(), D = table.row_size();
  expect_matrix(out, T, D, kOp, "out");
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::gather_rows(table.data, V, D * 2, ids.ptr<int32_t>(), T, out.data, flags(), kernels::kErrEmbeddingId,
                       stream_);
  after_op(kOp);
}

void CudaBackend::rmsnorm(Tensor x, Tensor w, float eps, Tensor out) {
  static constexpr const char* kOp = "rmsnorm";
  expect(x, DType::kBF16, kOp, "x");
  expect(w, DType::kBF16, kOp, "w");
  expect(out, DType::kBF16, kOp, "out");
  const int64_t T = x.rows(), D = x.row_size();
  expect_numel(w, D, kOp, "w");
  expect_matrix(out, T, D, kOp, "out");
  FDLLM_CHECK_ARG(out.data == x.data || !overlap(out, x), "rmsnorm: 'out' must alias 'x' exactly or not overlap it");
  FDLLM_CHECK_ARG(std::isfinite(eps) && eps >= 0.f, "rmsnorm: eps {} must be finite and >= 0", eps);
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::rmsnorm_bf16(bf16(x), bf16(w), T, D, eps, bf16(out), stream_);
  after_op(kOp);
}

void CudaBackend::swiglu(Tensor gate_up, Tensor out) {
  static constexpr const char* kOp = "swiglu";
  expect(gate_up, DType::kBF16, kOp, "gate_up");
  expect(out, DType::kBF16, kOp, "out");
  FDLLM_CHECK_ARG(gate_up.row_size() % 2 == 0, "swiglu: gate_up width {} is odd", gate_up.row_size());
  const int64_t T = gate_up.rows(), F = gate_up.row_size() / 2;
  expect_matrix(out, T, F, kOp, "out");
  expect_disjoint(out, gate_up, kOp, "out", "gate_up");
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::swiglu_bf16(bf16(gate_up), T, F, bf16(out), stream_);
  after_op(kOp);
}

void CudaBackend::gather_rows(Tensor x, Tensor rows, Tensor out) {
  static constexpr const char* kOp = "gather_rows";
  expect(x, x.dtype, kOp, "x");
  expect(rows, DType::kI32, kOp, "rows");
  expect(out, x.dtype, kOp, "out");
  const int64_t R = rows.numel(), D = x.row_size();
  expect_matrix(out, R, D, kOp, "out");
  expect_disjoint(out, x, kOp, "out", "x");
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::gather_rows(x.data, x.rows(), D * static_cast<int64_t>(dtype_size(x.dtype)), rows.ptr<int32_t>(), R,
                       out.data, flags(), kernels::kErrGatherRow, stream_);
  after_op(kOp);
}

void CudaBackend::gather_columns(Tensor x, Tensor cols, Tensor out) {
  static constexpr const char* kOp = "gather_columns";
  expect(x, DType::kF32, kOp, "x");
  expect(cols, DType::kI32, kOp, "cols");
  expect(out, DType::kF32, kOp, "out");
  const int64_t R = x.rows();
  FDLLM_CHECK_ARG(cols.numel() == R && out.numel() == R, "{}: x {} needs cols and out of {} rows, got {} and {}", kOp,
                  x.describe(), R, cols.describe(), out.describe());
  expect_disjoint(out, x, kOp, "out", "x");
  expect_disjoint(out, cols, kOp, "out", "cols");
  CUDA_CHECK(cudaSetDevice(device_));
  kernels::gather_columns_f32(x.ptr<float>(), R, x.row_size(), cols.ptr<int32_t>(), out.ptr<float>(), stream_);
  after_op(kOp);
}

}  // namespace flashdllm::cuda_impl
