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

// The same arithmetic for rows of cols % 8 == 0 (16-byte-aligned x, w, out) of at most
// kThreads * 8 * kChunks columns: each thread loads its 8-column chunks (tid + c * kThreads) of x and
// of w once, all before the reduction (a row's only dependent round trip is then the reduction),
// keeps them in registers for the output, and stores 16 bytes at a time. The
// scalar kernel reads a row twice in 2-byte loads, one dependent round per 256 columns: on the H200 at
// LLaDA-8B's 4096 columns it took ~7 us per call at 128 and 640 rows and ~26 us at 4096, this one
// 3.4, 4.5 and 16.6 us (the row read once and written once at about the copy bandwidth; ncu,
// bench/results/2026-12-04-h200-select-small-list/). Only the order of the fp32 sum of squares differs
// from the scalar kernel. Each thread writes only the chunks it read: out may alias x.
template <int kChunks>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_vec8_kernel(const __nv_bfloat16* x, const __nv_bfloat16* __restrict__ w, int64_t cols, float eps,
                        __nv_bfloat16* out) {
  __shared__ float scratch[32];
  const int n8 = static_cast<int>(cols / 8);
  const uint4* xr = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(blockIdx.x) * cols);
  uint4* outr = reinterpret_cast<uint4*>(out + static_cast<int64_t>(blockIdx.x) * cols);
  const uint4* __restrict__ w8 = reinterpret_cast<const uint4*>(w);
  uint4 v[kChunks], wv[kChunks];  // the weights too before the reduction: no load after it
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
    if (threadIdx.x + c * kThreads < n8) {
      v[c] = xr[threadIdx.x + c * kThreads];
      wv[c] = w8[threadIdx.x + c * kThreads];
    }
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (threadIdx.x + c * kThreads >= n8) continue;
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v[c]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]);
      ss = fmaf(f.x, f.x, ss);
      ss = fmaf(f.y, f.y, ss);
    }
  }
  ss = detail::block_sum<kThreads>(ss, scratch);
  const float mean = ss / static_cast<float>(cols);
  const float inv_rms = 1.0f / sqrtf(mean + eps);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = threadIdx.x + c * kThreads;
    if (i >= n8) continue;
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&v[c]);
    const auto* hw = reinterpret_cast<const __nv_bfloat162*>(&wv[c]);
    uint4 o;
    auto* ho = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(h[k]), g = __bfloat1622float2(hw[k]);
      ho[k] = __floats2bfloat162_rn(detail::round_bf16(f.x * inv_rms) * g.x, detail::round_bf16(f.y * inv_rms) * g.y);
    }
    outr[i] = o;
  }
}

}  // namespace

void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps,
                  __nv_bfloat16* out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  if (rows > 0x7fffffff) cuda::throw_invalid_argument("rmsnorm: more than 2^31-1 rows");
  const auto grid = static_cast<unsigned>(rows);
  const bool vec8 =
      cols % 8 == 0 && detail::is_aligned(x, 16) && detail::is_aligned(w, 16) && detail::is_aligned(out, 16);
  if (vec8 && cols <= kThreads * 8)
    rmsnorm_vec8_kernel<1><<<grid, kThreads, 0, stream>>>(x, w, cols, eps, out);
  else if (vec8 && cols <= kThreads * 8 * 2)
    rmsnorm_vec8_kernel<2><<<grid, kThreads, 0, stream>>>(x, w, cols, eps, out);
  else if (vec8 && cols <= kThreads * 8 * 4)
    rmsnorm_vec8_kernel<4><<<grid, kThreads, 0, stream>>>(x, w, cols, eps, out);
  else
    rmsnorm_kernel<<<grid, kThreads, 0, stream>>>(x, w, cols, eps, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
