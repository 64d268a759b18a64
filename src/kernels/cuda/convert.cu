#include "kernels/cuda/convert.h"

#include <cuda_fp16.h>

#include <string>

#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {
namespace {

template <class Src>
__device__ __forceinline__ __nv_bfloat16 to_bf16(Src v);
template <>
__device__ __forceinline__ __nv_bfloat16 to_bf16<float>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 to_bf16<__half>(__half v) { return __float2bfloat16_rn(__half2float(v)); }

template <class Src>
__global__ void convert_kernel(const Src* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = to_bf16(src[i]);
}

template <class Src>
void launch(const void* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  convert_kernel<Src><<<grid, kThreads, 0, stream>>>(static_cast<const Src*>(src), dst, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void convert_to_bf16(DType src_dtype, const void* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  switch (src_dtype) {
    case DType::kF32: launch<float>(src, dst, n, stream); return;
    case DType::kF16: launch<__half>(src, dst, n, stream); return;
    case DType::kBF16:
      CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * 2, cudaMemcpyDeviceToDevice, stream));
      return;
    default: break;
  }
  cuda::throw_invalid_argument(std::string("convert_to_bf16: source dtype ") + dtype_name(src_dtype) +
                               " is not convertible (supported: F32, F16, BF16)");
}

}  // namespace flashdllm::kernels
