// The mma.sync flash attention kernel (head_dim 128, bf16 tensor cores) as a template over its tile
// shape, for the translation units that instantiate it: attention_flash.cu (the shipped m64n64 and the
// Flash-Verify shapes) and bench/kernels/attention_mma_variants.cu (128-row shapes that no policy
// picks: bench/kernels/README.md). Include from .cu files only; see attention.h for the contract.
//
// Per CTA: one work item (≤ kBlockM query rows of one tile) × one query head (its K/V from K/V head
// AttentionArgs::kv_head_of: grouped-query attention); kBlockM/16 warps, each
// owning 16 query rows (the verify mode's key split: twice that, see the kernel). Per warp and key
// tile of kBlockN keys:
//   S = Q·Kᵀ      mma.sync m16n8k16 (A = Q fragments kept in registers, B = K via ldmatrix)
//   online softmax on S in fp32 (row max over the 4 lanes of a quad, exp2 with log2(e)·scale folded)
//   O += P·V      P re-packed from the S accumulators to bf16 A fragments (same layout), V via ldmatrix.trans
// Shared memory: two buffers of {K tile, V tile} (cp.async double buffering: tile j+1 is loaded
// while tile j is computed); the Q tile is staged in buffer 1 before the loop starts. Each
// [rows][128] bf16 tile stores row r's 16-byte chunk c at chunk position c ^ (r & 7), so the 8
// row addresses of every ldmatrix phase hit 8 distinct bank groups (no conflicts).
//
// Fused raw importance (AttentionArgs::importance; work items of the first n_score_tiles tiles, rows
// of their score tile): before masking, each warp holding scored rows sums its S tile over them in
// registers and shuffles, one global atomic per key and warp (detail::accumulate_importance in
// attention_flash_common.cuh, shared with the wgmma kernel). No shared memory, no extra barrier.
//
// Invariants: every key tile holds at least one key < k_end (tiles are ceil-divided), so row
// maxima are finite after the first tile; keys ≥ k_end are zero-filled in shared memory and
// their scores set to −inf; query rows ≥ q_end are zero-filled, computed, and not stored.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/verify_mask.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_flash_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels::flash_mma {

constexpr int kHeadDim = 128;
constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks in a 128-dim bf16 row
constexpr int kRowBytes = kHeadDim * 2;      // bytes of one tile row in shared memory

// ----------------------------------------------------------------------------- PTX wrappers

using detail::cp_async_16;
using detail::cp_async_commit;
using detail::cp_async_wait_all;
using detail::smem_addr;

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a · b for one m16n8k16 bf16 tile with fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> bf16x2 in one register; `lo` goes to the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Element offset of (row, 16-byte chunk) in a swizzled [rows][128] bf16 tile.
__device__ __forceinline__ int swizzle(int row, int chunk) { return row * kHeadDim + ((chunk ^ (row & 7)) << 3); }

// ----------------------------------------------------------------------------- kernel

template <int kBlockM, int kBlockN, int kKeySplit = 1>
struct FlashTraits {
  static constexpr int kRowWarps = kBlockM / 16;  // warps per key group, 16 query rows each
  static constexpr int kWarps = kRowWarps * kKeySplit;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTileElems = kBlockN * kHeadDim;                          // one K or V tile
  static constexpr int kSmemBytes = 2 * 2 * kTileElems * sizeof(__nv_bfloat16);  // 2 buffers × {K, V}
  static_assert(kBlockM % 16 == 0 && kBlockN % 64 == 0, "tile shape (the importance reduces 8 n8 blocks at a time)");
  static_assert(kBlockM * kHeadDim <= 2 * kTileElems, "the Q tile must fit in K/V buffer 1");
  static_assert(kKeySplit == 1 || kKeySplit == 2, "key groups");
  // The key-split merge stages O, the row maxima and sums of group 1 in the K/V buffers.
  static_assert((kKeySplit - 1) * kRowWarps * 32 * (kHeadDim / 2 + 4) * 4 <= kSmemBytes, "merge staging");
};

// kVerify: the Flash-Verify pass (attention_verify_flash). A work item is a chunk of one verify tile
// (w.tile indexes the VerifyTile table); its keys are the tile's gathered store rows
// key_rows[k_begin, k_end) followed by the tile's own fresh K/V rows (k_tile/v_tile rows
// [q_start, q_end)) under verify_may_attend (core/verify_mask.h); one online softmax over both.
//
// kKeySplit 2 (the verify mode's default, VerifyCta): two warp groups share the CTA's rows,
// group g taking keys [32g, 32g + 32) of every 64-key tile with its own online softmax; group 1
// hands its O, maxima and sums to group 0 through shared memory at the end (FlashDecoding's merge,
// inside the CTA). A verify tile has 20-32 rows, so this halves each warp's dependent chain per
// key tile where a 64-row CTA would leave half its warps without rows.
template <int kBlockM, int kBlockN, bool kVerify, int kKeySplit = 1, int kMinCtas = 1>
__global__ void __launch_bounds__(FlashTraits<kBlockM, kBlockN, kKeySplit>::kThreads, kMinCtas)
    flash_attention_kernel(const AttentionArgs a, const AttentionWorkItem* __restrict__ work,
                           const int32_t* __restrict__ work_count, const VerifyKeys vk) {
  using T = FlashTraits<kBlockM, kBlockN, kKeySplit>;
  static_assert(kKeySplit == 1 || kVerify, "the key split has no importance (verify mode only)");
  constexpr int kThreads = T::kThreads;
  constexpr int kNB = kBlockN / 8 / kKeySplit;  // n8 blocks of S per key tile and warp
  constexpr int kKeysW = kBlockN / kKeySplit;   // keys per tile and warp

  if (static_cast<int>(blockIdx.x) >= *work_count) return;  // uniform over the CTA
  const AttentionWorkItem w = work[blockIdx.x];
  const int head = blockIdx.y;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* const smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* const sQ = smem + 2 * T::kTileElems;  // aliases buffer 1 until the loop starts

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int row_warp = warp % T::kRowWarps, group = warp / T::kRowWarps;  // rows / key group
  const int q_len = w.q_end - w.q_begin;
  // Importance: this warp's scored rows [score_lo, score_hi) of its 16 (empty: not scored).
  int score_lo = 0, score_hi = 0;
  detail::warp_score_rows(a, w, row_warp * 16, tid == 0 && head == 0, &score_lo, &score_hi);
  const bool scored = score_lo < score_hi;  // uniform over the warp
  const int64_t ld = static_cast<int64_t>(a.n_heads) * kHeadDim;
  const int64_t kv_col = static_cast<int64_t>(a.kv_head_of(head)) * kHeadDim;  // grouped-query attention
  const __nv_bfloat16* const qg = a.q + static_cast<int64_t>(head) * kHeadDim;
  const __nv_bfloat16* const kg = a.k + kv_col;
  const __nv_bfloat16* const vg = a.v + kv_col;
  // Key count: the key range, or (verify) the gathered keys + the tile's own rows.
  int n_gather = w.k_end - w.k_begin, n_keys = n_gather, tile_q0 = 0, n_kept = 0, n_cand = 0;
  if constexpr (kVerify) {
    const int32_t* const tr = vk.table + kVerifyTileInts * static_cast<int64_t>(w.tile);
    tile_q0 = tr[0];
    n_cand = tr[4];
    n_kept = tr[1] - tr[0] - 2 * n_cand - tr[5];  // minus the source rows (none without a logit shift)
    n_keys = n_gather + (tr[1] - tr[0]);
  }

  // K/V tile loads: kThreads is a multiple of the 16 chunks of a row, so each thread copies one fixed
  // 16-byte chunk (ld_ch) of rows r0, r0 + kRowsPerIter, ...; those rows share row & 7 = r0 & 7, so
  // their swizzled shared-memory offsets are one per-thread constant plus a compile-time stride.
  constexpr int kLoadIters = kBlockN * kChunksPerRow / kThreads;
  constexpr int kRowsPerIter = kThreads / kChunksPerRow;
  static_assert(kBlockN * kChunksPerRow % kThreads == 0, "K/V tile chunks per thread");
  static_assert(kThreads % kChunksPerRow == 0 && kRowsPerIter % 8 == 0, "K/V tile rows per thread");
  const int ld_ch = tid % kChunksPerRow, r0 = tid / kChunksPerRow;
  const uint32_t kv_smem0 = smem_addr(smem + swizzle(r0, ld_ch));
  const uint32_t ld_bytes = static_cast<uint32_t>(a.kv_heads()) * kRowBytes;  // K/V row pitch
  const __nv_bfloat16* const kg_ch = kg + ld_ch * 8;
  const __nv_bfloat16* const vg_ch = vg + ld_ch * 8;

  // Verify: this thread's gathered store rows of the next K/V tile to load (-1 past the gathered
  // keys), read one tile ahead so that the index loads overlap the current tile's MMAs instead of
  // stalling each cp.async behind a dependent global load. Rows outside the store are checked where
  // they are used (one unsigned compare) and reported after the key loop.
  int32_t gathered[kVerify ? kLoadIters : 1];
  const uint32_t kv_rows32 = static_cast<uint32_t>(a.kv_rows < INT32_MAX ? a.kv_rows : INT32_MAX);
  bool bad_row = false;
  auto prefetch_rows = [&](int jt) {
    if constexpr (kVerify) {
#pragma unroll
      for (int it = 0; it < kLoadIters; ++it) {
        const int key = jt * kBlockN + r0 + it * kRowsPerIter;
        gathered[it] = key < n_gather ? vk.key_rows[w.k_begin + key] : -1;
      }
    }
  };

  // K/V tile jt -> buffer b (keys past the end and invalid gathered rows zero-filled). Verify:
  // prefetch_rows(jt) came first.
  auto copy_kv_row = [&](int it, int b, const __nv_bfloat16* kb, const __nv_bfloat16* vb, int row, bool valid) {
    const uint32_t dst = kv_smem0 + (b * 2 * T::kTileElems + it * kRowsPerIter * kHeadDim) * 2;
    // row >= 0 where valid: one 32 x 32 -> 64-bit multiply-add per address
    const uint64_t off = static_cast<uint64_t>(static_cast<uint32_t>(valid ? row : 0)) * ld_bytes;
    cp_async_16(dst, reinterpret_cast<const char*>(kb) + off, valid);
    cp_async_16(dst + T::kTileElems * 2, reinterpret_cast<const char*>(vb) + off, valid);
  };
  auto copy_gathered = [&](int it, int b) {
    if constexpr (kVerify) {
      const bool in_store = static_cast<uint32_t>(gathered[it]) < kv_rows32;
      bad_row |= !in_store;
      copy_kv_row(it, b, kg_ch, vg_ch, gathered[it], in_store);
    }
  };
  auto load_kv = [&](int jt, int b) {
    if constexpr (kVerify) {
      if ((jt + 1) * kBlockN <= n_gather) {  // every key of the tile is gathered (uniform over the CTA)
#pragma unroll
        for (int it = 0; it < kLoadIters; ++it) copy_gathered(it, b);
        return;
      }
    }
#pragma unroll
    for (int it = 0; it < kLoadIters; ++it) {
      const int key = jt * kBlockN + r0 + it * kRowsPerIter;
      if constexpr (kVerify) {
        if (key < n_gather)
          copy_gathered(it, b);
        else  // the tile's own fresh rows
          copy_kv_row(it, b, vk.k_tile + kv_col + ld_ch * 8, vk.v_tile + kv_col + ld_ch * 8, tile_q0 + (key - n_gather),
                      key < n_keys);
      } else {
        copy_kv_row(it, b, kg_ch, vg_ch, w.k_begin + key, key < n_keys);
      }
    }
  };

  // Prologue: Q tile (rows ≥ q_len zero-filled) into buffer 1, K/V tile 0 into buffer 0.
  detail::load_q_rows_async<kBlockM, kThreads>(tid, qg, ld, w.q_begin, q_len,
                                               [&](int r, int ch) { return sQ + swizzle(r, ch); });
  prefetch_rows(0);
  load_kv(0, 0);
  cp_async_commit();
  prefetch_rows(1);
  cp_async_wait_all();
  __syncthreads();

  // Warps whose 16 rows are all past the work item's end only help with loads.
  const bool active = row_warp * 16 < q_len;
  uint32_t qf[kHeadDim / 16][4];
  // ldmatrix addressing. Every fragment row index below is (lane & 7) plus a multiple of 8, so
  // its swizzle term is lane & 7 and the physical chunk of logical chunk 2i + c (c ∈ {0, 1}) is
  // 2i ^ (c ^ (lane & 7)): one thread constant per operand, XORed with the compile-time 2i.
  const int sw_qv = (lane >> 4) ^ (lane & 7);       // Q and V: c = lane >> 4
  const int sw_k = ((lane >> 3) & 1) ^ (lane & 7);  // K: c = (lane >> 3) & 1
  const int row_qv = (lane & 7) + ((lane >> 3) & 1) * 8;
  const int row_k = (lane & 7) + (lane >> 4) * 8;
  if (active) {
    const uint32_t q_base = smem_addr(sQ) + (row_warp * 16 + row_qv) * kRowBytes;
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) ldmatrix_x4(qf[ks], q_base + (((2 * ks) ^ sw_qv) << 4));
  }
  __syncthreads();  // buffer 1 (holding Q) is overwritten by the first prefetch

  float o[kHeadDim / 8][4];
#pragma unroll
  for (int i = 0; i < kHeadDim / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  auto o_at = [&](int nd, int e) -> float& { return o[nd][e]; };
  float row_max[2] = {detail::kNegInf, detail::kNegInf};  // log2 domain, scaled
  float row_sum[2] = {0.f, 0.f};  // this thread's partial sums (reduced over the quad at the end)
  const float scale_log2 = a.scale * 1.4426950408889634f;

  const int n_kv = (n_keys + kBlockN - 1) / kBlockN;
  for (int j = 0; j < n_kv; ++j) {
    const int buf = j & 1;
    if (j + 1 < n_kv) {
      load_kv(j + 1, buf ^ 1);
      cp_async_commit();
      prefetch_rows(j + 2);  // keys past the end load nothing
    }
    if (active) {
      const __nv_bfloat16* const sK = smem + buf * 2 * T::kTileElems;
      const __nv_bfloat16* const sV = sK + T::kTileElems;

      // S = Q · Kᵀ for this warp's 16 rows × its kKeysW keys of the tile.
      float s[kNB][4];
#pragma unroll
      for (int i = 0; i < kNB; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
      const uint32_t k_base = smem_addr(sK) + (group * kKeysW + row_k) * kRowBytes;
#pragma unroll
      for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const uint32_t k_addr = k_base + (((2 * ks) ^ sw_k) << 4);
#pragma unroll
        for (int nb = 0; nb < kKeysW / 16; ++nb) {
          uint32_t b[4];
          ldmatrix_x4(b, k_addr + nb * 16 * kRowBytes);
          mma_bf16(s[2 * nb], qf[ks], b[0], b[1]);
          mma_bf16(s[2 * nb + 1], qf[ks], b[2], b[3]);
        }
      }

      // Importance: column sums of the unscaled q·k over this warp's scored rows, before masking.
      auto s_at = [&](int nb, int e) -> float& { return s[nb][e]; };
      if constexpr (kKeySplit == 1) {
        if (scored)
          detail::accumulate_importance<kNB>(s_at, lane, score_lo, score_hi, w.k_begin + j * kBlockN, w.k_end,
                                             a.importance, a.importance_weight);
      }

      // Verify: the in-tile mask on the tile's own columns (and keys past the end).
      if constexpr (kVerify) {
        if ((j + 1) * kBlockN > n_gather) {
          const int row0 = w.q_begin - tile_q0 + row_warp * 16 + (lane >> 2);
#pragma unroll
          for (int nb = 0; nb < kNB; ++nb) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = j * kBlockN + group * kKeysW + nb * 8 + 2 * (lane & 3) + (e & 1);
              const int col = key - n_gather;
              if (key >= n_keys || (col >= 0 && !verify_may_attend(n_kept, n_cand, row0 + 8 * (e >> 1), col)))
                s[nb][e] = detail::kNegInf;
            }
          }
        }
      }
      // Mask keys ≥ k_end (only the last tile can have them).
      const int kv0 = w.k_begin + j * kBlockN;
      if (!kVerify && kv0 + kBlockN > w.k_end) detail::mask_columns_from<kNB>(s_at, lane, w.k_end - kv0);

      // Online softmax; this thread holds rows lane/4 (e = 0, 1) and lane/4 + 8 (e = 2, 3). Verify: a
      // row whose columns so far are all masked keeps −inf.
      float alpha[2];
      detail::online_softmax<kNB, kHeadDim / 8, kVerify>(s_at, o_at, row_max, row_sum, scale_log2, alpha);

      // O += P · V; P's A fragment for keys [16kk, 16kk+16) is S blocks 2kk and 2kk+1.
      const uint32_t v_base = smem_addr(sV) + (group * kKeysW + row_qv) * kRowBytes;
#pragma unroll
      for (int kk = 0; kk < kKeysW / 16; ++kk) {
        uint32_t pa[4];
        pa[0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const uint32_t v_row = v_base + kk * 16 * kRowBytes;
#pragma unroll
        for (int nd = 0; nd < kHeadDim / 16; ++nd) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_row + (((2 * nd) ^ sw_qv) << 4));
          mma_bf16(o[2 * nd], pa, b[0], b[1]);
          mma_bf16(o[2 * nd + 1], pa, b[2], b[3]);
        }
      }
    }
    cp_async_wait_all();  // tile j+1 has landed ...
    __syncthreads();      // ... for every thread, and nobody still reads buffer `buf`
  }
  // A gathered row outside the store was read as zeros; the op throws at the next synchronising call.
  if (kVerify && bad_row && vk.error_flags) atomicOr(vk.error_flags, kErrAttentionTile);

  if constexpr (kKeySplit == 2) {
    // Group 1 stages its O, maxima and partial sums (lane-major: [row_warp][value][lane], no bank
    // conflicts) in the free K/V buffers; group 0's thread with the same lane holds the same rows
    // and columns and merges: m = max(m0, m1), O = O0·2^(m0−m) + O1·2^(m1−m), likewise the sums.
    // A side that saw no key of a row (max −inf) contributes 0; every row sees its own column.
    constexpr int kVals = kHeadDim / 2 + 4;
    float* const red = reinterpret_cast<float*>(smem_raw) + row_warp * kVals * 32 + lane;
    if (active && group == 1) {
#pragma unroll
      for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[(4 * i + e) * 32] = o[i][e];
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        red[(kHeadDim / 2 + rr) * 32] = row_max[rr];
        red[(kHeadDim / 2 + 2 + rr) * 32] = row_sum[rr];
      }
    }
    __syncthreads();
    if (!active || group == 1) return;
    float a0[2], a1[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const float m1 = red[(kHeadDim / 2 + rr) * 32], m = fmaxf(row_max[rr], m1);
      a0[rr] = row_max[rr] == detail::kNegInf ? 0.f : detail::fast_exp2(row_max[rr] - m);
      a1[rr] = m1 == detail::kNegInf ? 0.f : detail::fast_exp2(m1 - m);
      row_sum[rr] = row_sum[rr] * a0[rr] + red[(kHeadDim / 2 + 2 + rr) * 32] * a1[rr];
    }
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[i][e] = o[i][e] * a0[e >> 1] + red[(4 * i + e) * 32] * a1[e >> 1];
  }
  if (!active) return;
  detail::store_rows<kHeadDim / 8>(
      o_at, row_sum, lane, q_len - row_warp * 16,
      a.out + static_cast<int64_t>(w.q_begin + row_warp * 16) * ld + static_cast<int64_t>(head) * kHeadDim, ld);
}

/// Launches flash_attention_kernel over `capacity` work items × a.n_heads (CTAs past *work_count exit);
/// the caller has checked the arguments (detail::check_flash_args). Throws Error(kDevice) on launch
/// failure.
template <int kBlockM, int kBlockN, bool kVerify, int kKeySplit = 1, int kMinCtas = 1>
void launch_flash(const AttentionArgs& a, const AttentionWorkItem* work, const int32_t* work_count, int64_t capacity,
                  const VerifyKeys& vk, cudaStream_t stream) {
  using T = FlashTraits<kBlockM, kBlockN, kKeySplit>;
  constexpr auto kernel = flash_attention_kernel<kBlockM, kBlockN, kVerify, kKeySplit, kMinCtas>;
  detail::ensure_smem_opt_in<kernel>(T::kSmemBytes);
  const dim3 grid(static_cast<unsigned>(capacity), static_cast<unsigned>(a.n_heads));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(a, work, work_count, vk);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels::flash_mma
