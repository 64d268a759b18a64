// Flash-Verify attention kernel; see attention_verify.h.
#include <string>

#include "core/verify_mask.h"
#include "kernels/cuda/attention_verify.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256
constexpr int kRowsPerWarp = 4;     // query rows a warp carries through one sweep over the keys
constexpr int kChunk = 32;          // keys per shared-memory chunk (one per lane after the reduction)
constexpr int kTileInts = kVerifyTileInts;  // VerifyTile: q_start, q_end, k_start, k_end, n_cand, n_src

// One reduce-scatter stage over the warp: N partial sums in, N/2 out. Lanes with bit N/2 set keep
// the upper half of the keys, the others the lower half, and add their partner's copy. After the
// stages 32, 16, ..., 2, x[0] of lane j is the full dot product of key j.
template <int N>
__device__ __forceinline__ void reduce_scatter_stage(float (&x)[kChunk], int lane) {
  constexpr int h = N / 2;
  const bool up = (lane & h) != 0;
#pragma unroll
  for (int j = 0; j < h; ++j) {
    const float keep = up ? x[j + h] : x[j];
    const float send = up ? x[j] : x[j + h];
    x[j] = keep + __shfl_xor_sync(0xffffffffu, send, h);
  }
}

// grid = (tiles, heads). The CTA streams the keys of its tile — first the gathered cache keys, then
// the tile's own fresh keys — through shared memory in chunks of kChunk; each warp carries up to
// kRowsPerWarp query rows through the whole sweep (rows of larger tiles take further sweeps).
// Per chunk and row: each lane forms partial q·k over its head dimensions (lane + 32·i) for all
// kChunk keys, a 31-shuffle reduce-scatter leaves lane j with key j's score, one warp max updates
// the online softmax (the running maximum moves with every chunk, in-tile keys included, unlike the
// released kernel's in-tile block, §F.8) and the weighted V rows are summed with the weights
// broadcast by shuffles. The per-lane partial denominators are summed once at the end.
__global__ void __launch_bounds__(kThreads)
    attention_verify_kernel(const VerifyAttentionArgs a, const int32_t* __restrict__ table, int* error_flags) {
  __shared__ __nv_bfloat16 k_sh[kChunk * 32 * kMaxDimsPerLane];
  __shared__ __nv_bfloat16 v_sh[kChunk * 32 * kMaxDimsPerLane];
  __shared__ bool key_ok[kChunk];

  const int64_t tile = blockIdx.x;
  const int head = blockIdx.y;
  const int32_t qs = table[kTileInts * tile + 0], qe = table[kTileInts * tile + 1];
  const int32_t ks = table[kTileInts * tile + 2], ke = table[kTileInts * tile + 3];
  const int32_t S = table[kTileInts * tile + 4], n_src = table[kTileInts * tile + 5];
  const bool valid = qs >= 0 && qs <= qe && qe <= a.q_rows && ks >= 0 && ks <= ke && ke <= a.n_keys &&
                     verify_tile_groups_valid(qe - qs, S, n_src);
  if (!valid) {  // uniform over the CTA: no thread reaches a barrier
    if (threadIdx.x == 0 && error_flags) atomicOr(error_flags, kErrAttentionTile);
    return;
  }
  const int rows = qe - qs, T = rows - 2 * S - n_src;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int hd = a.head_dim, dpl = hd / 32;
  const int64_t ld = static_cast<int64_t>(a.n_heads) * hd;
  const int64_t hoff = static_cast<int64_t>(head) * hd;
  const int64_t kv_ld = static_cast<int64_t>(a.n_kv_heads) * hd;  // K/V rows (stores and tile)
  const int64_t kv_off = static_cast<int64_t>(head / (a.n_heads / a.n_kv_heads)) * hd;
  const int n_cache = ke - ks;
  const int n_chunks = (n_cache + kChunk - 1) / kChunk + (rows + kChunk - 1) / kChunk;
  const int vec_per_row = hd / 8;  // 16-byte vectors per key row of the head

  for (int g0 = 0; g0 < rows; g0 += kWarps * kRowsPerWarp) {
    float q[kRowsPerWarp][kMaxDimsPerLane], acc[kRowsPerWarp][kMaxDimsPerLane], m[kRowsPerWarp], l[kRowsPerWarp];
#pragma unroll
    for (int w = 0; w < kRowsPerWarp; ++w) {
      const int r = g0 + warp + kWarps * w;
      m[w] = -__int_as_float(0x7f800000);
      l[w] = 0.f;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) {
        q[w][i] = (r < rows && i < dpl) ? __bfloat162float(a.q[(qs + r) * ld + hoff + lane + 32 * i]) * a.scale : 0.f;
        acc[w][i] = 0.f;
      }
    }
    for (int c = 0; c < n_chunks; ++c) {
      // Chunk c: cache keys [ks + 32c, ...) first, then tile keys (tile columns) [32(c − cache chunks), ...).
      const int cache_chunks = (n_cache + kChunk - 1) / kChunk;
      const bool in_tile = c >= cache_chunks;
      const int c0 = in_tile ? (c - cache_chunks) * kChunk : c * kChunk;
      const int n_here = in_tile ? min(kChunk, rows - c0) : min(kChunk, n_cache - c0);
      __syncthreads();  // the previous chunk is no longer read
      if (threadIdx.x < kChunk) {
        bool ok = static_cast<int>(threadIdx.x) < n_here;
        if (ok && !in_tile) {
          const int32_t kr = a.key_rows[ks + c0 + threadIdx.x];
          if (kr < 0 || kr >= a.kv_rows) {
            ok = false;
            if (error_flags) atomicOr(error_flags, kErrAttentionTile);
          }
        }
        key_ok[threadIdx.x] = ok;
      }
      for (int e = threadIdx.x; e < kChunk * vec_per_row; e += kThreads) {
        const int j = e / vec_per_row, v = e % vec_per_row;
        uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
        if (j < n_here) {
          int64_t row;
          if (in_tile) {
            row = static_cast<int64_t>(qs) + c0 + j;
          } else {
            row = a.key_rows[ks + c0 + j];
            if (row < 0 || row >= a.kv_rows) row = -1;
          }
          if (row >= 0) {
            const __nv_bfloat16* kb = in_tile ? a.k_tile : a.k_store;
            const __nv_bfloat16* vb = in_tile ? a.v_tile : a.v_store;
            kv4 = *reinterpret_cast<const uint4*>(kb + row * kv_ld + kv_off + 8 * v);
            vv4 = *reinterpret_cast<const uint4*>(vb + row * kv_ld + kv_off + 8 * v);
          }
        }
        *reinterpret_cast<uint4*>(k_sh + j * hd + 8 * v) = kv4;
        *reinterpret_cast<uint4*>(v_sh + j * hd + 8 * v) = vv4;
      }
      __syncthreads();

#pragma unroll
      for (int w = 0; w < kRowsPerWarp; ++w) {
        const int r = g0 + warp + kWarps * w;
        if (r >= rows) continue;  // warp-uniform
        float x[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          float d = 0.f;
#pragma unroll
          for (int i = 0; i < kMaxDimsPerLane; ++i)
            if (i < dpl) d += q[w][i] * __bfloat162float(k_sh[j * hd + lane + 32 * i]);
          x[j] = d;
        }
        reduce_scatter_stage<32>(x, lane);
        reduce_scatter_stage<16>(x, lane);
        reduce_scatter_stage<8>(x, lane);
        reduce_scatter_stage<4>(x, lane);
        reduce_scatter_stage<2>(x, lane);
        const bool attend = key_ok[lane] && (!in_tile || verify_may_attend(T, S, r, c0 + lane));
        const float sc = attend ? x[0] : -__int_as_float(0x7f800000);
        const float m_new = fmaxf(m[w], detail::warp_max(sc));
        if (m_new == -__int_as_float(0x7f800000)) continue;  // nothing attended yet (warp-uniform)
        const float corr = expf(m[w] - m_new);  // exp(-inf) = 0 on the first attended chunk
        const float p = attend ? expf(sc - m_new) : 0.f;
        l[w] = l[w] * corr + p;
        m[w] = m_new;
#pragma unroll
        for (int i = 0; i < kMaxDimsPerLane; ++i) acc[w][i] *= corr;
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
          for (int i = 0; i < kMaxDimsPerLane; ++i)
            if (i < dpl) acc[w][i] += pj * __bfloat162float(v_sh[j * hd + lane + 32 * i]);
        }
      }
    }
#pragma unroll
    for (int w = 0; w < kRowsPerWarp; ++w) {
      const int r = g0 + warp + kWarps * w;
      const float lsum = detail::warp_sum(l[w]);
      if (r >= rows) continue;
      const float inv = lsum > 0.f ? 1.f / lsum : 0.f;  // lsum >= 1: every row sees a tile column
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i)
        if (i < dpl) a.out[(qs + r) * ld + hoff + lane + 32 * i] = __float2bfloat16_rn(acc[w][i] * inv);
    }
  }
}

}  // namespace

void attention_verify_bf16(const VerifyAttentionArgs& args, const int32_t* table, int64_t n_tiles, int* error_flags,
                           cudaStream_t stream) {
  VerifyAttentionArgs a = args;
  if (a.n_kv_heads == 0) a.n_kv_heads = a.n_heads;
  if (a.head_dim <= 0 || a.head_dim % 32 != 0 || a.head_dim > 32 * kMaxDimsPerLane)
    cuda::throw_unsupported("attention_verify: head_dim " + std::to_string(a.head_dim) +
                            " unsupported (needs a multiple of 32, at most 256)");
  if (a.n_heads <= 0 || a.n_heads > 65535)
    cuda::throw_invalid_argument("attention_verify: n_heads " + std::to_string(a.n_heads) + " outside [1, 65535]");
  if (a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    cuda::throw_invalid_argument("attention_verify: n_kv_heads " + std::to_string(a.n_kv_heads) +
                                 " does not divide n_heads " + std::to_string(a.n_heads));
  if (a.q_rows > 0x7fffffff || a.n_keys > 0x7fffffff)
    cuda::throw_invalid_argument("attention_verify: more than 2^31-1 query rows or gathered keys");
  if (n_tiles <= 0) return;
  if (n_tiles > 0x7fffffff) cuda::throw_invalid_argument("attention_verify: more than 2^31-1 tiles");
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(a.n_heads));
  attention_verify_kernel<<<grid, kThreads, 0, stream>>>(a, table, error_flags);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
