// Pieces shared by the two tensor-core flash attention kernels (include from .cu files only):
// attention_flash_kernel.cuh (mma.sync, any sm_80+) and attention_wgmma_kernel.cuh (wgmma, sm_90a).
//
// Both hold a warp's scores and outputs in the same register layout: a warp owns 16 query rows;
// lane l holds rows l/4 and l/4 + 8 and, in every 8-column block nb, columns 2(l%4) and 2(l%4)+1.
// Element e (0..3) of block nb is (row l/4 + 8·(e/2), column 8·nb + 2(l%4) + e%2). This is the
// m16n8 accumulator of mma.sync and the per-warp slice of wgmma's m64nN accumulator (CuTe's
// GMMA::CLayout_64xN), so the softmax, importance and store code below serves both. Accessors
// `s(nb, e)` / `o(nd, e)` return float& into the caller's registers (fully unrolled: no memory).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels::detail {

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kNegInf = -__builtin_huge_valf();

/// cp.async copy of query rows row0 .. row0 + kRows - 1 (128 bf16 columns of one head: src points at
/// the head's column 0 of row 0, ld elements per row) into shared memory, 16-byte chunks spread
/// over kThreads threads; rows >= n_valid are zero-filled. dst(r, ch) is the shared-memory element
/// pointer of row r's 16-byte chunk ch (the caller's swizzled layout). The caller commits and waits.
template <int kRows, int kThreads, class Dst>
__device__ __forceinline__ void load_q_rows_async(int tid, const __nv_bfloat16* src, int64_t ld, int row0, int n_valid,
                                                  Dst&& dst) {
  constexpr int kChunksPerRow = 128 / 8;
  static_assert(kRows * kChunksPerRow % kThreads == 0, "Q tile chunks per thread");
#pragma unroll
  for (int it = 0; it < kRows * kChunksPerRow / kThreads; ++it) {
    const int c = tid + it * kThreads;
    const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
    const bool valid = r < n_valid;
    const int64_t off = valid ? static_cast<int64_t>(row0 + r) * ld + ch * 8 : 0;
    cp_async_16(smem_addr(dst(r, ch)), src + off, valid);
  }
}

/// The scored query rows [*s0, *s1) (store rows) of work item w, from score tile w.tile
/// (AttentionArgs::score_tiles); empty when the importance is off or the tile has no score tile. A
/// score tile outside its table tile or with other keys sets kErrAttentionTile (once per tile: by
/// the caller that passes `reporter` for the work item of its first rows, head 0) and scores
/// nothing.
__device__ __forceinline__ void score_rows(const AttentionArgs& a, const AttentionWorkItem& w, bool reporter, int* s0,
                                           int* s1) {
  *s0 = *s1 = 0;
  if (a.importance == nullptr || w.tile >= a.n_score_tiles) return;
  const int32_t* const st = a.score_tiles + 4 * static_cast<int64_t>(w.tile);
  const int32_t* const tt = a.table + 4 * static_cast<int64_t>(w.tile);
  const int32_t b = st[0], e = st[1];
  if (b < tt[0] || e > tt[1] || b >= e || st[2] != w.k_begin || st[3] != w.k_end) {
    if (reporter && w.q_begin == tt[0] && a.error_flags) atomicOr(a.error_flags, kErrAttentionTile);
    return;
  }
  *s0 = b;
  *s1 = e;
}

/// The scored rows [*lo, *hi) of score_rows' [s0, s1), relative to the warp's first row (store row
/// q_begin + warp_row0) and within [0, 16) and the item's rows (< q_end); empty when none.
__device__ __forceinline__ void clip_score_rows(int s0, int s1, int q_begin, int q_end, int warp_row0, int* lo,
                                                int* hi) {
  *lo = max(s0 - q_begin - warp_row0, 0);
  *hi = min(min(s1, q_end) - q_begin - warp_row0, 16);
}

/// Both at once: the scored rows of the warp whose first query row is w.q_begin + warp_row0.
/// Uniform over the CTA apart from warp_row0.
__device__ __forceinline__ void warp_score_rows(const AttentionArgs& a, const AttentionWorkItem& w, int warp_row0,
                                                bool reporter, int* lo, int* hi) {
  int s0 = 0, s1 = 0;
  score_rows(a, w, reporter, &s0, &s1);
  clip_score_rows(s0, s1, w.q_begin, w.q_end, warp_row0, lo, hi);
}

/// Raw importance of one key tile: importance[key] += weight · Σ_{scored rows} s(row, key) for the
/// warp's kNB·8 keys starting at store row key0 (keys >= k_end skipped), from the unscaled,
/// unmasked scores, in two steps: importance_row_sums, then importance_commit (the wgmma kernel
/// takes step 1 only and hands the partial sums to a warp of its own for the reduction and atomics).
///
/// Step 1: the rows a thread holds (lane/4 and lane/4 + 8) summed where scored: v[nb][e] is column
/// nb·8 + 2·(lane%4) + e's part. Selects, not products, so a NaN score of an unscored row (a stale
/// row past a tile's end) stays out.
template <int kNB, class S>
__device__ __forceinline__ void importance_row_sums(S&& s, int lane, int lo, int hi, float (&v)[kNB][2]) {
  if (lo <= 0 && hi >= 16) {  // every row of the warp scored (uniform): the same sums, no selects
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
      v[nb][0] = s(nb, 0) + s(nb, 2);
      v[nb][1] = s(nb, 1) + s(nb, 3);
    }
    return;
  }
  const int r0 = lane >> 2;
  const bool in0 = r0 >= lo && r0 < hi, in1 = r0 + 8 >= lo && r0 + 8 < hi;
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
    v[nb][0] = (in0 ? s(nb, 0) : 0.f) + (in1 ? s(nb, 2) : 0.f);
    v[nb][1] = (in0 ? s(nb, 1) : 0.f) + (in1 ? s(nb, 3) : 0.f);
  }
}

/// Step 2: a reduce-scatter of v over the 8 lanes of a column (lane bits 4, 3, 2): at each step a
/// lane keeps the half of its blocks its bit selects and adds the partner's copy of that half, so
/// at the end lane l holds the sums of blocks g + l/4 (g = 0, 8, ...): 14 shuffles per 8 blocks,
/// then one atomic per key and warp. v is consumed.
template <int kNB>
__device__ __forceinline__ void importance_commit(float (&v)[kNB][2], int lane, int key0, int k_end, float* importance,
                                                  float weight) {
  static_assert(kNB % 8 == 0, "the reduce-scatter handles 8 n8 blocks at a time");
#pragma unroll
  for (int step = 0; step < 3; ++step) {
    const int bit = 16 >> step, half = 4 >> step;
    const bool upper = (lane & bit) != 0;
#pragma unroll
    for (int g = 0; g < kNB; g += 8) {
#pragma unroll
      for (int i = 0; i < half; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float lo_v = v[g + i][e], hi_v = v[g + i + half][e];
          v[g + i][e] = (upper ? hi_v : lo_v) + __shfl_xor_sync(0xffffffffu, upper ? lo_v : hi_v, bit);
        }
      }
    }
  }
  const int r0 = lane >> 2;
#pragma unroll
  for (int g = 0; g < kNB; g += 8) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + (g + r0) * 8 + 2 * (lane & 3) + e;
      if (key < k_end) atomicAdd(importance + key, weight * v[g][e]);
    }
  }
}

/// Both steps at once.
template <int kNB, class S>
__device__ __forceinline__ void accumulate_importance(S&& s, int lane, int lo, int hi, int key0, int k_end,
                                                      float* importance, float weight) {
  float v[kNB][2];
  importance_row_sums<kNB>(s, lane, lo, hi, v);
  importance_commit<kNB>(v, lane, key0, k_end, importance, weight);
}

/// Sets the scores of columns >= valid_keys to −inf.
template <int kNB, class S>
__device__ __forceinline__ void mask_columns_from(S&& s, int lane, int valid_keys) {
#pragma unroll
  for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = nb * 8 + 2 * (lane & 3) + (e & 1);
      if (col >= valid_keys) s(nb, e) = kNegInf;
    }
  }
}

/// O's row half rr (elements 2rr, 2rr+1 of every n8 block) *= alpha.
template <int kND, class O>
__device__ __forceinline__ void rescale_row(O&& o, int rr, float alpha) {
#pragma unroll
  for (int nd = 0; nd < kND; ++nd) {
    o(nd, 2 * rr) *= alpha;
    o(nd, 2 * rr + 1) *= alpha;
  }
}

/// One online-softmax step (FlashAttention-2, Algorithm 1) for the thread's two rows: new running
/// maxima in the log2 domain (scores · scale_log2), the partial row sums and O rescaled by
/// alpha = exp2(old − new) (written to `alpha`; with kRescaleO false O is left to the caller, who
/// may still have it in flight in an asynchronous MMA), and s replaced by p = exp2(s · scale_log2 −
/// max) (unnormalised). kMayBeEmpty: a row whose columns so far are all −inf keeps max −inf and gets
/// p = 0 (the verify mask); otherwise every row has a finite score in every tile.
template <int kNB, int kND, bool kMayBeEmpty, bool kRescaleO = true, class S, class O>
__device__ __forceinline__ void online_softmax(S&& s, O&& o, float (&row_max)[2], float (&row_sum)[2], float scale_log2,
                                               float (&alpha_out)[2]) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float mx = kNegInf;
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) mx = fmaxf(mx, fmaxf(s(nb, 2 * rr), s(nb, 2 * rr + 1)));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(row_max[rr], mx * scale_log2);
    const float m_sub = kMayBeEmpty && m_new == kNegInf ? 0.f : m_new;
    const float alpha = fast_exp2(row_max[rr] - m_sub);  // 0 on the first tile (−inf)
    row_max[rr] = m_new;
    row_sum[rr] *= alpha;
    alpha_out[rr] = alpha;
    if constexpr (kRescaleO) rescale_row<kND>(o, rr, alpha);
#pragma unroll
    for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = fast_exp2(fmaf(s(nb, 2 * rr + e), scale_log2, -m_sub));
        s(nb, 2 * rr + e) = p;
        row_sum[rr] += p;
      }
    }
  }
}

/// 1 / (the thread's partial row sums reduced over its quad) for its two rows; 0 for a zero sum.
__device__ __forceinline__ float inverse_row_sum(const float (&row_sum)[2], int rr) {
  float l = row_sum[rr];
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  return l > 0.f ? 1.f / l : 0.f;
}

/// Writes the thread's two rows of O / row sum (sums reduced over the quad; a zero sum writes 0)
/// as bf16 to dst_row0 + r·ld for warp rows r = lane/4 and lane/4 + 8 that are < n_rows.
template <int kND, class O>
__device__ __forceinline__ void store_rows(O&& o, const float (&row_sum)[2], int lane, int n_rows,
                                           __nv_bfloat16* dst_row0, int64_t ld) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const float inv = inverse_row_sum(row_sum, rr);
    const int row = (lane >> 2) + 8 * rr;
    if (row < n_rows) {
      __nv_bfloat16* const dst = dst_row0 + static_cast<int64_t>(row) * ld;
#pragma unroll
      for (int nd = 0; nd < kND; ++nd) {
        const int col = nd * 8 + 2 * (lane & 3);
        *reinterpret_cast<__nv_bfloat162*>(dst + col) =
            __floats2bfloat162_rn(o(nd, 2 * rr) * inv, o(nd, 2 * rr + 1) * inv);
      }
    }
  }
}

/// Host: the argument checks shared by the flash entry points (attention_flash, attention_verify_flash and the
/// bench-only variants of bench/kernels/): head_dim 128 (else Error(kUnsupported)), n_heads in [1, 65535], q, k, v,
/// out 16-byte aligned, rows < 2^31 and capacity · n_heads < 2^31 (else Error(kInvalidArgument), the message
/// starting with `op`). Defined in attention_flash.cu.
void check_flash_args(const char* op, const AttentionArgs& a, int64_t capacity);

}  // namespace flashdllm::kernels::detail
