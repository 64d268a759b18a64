#include "kernels/cuda/swiglu.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::kernels {
namespace {

// grid.y strides over rows, grid.x * blockDim.x over the F columns (no integer division).
__global__ void swiglu_kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t rows, int64_t f,
                              __nv_bfloat16* __restrict__ out) {
  for (int64_t t = blockIdx.y; t < rows; t += gridDim.y) {
    const __nv_bfloat16* gate = gate_up + t * 2 * f;
    const __nv_bfloat16* up = gate + f;
    __nv_bfloat16* o = out + t * f;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < f;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float g = __bfloat162float(gate[c]);
      const float silu = detail::round_bf16(g / (1.0f + expf(-g)));
      o[c] = __float2bfloat16_rn(silu * __bfloat162float(up[c]));
    }
  }
}

}  // namespace

void swiglu_bf16(const __nv_bfloat16* gate_up, int64_t rows, int64_t f, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows <= 0 || f <= 0) return;
  constexpr int kThreads = 256;
  const int64_t col_blocks = (f + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(col_blocks < 1024 ? col_blocks : 1024),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  swiglu_kernel<<<grid, kThreads, 0, stream>>>(gate_up, rows, f, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
