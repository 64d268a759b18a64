// Small device-side helpers shared by the kernel families (include from .cu files only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels::detail {

/// Shared-memory address of a generic pointer into shared memory (for PTX operands).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16-byte async copy global -> shared (sm_80+); with valid == false nothing is read and zeros
/// are written. `src` must still be a mapped address.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { cp_async_wait<0>(); }

/// Keeps the compiler from moving memory accesses across this point (no instruction is emitted).
/// CUTLASS's mbarrier wait and arrive are asm volatile without a "memory" clobber, so ordinary
/// shared-memory accesses handed over through them need it on their side of each barrier call.
__device__ __forceinline__ void compiler_fence() { asm volatile("" ::: "memory"); }

/// bf16 NaN used to poison outputs whose inputs were invalid.
__device__ __forceinline__ __nv_bfloat16 bf16_nan() { return __ushort_as_bfloat16(static_cast<unsigned short>(0x7fc0)); }

/// Rounds an fp32 value to bf16 and back (round to nearest even), as PyTorch's .to(bfloat16).float().
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/// One SwiGLU value: silu(gate) rounded to bf16, times up, rounded to bf16 (reference §A.3 cast
/// order; swiglu_bf16 and the FP8 quantiser fused with it, kernels/cuda/fp8.cu, both use it).
__device__ __forceinline__ __nv_bfloat16 swiglu_one(__nv_bfloat16 gate, __nv_bfloat16 up) {
  const float g = __bfloat162float(gate);
  const float silu = round_bf16(g / (1.0f + expf(-g)));
  return __float2bfloat16_rn(silu * __bfloat162float(up));
}

/// One half-rotation RoPE pair (x1 at d, x2 at d + Dh/2) by the angle with cosine c and sine s, with
/// separately rounded fp32 products and sums (reference-algorithms §A.3: HF's rotate_half in fp32 on the bf16
/// projection): o1 = x1·c − x2·s, o2 = x2·c + x1·s, each rounded to bf16.
__device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float s, __nv_bfloat16* o1,
                                            __nv_bfloat16* o2) {
  *o1 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, s)));
  *o2 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over a block of kThreads threads (multiple of 32, <= 1024). Every thread gets the result.
/// `scratch` must hold 32 values; the function ends with a barrier so scratch can be reused.
template <int kThreads, class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < kWarps ? scratch[lane] : T(0);
  r = warp_sum(r);
  __syncthreads();
  return r;
}

/// Max over a block of kThreads threads; every thread gets the result.
template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block size");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < kWarps ? scratch[lane] : -__int_as_float(0x7f800000);
  r = warp_max(r);
  __syncthreads();
  return r;
}

/// Whether `p` is a multiple of `bytes` (host-side operand checks of the launch paths).
inline bool is_aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// Attribute `A` of the current device, asked of the driver once per device (the launch paths run in
/// every layer; the value does not change).
template <cudaDeviceAttr A>
int cached_device_attribute() {
  static std::array<std::atomic<int64_t>, 64> known{};  // value + 1 (attributes are >= 0); 0: not asked yet
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const bool cached = dev >= 0 && dev < static_cast<int>(known.size());
  if (cached) {
    const int64_t k = known[static_cast<size_t>(dev)].load();
    if (k != 0) return static_cast<int>(k - 1);
  }
  int v = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&v, A, dev));
  if (cached) known[static_cast<size_t>(dev)].store(static_cast<int64_t>(v) + 1);
  return v;
}

/// The dynamic shared-memory opt-in of kernel `K`, once per device rather than a driver call in
/// every layer's launch (issue 13: no cudaFuncSetAttribute in the layer loop).
template <auto K>
void ensure_smem_opt_in(int bytes) {
  static std::array<std::atomic<bool>, 64> opted_in{};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < static_cast<int>(opted_in.size()) && opted_in[static_cast<size_t>(dev)].load()) return;
  CUDA_CHECK(cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (dev >= 0 && dev < static_cast<int>(opted_in.size())) opted_in[static_cast<size_t>(dev)].store(true);
}

}  // namespace flashdllm::kernels::detail
