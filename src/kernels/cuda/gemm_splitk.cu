#include "kernels/cuda/gemm_splitk.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {
namespace {

template <typename Out>
__device__ __forceinline__ float load_out(const Out* p) {
  if constexpr (sizeof(Out) == 2)
    return __bfloat162float(*p);
  else
    return *p;
}

template <typename Out>
__device__ __forceinline__ void store_out(Out* p, float v) {
  if constexpr (sizeof(Out) == 2)
    *p = __float2bfloat16_rn(v);
  else
    *p = v;
}

// Element by element (any n, any alignment).
template <typename Out>
__global__ void splitk_reduce_kernel(const float* __restrict__ partial, int splits, int64_t n, Out* __restrict__ out,
                                     bool accumulate) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = partial[i];
    for (int s = 1; s < splits; ++s) acc += partial[static_cast<int64_t>(s) * n + i];
    if (accumulate) acc += load_out(out + i);
    store_out(out + i, acc);
  }
}

// Four elements a thread with 16-byte partial loads (n % 4 == 0, aligned buffers).
template <typename Out>
__global__ void splitk_reduce_vec4_kernel(const float* __restrict__ partial, int splits, int64_t n,
                                          Out* __restrict__ out, bool accumulate) {
  const int64_t n4 = n / 4;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 acc = reinterpret_cast<const float4*>(partial)[i];
    for (int s = 1; s < splits; ++s) {
      const float4 p = reinterpret_cast<const float4*>(partial + static_cast<int64_t>(s) * n)[i];
      acc.x += p.x;
      acc.y += p.y;
      acc.z += p.z;
      acc.w += p.w;
    }
    Out* o = out + 4 * i;
    if (accumulate) {
      acc.x += load_out(o);
      acc.y += load_out(o + 1);
      acc.z += load_out(o + 2);
      acc.w += load_out(o + 3);
    }
    store_out(o, acc.x);
    store_out(o + 1, acc.y);
    store_out(o + 2, acc.z);
    store_out(o + 3, acc.w);
  }
}

template <typename Out>
void launch(const float* partial, int splits, int64_t n, Out* out, bool accumulate, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(partial) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % (4 * sizeof(Out)) == 0;
  const int64_t work = vec ? n / 4 : n;
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 8192));
  if (vec)
    splitk_reduce_vec4_kernel<Out><<<blocks, kThreads, 0, stream>>>(partial, splits, n, out, accumulate);
  else
    splitk_reduce_kernel<Out><<<blocks, kThreads, 0, stream>>>(partial, splits, n, out, accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void splitk_reduce(const float* partial, int splits, int64_t n, void* out, bool out_bf16, bool accumulate,
                   cudaStream_t stream) {
  if (n == 0) return;
  if (out_bf16)
    launch(partial, splits, n, static_cast<__nv_bfloat16*>(out), accumulate, stream);
  else
    launch(partial, splits, n, static_cast<float*>(out), accumulate, stream);
}

}  // namespace flashdllm::kernels
