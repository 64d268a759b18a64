// Attention importance kernel; see attention_importance.h.
#include <string>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/attention_importance.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerPass = 16;
constexpr int kMaxHeadDim = 256;

// grid = (tiles, heads). Shared memory: q_s [kRowsPerPass][head_dim] fp32, lse_s [kRowsPerPass].
__global__ void __launch_bounds__(kThreads)
    importance_kernel(const ImportanceArgs a, const int32_t* __restrict__ table, int* error_flags) {
  extern __shared__ float smem[];
  float* q_s = smem;
  float* lse_s = smem + kRowsPerPass * a.head_dim;

  const int64_t tile = blockIdx.x;
  const int head = blockIdx.y;
  const int32_t qs = table[4 * tile + 0], qe = table[4 * tile + 1];
  const int32_t ks = table[4 * tile + 2], ke = table[4 * tile + 3];
  if (!detail::attention_tile_valid(qs, qe, ks, ke, a.q_rows, a.kv_rows)) {
    if (threadIdx.x == 0 && error_flags) atomicOr(error_flags, kErrAttentionTile);
    return;
  }
  if (qs == qe || ks == ke) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t ld = static_cast<int64_t>(a.n_heads) * a.head_dim;
  const int64_t hoff = static_cast<int64_t>(head) * a.head_dim;
  const int64_t kv_ld = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;  // K row pitch
  const int64_t kv_off = static_cast<int64_t>(head / (a.n_heads / a.n_kv_heads)) * a.head_dim;
  const int dh = a.head_dim;

  for (int32_t r0 = qs; r0 < qe; r0 += kRowsPerPass) {
    const int nr = qe - r0 < kRowsPerPass ? qe - r0 : kRowsPerPass;
    // Stage the pass's query rows (rows past nr are zero so every thread computes finite dots).
    for (int i = threadIdx.x; i < kRowsPerPass * dh; i += kThreads) {
      const int r = i / dh, d = i - r * dh;
      q_s[i] = r < nr ? __bfloat162float(a.q[(static_cast<int64_t>(r0) + r) * ld + hoff + d]) : 0.f;
    }
    __syncthreads();
    if (a.probability_mass) {
      // Log-sum-exp of scale·q·k over the tile's keys, one warp per row (online max / sum).
      for (int r = warp; r < nr; r += kWarps) {
        float m = -__int_as_float(0x7f800000), l = 0.f;
        for (int64_t t = ks; t < ke; ++t) {
          const __nv_bfloat16* kr = a.k + t * kv_ld + kv_off;
          float d = 0.f;
          for (int i = lane; i < dh; i += 32) d += q_s[r * dh + i] * __bfloat162float(kr[i]);
          const float sc = detail::warp_sum(d) * a.scale;
          const float mn = fmaxf(m, sc);
          l = l * expf(m - mn) + expf(sc - mn);  // exp(-inf) = 0 on the first key
          m = mn;
        }
        if (lane == 0) lse_s[r] = m + logf(l);
      }
      __syncthreads();
    }
    for (int64_t t = ks + threadIdx.x; t < ke; t += kThreads) {
      float dots[kRowsPerPass];
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) dots[r] = 0.f;
      const __nv_bfloat16* kr = a.k + t * kv_ld + kv_off;
      for (int i = 0; i < dh; ++i) {
        const float kv = __bfloat162float(kr[i]);
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) dots[r] += q_s[r * dh + i] * kv;  // smem broadcast
      }
      float s = 0.f;
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r)
        if (r < nr) s += a.probability_mass ? expf(dots[r] * a.scale - lse_s[r]) : dots[r];
      atomicAdd(a.scores + t, a.weight * s);
    }
    __syncthreads();  // q_s / lse_s are rewritten by the next pass
  }
}

// Raw variant by linearity: Σ_rows Σ_heads q[r,h]·k[t,h/g] = q̄·k[t] over the whole K row (all K/V
// heads), q̄[j] = Σ_rows Σ_{h of K/V head j's group} q[r,h] (fp32; g = n_heads / n_kv_heads). grid = (tiles,
// kRawChunkCtas); a CTA sums q̄ of its tile once into shared memory, then its warps take the tile's keys kRawKeys at a
// time (chunk blockIdx.y, then every gridDim.y-th): one fp32 dot of the width-long rows per key (16-byte loads when
// width % 8 == 0), one atomicAdd per (key, tile). Reads each key row once instead of once per head and 16-row pass.
constexpr int kRawKeys = 64;
constexpr int kRawChunkCtas = 128;
constexpr size_t kRawMaxWidth = 12288;  // wider rows (none in LLaDA: 4096) take the per-head kernel

__global__ void __launch_bounds__(kThreads)
    importance_raw_kernel(const ImportanceArgs a, const int32_t* __restrict__ table, int* error_flags) {
  extern __shared__ float qbar[];
  const int64_t tile = blockIdx.x;
  const int32_t qs = table[4 * tile + 0], qe = table[4 * tile + 1];
  const int32_t ks = table[4 * tile + 2], ke = table[4 * tile + 3];
  if (!detail::attention_tile_valid(qs, qe, ks, ke, a.q_rows, a.kv_rows)) {
    if (threadIdx.x == 0 && blockIdx.y == 0 && error_flags) atomicOr(error_flags, kErrAttentionTile);
    return;
  }
  if (qs == qe || static_cast<int64_t>(ks) + static_cast<int64_t>(blockIdx.y) * kRawKeys >= ke) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q_width = a.n_heads * a.head_dim, width = a.n_kv_heads * a.head_dim;  // q / K rows
  const int group = a.n_heads / a.n_kv_heads;
  for (int i = threadIdx.x; i < width; i += kThreads) {
    const int j = i / a.head_dim, d = i - j * a.head_dim;  // K/V head, dimension
    float s = 0.f;
    for (int32_t r = qs; r < qe; ++r) {
      const __nv_bfloat16* qr =
          a.q + static_cast<int64_t>(r) * q_width + static_cast<int64_t>(j) * group * a.head_dim + d;
      for (int h = 0; h < group; ++h) s += __bfloat162float(qr[h * a.head_dim]);
    }
    qbar[i] = s;
  }
  __syncthreads();
  const bool vec = width % 8 == 0 && reinterpret_cast<uintptr_t>(a.k) % 16 == 0;
  for (int64_t c0 = ks + static_cast<int64_t>(blockIdx.y) * kRawKeys; c0 < ke;
       c0 += static_cast<int64_t>(gridDim.y) * kRawKeys) {
    const int64_t c1 = c0 + kRawKeys < ke ? c0 + kRawKeys : ke;
    for (int64_t t = c0 + warp; t < c1; t += kWarps) {
      const __nv_bfloat16* kr = a.k + t * width;
      float d = 0.f;
      if (vec) {
        for (int i = lane * 8; i < width; i += 32 * 8) {
          const uint4 raw = *reinterpret_cast<const uint4*>(kr + i);
          const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(p[j]);
            d += qbar[i + 2 * j] * f.x + qbar[i + 2 * j + 1] * f.y;
          }
        }
      } else {
        for (int i = lane; i < width; i += 32) d += qbar[i] * __bfloat162float(kr[i]);
      }
      d = detail::warp_sum(d);
      if (lane == 0) atomicAdd(a.scores + t, a.weight * d);
    }
  }
}

}  // namespace

void attention_importance_bf16(const ImportanceArgs& args, const int32_t* table, int64_t n_tiles, int* error_flags,
                               cudaStream_t stream) {
  ImportanceArgs a = args;
  if (a.n_kv_heads == 0) a.n_kv_heads = a.n_heads;
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim)
    cuda::throw_unsupported("attention_importance: head_dim " + std::to_string(a.head_dim) +
                            " unsupported (needs 1..256)");
  if (a.n_heads <= 0 || a.n_heads > 65535)
    cuda::throw_invalid_argument("attention_importance: n_heads " + std::to_string(a.n_heads) +
                                 " outside [1, 65535]");
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    cuda::throw_invalid_argument("attention_importance: n_kv_heads " + std::to_string(a.n_kv_heads) +
                                 " does not divide n_heads " + std::to_string(a.n_heads));
  if (n_tiles <= 0) return;
  if (n_tiles > 0x7fffffff) cuda::throw_invalid_argument("attention_importance: more than 2^31-1 tiles");
  const size_t width = static_cast<size_t>(a.n_kv_heads) * a.head_dim;  // q̄ is one K row wide
  if (!a.probability_mass && width <= kRawMaxWidth) {  // q̄ in the default 48 KiB of shared memory
    const size_t smem = width * sizeof(float);
    const int64_t chunks = (a.kv_rows + kRawKeys - 1) / kRawKeys;
    const dim3 grid(static_cast<unsigned>(n_tiles),
                    static_cast<unsigned>(chunks < 1 ? 1 : (chunks < kRawChunkCtas ? chunks : kRawChunkCtas)));
    importance_raw_kernel<<<grid, kThreads, smem, stream>>>(a, table, error_flags);
    CUDA_CHECK_LAUNCH();
    return;
  }
  const size_t smem = (static_cast<size_t>(kRowsPerPass) * a.head_dim + kRowsPerPass) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(a.n_heads));
  importance_kernel<<<grid, kThreads, smem, stream>>>(a, table, error_flags);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
