#include "kernels/cuda/fp8.h"

#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/swiglu.h"

namespace flashdllm::kernels {
namespace {

constexpr int kGroup = 128;  // core/fp8.h kFp8Block
constexpr int kWarps = 8;    // groups per block of the group kernels
constexpr float kE4M3Max = 448.0f;

__device__ __forceinline__ float from_e4m3(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

// A group's scale s and multiplier r from its amax (core/fp8.h fp8_scale_of, fp8_act_multiplier:
// IEEE divisions, no fast math) and its value bytes (fp8_act_encode; 0x7F for a non-finite group).
struct GroupQuant {
  float s, r;
  bool finite;
};

__device__ __forceinline__ GroupQuant group_quant(float amax, bool finite) {
  if (!finite) return {__int_as_float(0x7fc00000), 0.0f, false};
  const float s = __fdiv_rn(amax, kE4M3Max);
  if (!(s > 0.0f)) return {1.0f, 1.0f, true};  // all zero, or amax / 448 underflows
  const float r = __fdiv_rn(kE4M3Max, amax);
  return {s, r <= 3.402823466e38f ? r : 0.0f, true};
}

__device__ __forceinline__ float scaled(float v, const GroupQuant& g) {
  return g.r != 0.0f ? __fmul_rn(v, g.r) : __fdiv_rn(v, g.s);
}

// Two e4m3 bytes (a in the low byte) of a group's values, saturating (one cvt for the pair).
__device__ __forceinline__ uint32_t encode2(float a, float b, const GroupQuant& g) {
  if (!g.finite) return 0x7f7fu;
  return static_cast<uint32_t>(
      __nv_cvt_float2_to_fp8x2(make_float2(scaled(a, g), scaled(b, g)), __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float decoded(uint32_t b, const GroupQuant& g) {
  return __fmul_rn(from_e4m3(b & 0xff), g.s);
}

// The scalar route (any K, any alignment): one warp per (token, group of 128 columns), lane holding
// columns c0 + lane + 32·i. Mode 0 writes q and the scale; mode 1 writes bf16(e4m3 · s) to out
// (which may alias x: a warp reads its group before writing it).
template <int kMode>
__global__ void __launch_bounds__(kWarps * 32)
    group_quant_kernel(const __nv_bfloat16* x, uint8_t* __restrict__ q, float* __restrict__ scales, __nv_bfloat16* out,
                       int64_t T, int64_t K, int64_t groups, bool outer_major, int64_t ld) {
  const int lane = threadIdx.x & 31;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= T * groups) return;
  const int64_t t = item / groups, g = item % groups;
  const int64_t c0 = g * kGroup;
  const __nv_bfloat16* row = x + t * K;
  const auto col = [&](int i) { return c0 + lane + 32 * i; };
  float v[4];
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[i] = col(i) < K ? __bfloat162float(row[col(i)]) : 0.0f;
    finite = finite && fabsf(v[i]) <= 3.402823466e38f;
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    finite = __shfl_xor_sync(0xffffffffu, static_cast<int>(finite), off) != 0 && finite;
  }
  const GroupQuant gq = group_quant(amax, finite);
  if (kMode == 0 && lane == 0) scales[outer_major ? g * ld + t : t * groups + g] = gq.s;
#pragma unroll
  for (int i = 0; i < 4; i += 2) {
    const uint32_t b = encode2(v[i], v[i + 1], gq);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      if (col(i + j) >= K) continue;
      const uint32_t bj = (b >> (8 * j)) & 0xffu;
      if (kMode == 0)
        q[t * K + col(i + j)] = static_cast<uint8_t>(bj);
      else
        out[t * K + col(i + j)] = __float2bfloat16_rn(decoded(bj, gq));
    }
  }
}

// The vector route (K % 8 == 0, x / gate_up and out 16-byte, q 8-byte aligned): one warp per (token,
// pair of 128-column groups), half-warp h holding group 2p + h, each lane 8 consecutive columns (one
// 16-byte load, an 8-byte store of q or a 16-byte one of out), the amax by shuffles inside the
// half-warp. kSwiglu: x is gate|up [T, 2K] and the values are detail::swiglu_one(gate, up), the bf16
// values swiglu_bf16 writes, quantised without being written. Same bytes as the scalar route.
template <int kMode, bool kSwiglu>
__global__ void __launch_bounds__(kWarps * 32)
    group_quant_vec8_kernel(const __nv_bfloat16* x, uint8_t* __restrict__ q, float* __restrict__ scales,
                            __nv_bfloat16* out, int64_t T, int64_t K, int64_t groups, bool outer_major, int64_t ld) {
  const int lane = threadIdx.x & 31;
  const int64_t pairs = (groups + 1) / 2;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (item >= T * pairs) return;  // warp-uniform
  const int64_t t = item / pairs, g = (item % pairs) * 2 + (lane >> 4);
  const int64_t c = g * kGroup + (lane & 15) * 8;
  const bool in = c < K;  // K % 8 == 0: the lane's 8 columns are all in range or all out
  float v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = 0.0f;
  if (in) {
    if constexpr (kSwiglu) {
      const uint4 gv = *reinterpret_cast<const uint4*>(x + t * 2 * K + c);
      const uint4 uv = *reinterpret_cast<const uint4*>(x + t * 2 * K + K + c);
      const auto* g8 = reinterpret_cast<const __nv_bfloat16*>(&gv);
      const auto* u8 = reinterpret_cast<const __nv_bfloat16*>(&uv);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = __bfloat162float(detail::swiglu_one(g8[e], u8[e]));
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(x + t * K + c);
      const auto* x8 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(x8[e]);
        v[2 * e] = f.x, v[2 * e + 1] = f.y;
      }
    }
  }
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    finite = finite && fabsf(v[e]) <= 3.402823466e38f;
    amax = fmaxf(amax, fabsf(v[e]));
  }
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) {  // within the half-warp
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    finite = __shfl_xor_sync(0xffffffffu, static_cast<int>(finite), off) != 0 && finite;
  }
  if (!in) return;
  const GroupQuant gq = group_quant(amax, finite);
  if (kMode == 0 && (lane & 15) == 0) scales[outer_major ? g * ld + t : t * groups + g] = gq.s;
  uint32_t b[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) b[e] = encode2(v[2 * e], v[2 * e + 1], gq);
  if (kMode == 0) {
    *reinterpret_cast<uint2*>(q + t * K + c) = make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
  } else {
    uint4 raw;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e) o2[e] = __floats2bfloat162_rn(decoded(b[e], gq), decoded(b[e] >> 8, gq));
    *reinterpret_cast<uint4*>(out + t * K + c) = raw;
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

// null counts as aligned (the operand a mode does not use).
bool aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

// Launches the vector route when K and the pointers allow it (kSwiglu: only then; returns false
// without launching otherwise), else the scalar one.
template <int kMode, bool kSwiglu>
bool launch_groups(const __nv_bfloat16* x, uint8_t* q, float* scales, __nv_bfloat16* out, int64_t T, int64_t K,
                   Fp8ActScaleLayout layout, cudaStream_t stream) {
  if (T <= 0 || K <= 0) return true;
  const int64_t groups = (K + kGroup - 1) / kGroup;
  const int64_t ld = layout.outer_major ? layout.ld : 0;
  const bool vec = K % 8 == 0 && aligned(x, 16) && aligned(q, 8) && aligned(out, 16);
  if (vec) {
    const int64_t items = T * ((groups + 1) / 2);
    group_quant_vec8_kernel<kMode, kSwiglu>
        <<<static_cast<unsigned>((items + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
            x, q, scales, out, T, K, groups, layout.outer_major, ld);
  } else if constexpr (kSwiglu) {
    return false;
  } else {
    const int64_t items = T * groups;
    group_quant_kernel<kMode><<<static_cast<unsigned>((items + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
        x, q, scales, out, T, K, groups, layout.outer_major, ld);
  }
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace

void quantize_fp8_groups_bf16(const __nv_bfloat16* x, uint8_t* q, float* scales, int64_t T, int64_t K,
                              Fp8ActScaleLayout layout, cudaStream_t stream) {
  if (layout.outer_major && layout.ld < T)
    cuda::throw_invalid_argument("quantize_fp8_groups_bf16: the scales' group stride is smaller than the tokens");
  launch_groups<0, false>(x, q, scales, nullptr, T, K, layout, stream);
}

void swiglu_quantize_fp8_groups_bf16(const __nv_bfloat16* gate_up, int64_t T, int64_t F, __nv_bfloat16* act, uint8_t* q,
                                     float* scales, Fp8ActScaleLayout layout, cudaStream_t stream) {
  if (layout.outer_major && layout.ld < T)
    cuda::throw_invalid_argument(
        "swiglu_quantize_fp8_groups_bf16: the scales' group stride is smaller than the tokens");
  if (launch_groups<0, true>(gate_up, q, scales, nullptr, T, F, layout, stream)) return;
  swiglu_bf16(gate_up, T, F, act, stream);
  launch_groups<0, false>(act, q, scales, nullptr, T, F, layout, stream);
}

void fake_quantize_fp8_groups_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, int64_t T, int64_t K,
                                   cudaStream_t stream) {
  launch_groups<1, false>(x, nullptr, nullptr, out, T, K, Fp8ActScaleLayout{false, 0}, stream);
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
