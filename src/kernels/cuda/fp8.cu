#include "kernels/cuda/fp8.h"

#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {
namespace {

constexpr int kGroup = 128;  // core/fp8.h kFp8Block
constexpr int kWarps = 8;    // groups per block of the group kernels
constexpr float kE4M3Max = 448.0f;

__device__ __forceinline__ uint8_t to_e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float from_e4m3(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// One warp per (token, group of 128 columns): each lane holds 4 values (kVec: columns c0 + 4·lane ..
// + 3, one 8-byte load and one 4-byte / 8-byte store; else columns c0 + lane + 32·i), the group's
// amax by shuffles, then the scale as the CPU computes it (IEEE division, no fast math). Mode 0
// writes q and the scale; mode 1 writes bf16(e4m3 · scale) to out (which may alias x: a warp reads
// its group before writing it). The values and their order of use are the same in both layouts, so
// both give the CPU's bytes.
template <int kMode, bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    group_quant_kernel(const __nv_bfloat16* x, uint8_t* __restrict__ q, float* __restrict__ scales, __nv_bfloat16* out,
                       int64_t T, int64_t K, int64_t groups, bool outer_major, int64_t ld) {
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= T * groups) return;
  const int64_t t = item / groups, g = item % groups;
  const int64_t c0 = g * kGroup;
  const __nv_bfloat16* row = x + t * K;
  const auto col = [&](int i) { return kVec ? c0 + 4 * lane + i : c0 + lane + 32 * i; };
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if constexpr (kVec) {
    if (col(0) < K) {  // K % 4 == 0: the lane's 4 columns are all in range or all out
      const uint2 raw = *reinterpret_cast<const uint2*>(row + col(0));
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
      v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = col(i) < K ? __bfloat162float(row[col(i)]) : 0.0f;
  }
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    finite = finite && isfinite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    finite = __shfl_xor_sync(0xffffffffu, static_cast<int>(finite), off) != 0 && finite;
  }
  const float s = !finite ? __int_as_float(0x7fc00000) : amax > 0.0f ? __fdiv_rn(amax, kE4M3Max) : 1.0f;
  if (kMode == 0 && lane == 0) scales[outer_major ? g * ld + t : t * groups + g] = s;
  uint8_t b[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = finite ? to_e4m3(__fdiv_rn(v[i], s)) : uint8_t{0x7f};
  if constexpr (kVec) {
    if (col(0) >= K) return;
    if (kMode == 0) {
      *reinterpret_cast<uint32_t*>(q + t * K + col(0)) =
          b[0] | (uint32_t{b[1]} << 8) | (uint32_t{b[2]} << 16) | (uint32_t{b[3]} << 24);
    } else {
      __nv_bfloat162 lo = __floats2bfloat162_rn(__fmul_rn(from_e4m3(b[0]), s), __fmul_rn(from_e4m3(b[1]), s));
      __nv_bfloat162 hi = __floats2bfloat162_rn(__fmul_rn(from_e4m3(b[2]), s), __fmul_rn(from_e4m3(b[3]), s));
      uint2 raw;
      raw.x = *reinterpret_cast<uint32_t*>(&lo);
      raw.y = *reinterpret_cast<uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(out + t * K + col(0)) = raw;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (col(i) >= K) continue;
      if (kMode == 0)
        q[t * K + col(i)] = b[i];
      else
        out[t * K + col(i)] = __float2bfloat16_rn(__fmul_rn(from_e4m3(b[i]), s));
    }
  }
}

__global__ void dequant_blocks_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale, int64_t N,
                                      int64_t K, __nv_bfloat16* __restrict__ w) {
  const int64_t n = N * K, kb = (K + kGroup - 1) / kGroup;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / K, c = i % K;
    w[i] = __float2bfloat16_rn(__fmul_rn(from_e4m3(q[i]), scale[(r / kGroup) * kb + c / kGroup]));
  }
}

template <class T>
__global__ void add_into_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n, bool accumulate) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = static_cast<float>(src[i]);
    if (accumulate) v += static_cast<float>(dst[i]);
    dst[i] = static_cast<T>(v);
  }
}

unsigned grid_of(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

template <int kMode>
void launch_groups(const __nv_bfloat16* x, uint8_t* q, float* scales, __nv_bfloat16* out, int64_t T, int64_t K,
                   Fp8ActScaleLayout layout, cudaStream_t stream) {
  if (T <= 0 || K <= 0) return;
  const int64_t groups = (K + kGroup - 1) / kGroup, items = T * groups;
  const auto blocks = static_cast<unsigned>((items + kWarps - 1) / kWarps);
  const auto aligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  const bool vec = K % 4 == 0 && aligned(x, 8) && aligned(q, 4) && aligned(out, 8);  // null is aligned
  const int64_t ld = layout.outer_major ? layout.ld : 0;
  if (vec)
    group_quant_kernel<kMode, true>
        <<<blocks, kWarps * 32, 0, stream>>>(x, q, scales, out, T, K, groups, layout.outer_major, ld);
  else
    group_quant_kernel<kMode, false>
        <<<blocks, kWarps * 32, 0, stream>>>(x, q, scales, out, T, K, groups, layout.outer_major, ld);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize_fp8_groups_bf16(const __nv_bfloat16* x, uint8_t* q, float* scales, int64_t T, int64_t K,
                              Fp8ActScaleLayout layout, cudaStream_t stream) {
  if (layout.outer_major && layout.ld < T)
    cuda::throw_invalid_argument("quantize_fp8_groups_bf16: the scales' group stride is smaller than the tokens");
  launch_groups<0>(x, q, scales, nullptr, T, K, layout, stream);
}

void fake_quantize_fp8_groups_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t T, int64_t K,
                                   cudaStream_t stream) {
  launch_groups<1>(x, nullptr, nullptr, out, T, K, Fp8ActScaleLayout{false, 0}, stream);
}

void dequantize_fp8_blocks_bf16(const uint8_t* q, const float* scale, int64_t N, int64_t K, __nv_bfloat16* w,
                                cudaStream_t stream) {
  if (N <= 0 || K <= 0) return;
  dequant_blocks_kernel<<<grid_of(N * K, 256), 256, 0, stream>>>(q, scale, N, K, w);
  CUDA_CHECK_LAUNCH();
}

void add_into(const void* src, void* dst, int64_t n, bool f32, bool accumulate, cudaStream_t stream) {
  if (n <= 0) return;
  if (f32)
    add_into_kernel<float>
        <<<grid_of(n, 256), 256, 0, stream>>>(static_cast<const float*>(src), static_cast<float*>(dst), n, accumulate);
  else
    add_into_kernel<__nv_bfloat16><<<grid_of(n, 256), 256, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(src), static_cast<__nv_bfloat16*>(dst), n, accumulate);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
