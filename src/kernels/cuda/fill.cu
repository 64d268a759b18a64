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

__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

// The Box-Muller pair of elements (i, i+1), i even, as fp32 values. Same expression order as
// CpuBackend::fill_normal; __dmul_rn / __dadd_rn keep nvcc from contracting r·cos(a) + mean into an
// FMA (a different rounding than the host's).
__device__ __forceinline__ void normal_pair(uint64_t seed, uint64_t rng_stream, int64_t i, double mean, double std,
                                            float* even, float* odd) {
  const auto hi = static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32), lo = static_cast<uint32_t>(i);
  const double u1 = philox_uniform(seed, rng_stream, hi, lo);
  const double u2 = philox_uniform(seed ^ 0x9e3779b97f4a7c15ull, rng_stream, hi, lo);
  const double r = __dmul_rn(sqrt(__dmul_rn(-2.0, log(u1))), std);
  const double a = __dmul_rn(6.283185307179586, u2);
  double s, c;
  sincos(a, &s, &c);
  *even = static_cast<float>(__dadd_rn(__dmul_rn(r, c), mean));
  *odd = static_cast<float>(__dadd_rn(__dmul_rn(r, s), mean));
}

template <class T>
__global__ void fill_normal_kernel(T* p, int64_t n, uint64_t seed, uint64_t rng_stream, double mean, double std) {
  const int64_t pairs = (n + 1) / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < pairs; k += stride) {
    const int64_t i = 2 * k;
    float even, odd;
    normal_pair(seed, rng_stream, i, mean, std, &even, &odd);
    store(p + i, even);
    if (i + 1 < n) store(p + i + 1, odd);
  }
}

// One parent element j per thread: its pair's transform, the even (cos) or odd (sin) value.
template <class T>
__global__ void fill_normal_window_kernel(T* p, int64_t rows, int64_t cols, int64_t offset, int64_t parent_cols,
                                          uint64_t seed, uint64_t rng_stream, double mean, double std) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t j = offset + e / cols * parent_cols + e % cols;
    float even, odd;
    normal_pair(seed, rng_stream, j & ~int64_t{1}, mean, std, &even, &odd);
    store(p + e, (j & 1) ? odd : even);
  }
}

template <class T>
void launch_fill_normal_window(T* p, int64_t rows, int64_t cols, int64_t offset, int64_t parent_cols, uint64_t seed,
                               uint64_t rng_stream, float mean, float std, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  fill_normal_window_kernel<T><<<static_cast<unsigned>(blocks < 16384 ? blocks : 16384), kThreads, 0, stream>>>(
      p, rows, cols, offset, parent_cols, seed, rng_stream, static_cast<double>(mean), static_cast<double>(std));
  CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_fill_normal(T* p, int64_t n, uint64_t seed, uint64_t rng_stream, float mean, float std,
                        cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = ((n + 1) / 2 + kThreads - 1) / kThreads;
  // 16384 blocks of 256 threads fill any current GPU; larger tensors loop (grid stride).
  fill_normal_kernel<T><<<static_cast<unsigned>(blocks < 16384 ? blocks : 16384), kThreads, 0, stream>>>(
      p, n, seed, rng_stream, static_cast<double>(mean), static_cast<double>(std));
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill_normal_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, uint64_t rng_stream, float mean, float std,
                      cudaStream_t stream) {
  launch_fill_normal(p, n, seed, rng_stream, mean, std, stream);
}

void fill_normal_f32(float* p, int64_t n, uint64_t seed, uint64_t rng_stream, float mean, float std,
                     cudaStream_t stream) {
  launch_fill_normal(p, n, seed, rng_stream, mean, std, stream);
}

void fill_normal_window_bf16(__nv_bfloat16* p, int64_t rows, int64_t cols, int64_t offset, int64_t parent_cols,
                             uint64_t seed, uint64_t rng_stream, float mean, float std, cudaStream_t stream) {
  launch_fill_normal_window(p, rows, cols, offset, parent_cols, seed, rng_stream, mean, std, stream);
}

void fill_normal_window_f32(float* p, int64_t rows, int64_t cols, int64_t offset, int64_t parent_cols, uint64_t seed,
                            uint64_t rng_stream, float mean, float std, cudaStream_t stream) {
  launch_fill_normal_window(p, rows, cols, offset, parent_cols, seed, rng_stream, mean, std, stream);
}

void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  fill_uniform_kernel<<<static_cast<unsigned>(blocks < 8192 ? blocks : 8192), kThreads, 0, stream>>>(p, n, seed, lo,
                                                                                                      hi);
  CUDA_CHECK_LAUNCH();
}

cudaError_t probe_device_code(int* binary_version, int* ptx_version) {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, fill_uniform_kernel);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return err;
  }
  *binary_version = attr.binaryVersion;
  *ptx_version = attr.ptxVersion;
  return cudaSuccess;
}

}  // namespace flashdllm::kernels
