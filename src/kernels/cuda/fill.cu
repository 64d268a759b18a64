#include "kernels/cuda/fill.h"

#include "core/philox.h"
#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {
namespace {

__global__ void fill_uniform_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double u = philox_uniform(seed, static_cast<uint64_t>(i) >> 32, 0, static_cast<uint32_t>(i));
    p[i] = __float2bfloat16_rn(lo + (hi - lo) * static_cast<float>(u));
  }
}

}  // namespace

void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  fill_uniform_kernel<<<static_cast<unsigned>(blocks < 8192 ? blocks : 8192), kThreads, 0, stream>>>(p, n, seed, lo,
                                                                                                      hi);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
