#include "backend/cpu/cpu_fp8.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "backend/operand_checks.h"
#include "core/check.h"

namespace flashdllm::cpu {

void matmul_fp8(int threads, Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
  static constexpr const char* kOp = "matmul_fp8";
  opcheck::expect(x, DType::kF32, DeviceKind::kCPU, kOp, "x");
  opcheck::expect(w, DType::kF8E4M3, DeviceKind::kCPU, kOp, "w");
  opcheck::expect(w_scale, DType::kF32, DeviceKind::kCPU, kOp, "w_scale");
  opcheck::expect(out, DType::kF32, DeviceKind::kCPU, kOp, "out");
  const opcheck::LinearShape shape = opcheck::expect_linear_shapes(x, w, &w_scale, out, kOp);
  const int64_t T = shape.T, N = shape.N, K = shape.K;
  if (T == 0 || N == 0) return;
  std::vector<float> wd(static_cast<size_t>(N * K)), xq(static_cast<size_t>(T * K));
  const auto* q = static_cast<const uint8_t*>(w.data);
  const float* s = w_scale.ptr<float>();
  const int64_t row_blocks = fp8_blocks(N);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < row_blocks; ++b) {  // one 128-row band of w (its scales' row b) per iteration
    const int64_t r0 = b * kFp8Block, rows = std::min(kFp8Block, N - r0);
    dequantize_fp8_blocks(q + r0 * K, s + b * fp8_blocks(K), rows, K, wd.data() + r0 * K);
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < T; ++t) fake_quantize_fp8_groups(x.ptr<float>() + t * K, K, xq.data() + t * K);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(N), static_cast<int>(K),
              1.0f, xq.data(), static_cast<int>(K), wd.data(), static_cast<int>(K), accumulate ? 1.0f : 0.0f,
              out.ptr<float>(), static_cast<int>(N));
}

}  // namespace flashdllm::cpu
