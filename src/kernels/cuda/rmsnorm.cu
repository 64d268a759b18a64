#include "kernels/cuda/rmsnorm.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 256;

// One block per row. Each thread reads and writes the same elements (i = tid + k * kThreads) in
// both passes, so out may alias x: no thread overwrites an element another thread still reads.
// x and out carry no __restrict__ for that reason.
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ w,
                                                           int64_t cols, float eps, __nv_bfloat16* out) {
  __shared__ float scratch[32];
  const __nv_bfloat16* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  __nv_bfloat16* outr = out + static_cast<int64_t>(blockIdx.x) * cols;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float v = __bfloat162float(xr[i]);
    ss = fmaf(v, v, ss);
  }
  ss = detail::block_sum<kThreads>(ss, scratch);
  const float mean = ss / static_cast<float>(cols);
  const float inv_rms = 1.0f / sqrtf(mean + eps);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float y = detail::round_bf16(__bfloat162float(xr[i]) * inv_rms);
    outr[i] = __float2bfloat16_rn(y * __bfloat162float(w[i]));
  }
}

}  // namespace

void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps,
                  __nv_bfloat16* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (rows > 0x7fffffff) cuda::throw_invalid_argument("rmsnorm: more than 2^31-1 rows");
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, cols, eps, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
