// The Hopper (wgmma) flash attention kernel as a template over its key tile and consumer count, for the
// translation units that instantiate it: attention_wgmma.cu (the shipped wgmma128 and wgmma64) and
// bench/kernels/attention_wgmma_variants.cu (64-key tiles, which no policy picks:
// bench/kernels/README.md). Include from sm_90a .cu files built with CUTLASS only.
//
// Flash attention forward on Hopper warpgroup MMA (wgmma), head_dim 128 (see attention.h,
// FlashVariant::kWgmma128 / kWgmma64, for the contract; the same one as the mma.sync
// kernel's).
//
// A unit of work is one work item (<= 128 query rows of one tile, e.g. one Flash-Cache slot's
// window tile) × one head. The kernel is persistent and warp-specialised (Shah et al.,
// "FlashAttention-3" (2024), §3.1): one CTA per SM walks the units blockIdx.x, blockIdx.x +
// gridDim.x, ...; of its three warpgroups the first is the producer (one thread issues TMA bulk
// tensor copies of Q and of K/V tiles into shared memory, warp 1 reduces the importance; setmaxnreg
// down to kProducerRegs), the
// other two the consumers (kConsumerRegs), each owning 64 of a unit's query rows and sharing every
// K/V tile (the mma.sync kernel's 64-row CTAs read each tile twice per 128-row slot). The producer
// runs ahead across units, so the next unit's tiles load while the consumers finish the current
// one. With one consumer (kConsumers = 1, FlashVariant::kWgmma64) a unit is a 64-row work item:
// each row's arithmetic is that of the two-consumer kernel, in twice the CTAs (for calls too small to
// fill the SMs). Per consumer and key tile j of kBlockN keys (64 or 128):
//   S_j = Q·K_jᵀ        wgmma m64nBk16 (B = kBlockN), both operands from shared memory (SS), fp32
//   O += P_{j-1}·V_{j-1} wgmma m64n128k16, P from registers (RS: S's accumulator layout is the
//                        A-operand layout, element for element), V read transposed (MN-major)
//   both issued together; once S_j lands, the scored rows' column sums are taken (before masking)
//   and handed to the importance warp (below), and its online softmax runs (FlashAttention-2,
//   Algorithm 1; exp2 with log2(e)·scale folded) while P·V is still in flight, and O is rescaled
//   once it lands (FA3 §3.2's intra-warpgroup overlap).
// Shared memory: Q (kConsumers × 64 rows), a ring of kKStages K tiles and one of kVStages V tiles
// (FA3's pipeline_k / pipeline_v: S_j waits for K_j alone and frees it once S_j has landed, P·V_j
// frees V_j, and the producer loads K a tile ahead of V) in the 128-byte-swizzled GMMA layout
// (CuTe's GMMA::Layout_K_SW128_Atom, which is what a TMA box of 64 columns with
// CU_TENSOR_MAP_SWIZZLE_128B writes), one importance buffer per consumer warp, and mbarriers
// (CUTLASS's ClusterBarrier): per ring stage a full barrier (the producer's arrival with the tile's
// byte count; the copies complete it) and an empty one (128 arrivals per consumer once the MMA
// reading it has completed); Q has the same pair, released after a unit's last S = QKᵀ, and
// carries the unit's description (work item, scored rows), which the producer thread reads ahead
// of the consumers.
// Importance (scored rows only): a consumer warp holding scored rows sums them per column in
// registers (detail::importance_row_sums), writes the 2·kNB partial sums of each lane to its
// buffer and arrives on the buffer's full barrier; warp 1 of the producer warpgroup (otherwise
// idle) walks the same units, adds each column's 8 partials (lanes of equal lane % 4, in lane
// order) and issues one atomic per key. The reduction across lanes (it was 28 shuffles per tile)
// and the atomics thus leave the consumer's critical path, which keeps a wait for its buffer (one
// per warp, freed a tile earlier): every wgmma is issued by the whole warpgroup, so one scored
// warp's extra instructions delayed its three partners (bench/results/2026-12-04-h200-kv-rings).
// O leaves through the same per-warp buffer at a unit's end (store_rows_staged): staged in bf16,
// then 16-byte stores of whole row segments.
// A tile is a whole box of rows: rows past a work item's keys are whatever follows in the store (the
// next slot's rows, or never-written memory; past the store's end TMA gives zeros). K's columns
// there are masked to -inf, and the consumers overwrite V's rows there with zeros before the last
// P·V (0 · NaN would poison O); query rows past a tile's q_len are computed and never stored.
// Measured on the H200 (bench/results/2026-12-02-h200-wgmma-ws/): FA3's ping-pong between the
// consumers (named barriers ordering their GEMMs) was slower here and is not used.
//
// Built only for sm_90a (wgmma, setmaxnreg), with CUTLASS/CuTe (pip nvidia-cutlass, scripts/setup.sh).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <algorithm>
#include <string>
#include <type_traits>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_flash_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::kernels::flash_wgmma {

using namespace cute;
using Elem = cute::bfloat16_t;

constexpr int kHeadDim = 128;
constexpr int kWarpgroup = 128;
// A unit's query rows are 64 per consumer warpgroup: two consumers (128-row units, wgmma128 and the
// bench's 64-key tiles) or one (64-row units, wgmma64). The CTA is the producer warpgroup + the consumers.
template <int kConsumers>
constexpr int kThreadsOf = (1 + kConsumers) * kWarpgroup;
// setmaxnreg budgets: the producer warpgroup (one thread reads the work items and issues the bulk
// copies, warp 1 reduces the importance) in 40 registers; the consumers get the rest (S, O and P
// fragments: 32 / 64 + 64 + 16 / 32 registers at 64 / 128 keys).
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
// The pool setmaxnreg redistributes is what the CTA got at launch (__launch_bounds__(kThreads, 1):
// 64 K / kThreads per thread, in steps of 8); asking for more would block setmaxnreg.inc for ever.
static_assert((kProducerRegs + 2 * kConsumerRegs) * kWarpgroup <= kThreadsOf<2> * ((64 * 1024 / kThreadsOf<2>)&~7),
              "setmaxnreg budgets exceed the CTA's launch registers");
static_assert((kProducerRegs + kConsumerRegs) * kWarpgroup <= kThreadsOf<1> * ((64 * 1024 / kThreadsOf<1>)&~7),
              "setmaxnreg budgets exceed the CTA's launch registers");
constexpr int kND = kHeadDim / 8;  // n8 blocks of O
constexpr int kChunksPerRow = kHeadDim / 8;
constexpr int kQElems = 64 * kHeadDim;  // one warpgroup's Q rows
// Named barrier of the consumer warpgroups (CUTLASS numbers user barriers past its reserved ones).
constexpr uint32_t kConsumerBarrier = 0;

// A [kRows][128] bf16 tile (a warpgroup's 64 Q rows, or a K or V tile of kBlockN keys), K-major
// (head dim contiguous): two column halves of 64 (kRows·64 elements each), each in 8-row atoms of
// 8 × 128 bytes whose 16-byte chunks are XOR-swizzled with the row (GMMA's 128-byte swizzle).
template <int kRows>
using TileLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Elem>{}, Shape<Int<kRows>, Int<kHeadDim>>{}));

// Element offset of (row, 16-byte chunk) in a TileLayout<kRows> tile whose base is 1024-byte
// aligned. CuTe's swizzle acts on the address bits of the smem pointer (TileLayout{}(r, c) alone is
// not the physical offset), so the function is written out for the consumers' stores (V's rows past
// a work item's keys); a mismatch with the layout TMA writes and wgmma reads would leave stale rows
// in O (the twin tests' NaN store rows).
template <int kRows>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk >> 3) * (kRows * 64) + (row >> 3) * 512 + (row & 7) * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

/// Writes a consumer warp's 16 rows of O (its accumulator, `o`(nd, e) as in store_rows, divided by
/// the row sums) to global rows [0, n_rows) at dst_row0 (row stride ld elements, 16-byte aligned)
/// through `stage`, kStageCols · 32 bytes of shared memory the warp owns: kStageCols columns at a
/// time, bf16, each row's 16-byte chunks XOR-swizzled with row % 8 (the fragment writes and the
/// 16-byte reads are free of bank conflicts), then 16-byte stores, whole row segments per
/// instruction. Written straight from the fragments (detail::store_rows), each store instruction
/// covers 8 rows x 16 bytes; on the H200 that epilogue took 16% of the window attention's time
/// (bench/results/2026-12-04-h200-o-store).
template <int kStageCols, typename O>
__device__ __forceinline__ void store_rows_staged(O&& o, const float (&row_sum)[2], int lane, int n_rows,
                                                  __nv_bfloat16* dst_row0, int64_t ld, uint32_t* stage) {
  constexpr int kChunks = kStageCols / 8;  // 16-byte chunks of a staged row
  static_assert(kChunks % 8 == 0 && kHeadDim % kStageCols == 0, "swizzle within 8-chunk groups");
  constexpr int kRowWords = kStageCols / 2;
  const float inv[2] = {detail::inverse_row_sum(row_sum, 0), detail::inverse_row_sum(row_sum, 1)};
#pragma unroll
  for (int pass = 0; pass < kHeadDim / kStageCols; ++pass) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int row = (lane >> 2) + 8 * rr;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int nd = pass * kChunks + c;
        const __nv_bfloat162 v = __floats2bfloat162_rn(o(nd, 2 * rr) * inv[rr], o(nd, 2 * rr + 1) * inv[rr]);
        stage[row * kRowWords + ((c ^ (row & 7)) << 2) + (lane & 3)] = *reinterpret_cast<const uint32_t*>(&v);
      }
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 16 * kChunks / 32; ++i) {
      const int idx = 32 * i + lane, row = idx / kChunks, c = idx % kChunks;
      const uint4 v = *reinterpret_cast<const uint4*>(stage + row * kRowWords + ((c ^ (row & 7)) << 2));
      if (row < n_rows)
        *reinterpret_cast<uint4*>(dst_row0 + static_cast<int64_t>(row) * ld + pass * kStageCols + c * 8) = v;
    }
    __syncwarp();  // the stage's reads are done before it is written again
  }
}

/// kBlockN keys per tile, kKStages K and kVStages V stages (a consumer holds tile j's K and tile
/// j-1's V; the producer fills the rest ahead), kConsumers warpgroups of 64 query rows.
template <int kBlockN, int kKStages, int kVStages, int kConsumers>
struct WgmmaTraits {
  static_assert(kBlockN == 64 || kBlockN == 128, "S tile: m64n64 or m64n128");
  static_assert(kKStages >= 2 && kVStages >= 2, "K_j and the next tile's K; V_{j-1} and V_j");
  static constexpr int kNB = kBlockN / 8;  // n8 blocks of S per key tile
  static constexpr int kKVElems = kBlockN * kHeadDim;
  static constexpr uint32_t kKVTxBytes = kKVElems * 2;  // a K or a V tile, bf16
  static constexpr int kThreads = kThreadsOf<kConsumers>;
  static constexpr uint32_t kQTxBytes = kConsumers * kQElems * 2;  // a unit's Q: every consumer's rows, bf16
  using KVLayout = TileLayout<kBlockN>;
  // V^T: the (head dim, key) view of a K-major V tile, MN-major for the P·V product.
  using VtLayout =
      decltype(composition(KVLayout{}, Layout<Shape<Int<kHeadDim>, Int<kBlockN>>, Stride<Int<kBlockN>, _1>>{}));
  using MmaS = std::conditional_t<kBlockN == 64, SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>,
                                  SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>>;
  using MmaO = SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>;
  static_assert(cosize_v<KVLayout> == kKVElems && cosize_v<TileLayout<64>> == kQElems, "dense tiles");
  // A consumer warp's importance buffer: per lane its 2·kNB column partial sums (fp32) as kNB / 2
  // 16-byte chunks, chunk i of lane l at position i ^ (l % (kNB / 2)) (128-key tiles: the eight
  // lanes of a 16-byte store phase hit eight different bank groups, the importance warp's loads two
  // lanes each; 64-key tiles the other way round).
  static constexpr int kImpChunks = kNB / 2;
  static constexpr int kImpFloats = 32 * 2 * kNB;  // per warp
  static constexpr int kConsumerWarps = 4 * kConsumers;
  // Q of every consumer, the K ring, the V ring, the importance buffers; then the mbarriers
  // full_k, empty_k [kKStages], full_v, empty_v [kVStages], q_full, q_empty, imp_full, imp_empty
  // [kConsumerWarps].
  static constexpr int kTileBytes = (kConsumers * kQElems + (kKStages + kVStages) * kKVElems) * 2;
  static constexpr int kImpBytes = kConsumerWarps * kImpFloats * 4;
  static constexpr int kBarriers = 2 * kKStages + 2 * kVStages + 2 + 2 * kConsumerWarps;
  // Then the unit's description, written by the producer before it arrives on q_full: q_begin,
  // q_end, k_begin, k_end and the scored rows [s0, s1) (detail::score_rows).
  static constexpr int kInfoInts = 6;
  static constexpr int kSmemBytes = kTileBytes + kImpBytes + kBarriers * 8 + kInfoInts * 4;
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 shared memory per CTA");
};

template <int kBlockN, int kKStages, int kVStages, int kConsumers>
__global__ void __launch_bounds__(kThreadsOf<kConsumers>, 1)
    wgmma_attention_kernel(const AttentionArgs a, const AttentionWorkItem* __restrict__ work,
                           const int32_t* __restrict__ work_count, const __grid_constant__ CUtensorMap tm_q,
                           const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = WgmmaTraits<kBlockN, kKStages, kVStages, kConsumers>;
  using Bar = cutlass::arch::ClusterBarrier;
  using TxBar = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kNB = T::kNB;
  constexpr int kWarps = T::kConsumerWarps;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Elem* const smem = reinterpret_cast<Elem*>(smem_raw);
  Elem* const k_base = smem + kConsumers * kQElems;
  Elem* const v_base = k_base + kKStages * T::kKVElems;
  float* const imp_buf = reinterpret_cast<float*>(smem_raw + T::kTileBytes);
  uint64_t* const full_k = reinterpret_cast<uint64_t*>(smem_raw + T::kTileBytes + T::kImpBytes);
  uint64_t* const empty_k = full_k + kKStages;
  uint64_t* const full_v = empty_k + kKStages;
  uint64_t* const empty_v = full_v + kVStages;
  uint64_t* const q_full = empty_v + kVStages;
  uint64_t* const q_empty = q_full + 1;
  uint64_t* const imp_full = q_empty + 1;
  uint64_t* const imp_empty = imp_full + kWarps;
  int32_t* const info = reinterpret_cast<int32_t*>(imp_empty + kWarps);
  auto k_smem = [&](int stage) { return k_base + stage * T::kKVElems; };
  auto v_smem = [&](int stage) { return v_base + stage * T::kKVElems; };

  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kKStages; ++s) {
      Bar::init(full_k + s, 1);                         // the producer's arrival; the copies' bytes complete it
      Bar::init(empty_k + s, kConsumers * kWarpgroup);  // every consumer thread
    }
    for (int s = 0; s < kVStages; ++s) {
      Bar::init(full_v + s, 1);
      Bar::init(empty_v + s, kConsumers * kWarpgroup);
    }
    Bar::init(q_full, 1);
    Bar::init(q_empty, kConsumers * kWarpgroup);
    for (int w = 0; w < kWarps; ++w) {
      Bar::init(imp_full + w, 32);   // the scored warp's lanes, after their stores
      Bar::init(imp_empty + w, 32);  // the importance warp's lanes, after their loads
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  // Unit u is work item u % n_items, head u / n_items: the CTAs running at one time take one head of
  // many items (slots) rather than every head of a few, so their importance atomics (summed over
  // heads, per key of the item's slot) do not pile onto the same addresses. With the default
  // EVICT_NORMAL loads below, window attention with importance 71.9 / 71.2 -> 68.1 / 69.1 us at
  // 16 slots and 136.8 / 136.9 -> 128.2 / 134.9 at 32 (two rounds; without importance unchanged
  // within 2%; bench/results/2026-12-05-h200-unit-order/).
  const int n_items = *work_count;
  const int n_units = n_items * a.n_heads;
  auto item_of = [&](int u) { return u % n_items; };
  auto head_of = [&](int u) { return u / n_items; };
  const int64_t ld = static_cast<int64_t>(a.n_heads) * kHeadDim;

  if (tid < kWarpgroup) {  // ---- producer warpgroup: warp 0 copies, warp 1 commits the importance ----
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid >= 32 && tid < 64 && a.importance != nullptr) {
      // The importance warp: the consumers' units in their order; for each scored tile and warp,
      // the column sums of its buffer, then one atomic per key (keys >= k_end skipped). Lane l adds
      // chunk l / 4 of the lanes 4r + l % 4 (r = 0..7), i.e. columns 16(l/4) + 2(l%4) + {0, 1} and
      // 8 + 16(l/4) + 2(l%4) + {0, 1} (importance_row_sums' v[nb][e] is column 8nb + 2(lane%4) + e).
      const int lane = tid & 31, chunk = lane >> 2, quad = lane & 3;
      uint32_t phases = 0;  // bit w: the parity of warp w's next buffer
      for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
        const AttentionWorkItem w = work[item_of(u)];
        const int n_kv = (w.k_end - w.k_begin + kBlockN - 1) / kBlockN;
        int s0 = 0, s1 = 0;
        detail::score_rows(a, w, false, &s0, &s1);
        uint32_t scored = 0;
        for (int cw = 0; cw < kWarps; ++cw) {
          int lo = 0, hi = 0;
          detail::clip_score_rows(s0, s1, w.q_begin, w.q_end, 16 * cw, &lo, &hi);
          if (lo < hi) scored |= 1u << cw;
        }
        if (scored == 0) continue;
        for (int j = 0; j < n_kv; ++j) {
          for (int cw = 0; cw < kWarps; ++cw) {
            if (!(scored >> cw & 1)) continue;
            Bar::wait(imp_full + cw, (phases >> cw) & 1);
            detail::compiler_fence();  // no load of the buffer above the wait
            float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
            if (chunk < T::kImpChunks) {
              const float* const b = imp_buf + cw * T::kImpFloats;
              // Unrolled by two, the only way ptxas keeps this in the producer warpgroup's
              // kProducerRegs without a spill (1, 8, or two loads issued together spill); the loads
              // then go one at a time. Enough while one or two warps per unit are scored (a
              // Flash-Cache window's 16 rows); wgmma64 at 16+ slots, where more can be, does not run
              // there.
#pragma unroll 2
              for (int r = 0; r < 8; ++r) {
                const int src = 4 * r + quad;
                const float4 p =
                    *reinterpret_cast<const float4*>(b + src * 2 * kNB + 4 * (chunk ^ (src % T::kImpChunks)));
                sum.x += p.x;
                sum.y += p.y;
                sum.z += p.z;
                sum.w += p.w;
              }
            }
            detail::compiler_fence();  // nor below the arrival
            Bar::arrive(imp_empty + cw);
            phases ^= 1u << cw;
            if (chunk < T::kImpChunks) {
              const int key = w.k_begin + j * kBlockN + 16 * chunk + 2 * quad;
              const float vals[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                const int k = key + (i >> 1) * 8 + (i & 1);
                if (k < w.k_end) atomicAdd(a.importance + k, a.importance_weight * vals[i]);
              }
            }
          }
        }
      }
      return;
    }
    if (tid != 0) return;
    cute::prefetch_tma_descriptor(&tm_q);
    cute::prefetch_tma_descriptor(&tm_k);
    cute::prefetch_tma_descriptor(&tm_v);
    // EVICT_NORMAL: with EVICT_FIRST (every row is read by one unit only) the same rounds measured
    // 0-4% slower with the importance (bench/results/2026-12-05-h200-unit-order/).
    constexpr auto kEvict = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);
    constexpr int kHalf = kHeadDim / 2;       // a box is one 64-column (128-byte) half of the head dim
    int k_tiles = 0, v_tiles = 0, units = 0;  // K / V tiles and units loaded: stage index and phases
    for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
      // The unit's description is read here, ahead of the consumers, so that the dependent global
      // loads (work item, then its score and table rows) overlap the producer's waits rather than
      // the consumers' unit start.
      const AttentionWorkItem w = work[item_of(u)];
      const int head = head_of(u);
      const int n_kv = (w.k_end - w.k_begin + kBlockN - 1) / kBlockN;  // <= 0: the plan gives none
      int s0 = 0, s1 = 0;
      detail::score_rows(a, w, head == 0, &s0, &s1);
      const int col = head * kHeadDim, kv_col = a.kv_head_of(head) * kHeadDim;  // q / K, V (grouped-query)
      // Tile t of K (is_v false) or V into the next stage of its ring once the consumers freed it.
      auto load = [&](bool is_v, int t) {
        int& count = is_v ? v_tiles : k_tiles;
        const int n_stages = is_v ? kVStages : kKStages;
        const int stage = count % n_stages;
        Bar::wait((is_v ? empty_v : empty_k) + stage, ((count / n_stages) & 1) ^ 1);
        uint64_t* const bar = (is_v ? full_v : full_k) + stage;
        TxBar::arrive_and_expect_tx(bar, T::kKVTxBytes);
        Elem* const dst = is_v ? v_smem(stage) : k_smem(stage);
        for (int h = 0; h < 2; ++h)
          SM90_TMA_LOAD_2D::copy(is_v ? &tm_v : &tm_k, bar, kEvict, dst + h * kBlockN * kHalf, kv_col + h * kHalf,
                                 w.k_begin + t * kBlockN);
        ++count;
      };
      if (n_kv > 0) load(false, 0);  // before Q: the previous unit's consumers may still hold Q and info
      Bar::wait(q_empty, (units & 1) ^ 1);
      detail::compiler_fence();  // the info stores stay between the wait and the arrival
      info[0] = w.q_begin;
      info[1] = w.q_end;
      info[2] = w.k_begin;
      info[3] = w.k_end;
      info[4] = s0;
      info[5] = s1;
      detail::compiler_fence();
      if (n_kv > 0) {
        TxBar::arrive_and_expect_tx(q_full, T::kQTxBytes);  // releases the info stores too
        for (int c = 0; c < kConsumers; ++c)
          for (int h = 0; h < 2; ++h)
            SM90_TMA_LOAD_2D::copy(&tm_q, q_full, kEvict, smem + c * kQElems + h * 64 * kHalf, col + h * kHalf,
                                   w.q_begin + 64 * c);
      } else {
        Bar::arrive(q_full);  // no keys: the consumers read the info and skip the unit
      }
      ++units;
      // K runs a tile ahead of V, the order the consumers read them in: S_t needs K_t while
      // P_{t-1}·V_{t-1} is the MMA issued beside it.
      for (int t = 1; t < n_kv; ++t) {
        load(false, t);
        load(true, t - 1);
      }
      if (n_kv > 0) load(true, n_kv - 1);
    }
    return;  // the copies in flight complete on their barriers, which the consumers wait for
  }

  // ---- consumers ----
  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int c = tid / kWarpgroup - 1;  // consumer c < kConsumers: rows 64c .. 64c + 63 of every unit
  const int wg_tid = tid % kWarpgroup, lane = tid & 31, warp = wg_tid / 32;
  const int cw = 4 * c + warp;  // the warp's importance buffer
  auto mma_s = make_tiled_mma(typename T::MmaS{});
  auto mma_o = make_tiled_mma(typename T::MmaO{});
  auto thr_s = mma_s.get_slice(wg_tid);
  auto thr_o = mma_o.get_slice(wg_tid);
  Tensor tSrQ = thr_s.partition_fragment_A(make_tensor(make_smem_ptr(smem + c * kQElems), TileLayout<64>{}));
  Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<64>, Int<kBlockN>>{});                  // ((2,2,kNB),1,1)
  Tensor tOrO = partition_fragment_C(mma_o, Shape<Int<64>, Int<kHeadDim>>{});                 // ((2,2,16),1,1)
  Tensor tOrP = make_tensor<Elem>(partition_shape_A(mma_o, Shape<Int<64>, Int<kBlockN>>{}));  // ((2,2,2),1,kNB/2)
  static_assert(decltype(size(tSrS))::value == 4 * kNB && decltype(size(tOrP))::value == 4 * kNB, "S/P fragments");
  static_assert(decltype(size(tOrO))::value == 4 * kND, "O fragment");
  // Flat index 4·nb + e of an m64nN accumulator is element e of n8 block nb in the per-warp layout
  // of attention_flash_common.cuh (CLayout_64xN: values (2 columns, 2 row halves, N/8 blocks)); the
  // RS A operand of keys [16kk, 16kk+16) (ALayout_64x16) is S's blocks 2kk, 2kk+1 in the same order.
  auto s_at = [&](int nb, int e) -> float& { return tSrS(4 * nb + e); };
  auto o_at = [&](int nd, int e) -> float& { return tOrO(4 * nd + e); };
  const float scale_log2 = a.scale * 1.4426950408889634f;

  // O += P · V of the tile in V stage `stage` (asynchronous: the caller waits).
  auto issue_pv = [&](int stage) {
    Tensor tOrVt = thr_o.partition_fragment_B(make_tensor(make_smem_ptr(v_smem(stage)), typename T::VtLayout{}));
    warpgroup_fence_operand(tOrP);  // P's registers: written before, read by the asynchronous MMA
    warpgroup_fence_operand(tOrO);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tOrP); ++kb) cute::gemm(mma_o, tOrP(_, _, kb), tOrVt(_, _, kb), tOrO);
    warpgroup_commit_batch();
  };

  int tiles = 0, units = 0, imp_tiles = 0;  // imp_tiles: this warp's importance buffers written
  for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
    const int head = head_of(u);
    Bar::wait(q_full, units & 1);  // the unit's Q and its description (info) are in
    detail::compiler_fence();      // no info load above the wait
    const AttentionWorkItem w{info[0], info[1], info[2], info[3], 0};
    const int n_keys = w.k_end - w.k_begin;
    const int n_kv = (n_keys + kBlockN - 1) / kBlockN;
    const int warp_row0 = c * 64 + warp * 16;
    int score_lo = 0, score_hi = 0;
    detail::clip_score_rows(info[4], info[5], w.q_begin, w.q_end, warp_row0, &score_lo, &score_hi);
    if (n_kv <= 0) {  // as the producer: no Q came
      Bar::arrive(q_empty);
      ++units;
      continue;
    }
    const int q_len = w.q_end - w.q_begin;
    const bool scored = score_lo < score_hi;

    clear(tOrO);
    float row_max[2] = {detail::kNegInf, detail::kNegInf};  // log2 domain, scaled
    float row_sum[2] = {0.f, 0.f};
    int prev_v = 0;  // the V stage of tile j - 1
    for (int j = 0; j < n_kv; ++j) {
      const int k_stage = (tiles + j) % kKStages, v_stage = (tiles + j) % kVStages;
      const int kv0 = w.k_begin + j * kBlockN;
      Bar::wait(full_k + k_stage, ((tiles + j) / kKStages) & 1);  // the bulk copies (async proxy) landed
      Tensor tSrK = thr_s.partition_fragment_B(make_tensor(make_smem_ptr(k_smem(k_stage)), typename T::KVLayout{}));
      warpgroup_fence_operand(tSrS);
      warpgroup_arrive();
      mma_s.accumulate_ = GMMA::ScaleOut::Zero;
      CUTE_UNROLL
      for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
        cute::gemm(mma_s, tSrQ(_, _, kb), tSrK(_, _, kb), tSrS);
        mma_s.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      if (j > 0) {
        Bar::wait(full_v + prev_v, ((tiles + j - 1) / kVStages) & 1);
        issue_pv(prev_v);
        warpgroup_wait<1>();  // S_j done (groups complete in order); P·V may still run
      } else {
        warpgroup_wait<0>();
      }
      warpgroup_fence_operand(tSrS);
      Bar::arrive(empty_k + k_stage);           // K_j read
      if (j == n_kv - 1) Bar::arrive(q_empty);  // the unit's last read of Q is done

      if (scored) {  // the column sums of the warp's scored rows, to the importance warp
        float v[kNB][2];
        detail::importance_row_sums<kNB>(s_at, lane, score_lo, score_hi, v);
        Bar::wait(imp_empty + cw, (imp_tiles & 1) ^ 1);
        detail::compiler_fence();  // no store to the buffer above the wait
        float* const b = imp_buf + cw * T::kImpFloats + lane * 2 * kNB;
        CUTE_UNROLL
        for (int i = 0; i < T::kImpChunks; ++i)
          *reinterpret_cast<float4*>(b + 4 * (i ^ (lane % T::kImpChunks))) =
              make_float4(v[2 * i][0], v[2 * i][1], v[2 * i + 1][0], v[2 * i + 1][1]);
        detail::compiler_fence();  // nor below the arrival
        Bar::arrive(imp_full + cw);
        ++imp_tiles;
      }
      if (kv0 + kBlockN > w.k_end) detail::mask_columns_from<kNB>(s_at, lane, w.k_end - kv0);
      float alpha[2];
      detail::online_softmax<kNB, kND, false, false>(s_at, o_at, row_max, row_sum, scale_log2, alpha);

      warpgroup_wait<0>();  // P_{j-1} · V_{j-1} landed in O: rescale it, then P_j may replace P_{j-1}
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);             // no P_j write may move above the wait
      if (j > 0) Bar::arrive(empty_v + prev_v);  // V_{j-1} read
      detail::rescale_row<kND>(o_at, 0, alpha[0]);
      detail::rescale_row<kND>(o_at, 1, alpha[1]);
      CUTE_UNROLL
      for (int i = 0; i < size(tOrP); ++i) tOrP(i) = static_cast<Elem>(tSrS(i));
      prev_v = v_stage;
    }
    Bar::wait(full_v + prev_v, ((tiles + n_kv - 1) / kVStages) & 1);
    if (const int valid = n_keys - (n_kv - 1) * kBlockN; valid < kBlockN) {
      // The last tile's rows past k_end hold whatever follows in the store (another slot's keys,
      // or never-written memory): its P columns are 0, but 0 · NaN would poison O, so V's rows
      // there become zeros (K's columns are masked to -inf) before the last P·V reads them.
      Elem* const vt = v_smem(prev_v);
      for (int i = tid - kWarpgroup; i < (kBlockN - valid) * kChunksPerRow; i += kConsumers * kWarpgroup) {
        const int r = valid + i / kChunksPerRow;
        *reinterpret_cast<uint4*>(vt + tile_offset<kBlockN>(r, i % kChunksPerRow)) = make_uint4(0, 0, 0, 0);
      }
      cutlass::arch::fence_view_async_shared();  // generic-proxy stores -> wgmma's (and the next copy's) view
      cutlass::arch::NamedBarrier::sync(kConsumers * kWarpgroup, kConsumerBarrier);
    }
    issue_pv(prev_v);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    Bar::arrive(empty_v + prev_v);
    tiles += n_kv;
    ++units;
    if (q_len > warp_row0) {
      // O goes out through the warp's importance buffer, free once the importance warp has read the
      // last partial sums handed to it (the wait the next importance write makes; it passes at once
      // for a warp without scored rows). The next write's wait then passes too: the buffer is the
      // warp's own again after store_rows_staged's last __syncwarp.
      Bar::wait(imp_empty + cw, (imp_tiles & 1) ^ 1);
      detail::compiler_fence();  // no store to the buffer above the wait
      store_rows_staged<T::kImpFloats * 4 / 32>(
          o_at, row_sum, lane, q_len - warp_row0,
          a.out + static_cast<int64_t>(w.q_begin + warp_row0) * ld + static_cast<int64_t>(head) * kHeadDim, ld,
          reinterpret_cast<uint32_t*>(imp_buf + cw * T::kImpFloats));
    }
  }
#endif
}

// The stages per instantiation (one CTA per SM): 64-key tiles (bench/kernels only) in six K and four
// V stages; 128-key tiles with two consumers in two K and two V stages, with one consumer in three of
// each. Two consumers'
// 128-key kernel was measured with three K stages too: at 16 / 32 slots x 128 rows x 768 keys with
// importance 73.9 / 141.6 us against 73.0 / 135.6 with two (median of three alternating rounds;
// a second Q buffer in the room freed gave 72.4 / 136.4; bench/results/2026-12-04-h200-kv-rings).
template <int kBlockN, int kConsumers>
constexpr int kKStagesOf = kBlockN == 64     ? 6
                           : kConsumers == 1 ? 3
                                             : 2;
template <int kBlockN, int kConsumers>
constexpr int kVStagesOf = kConsumers == 1 ? kKStagesOf<kBlockN, kConsumers>
                           : kBlockN == 64 ? 4
                                           : 2;

/// A 2-D TMA map of a [rows, cols] bf16 matrix (row stride cols): boxes of box_rows rows × 64
/// columns (128 bytes) written in GMMA's 128-byte swizzle; reads past `rows` give zeros. Host-side
/// encoding only (the driver's cuTensorMapEncodeTiled, found once through the runtime): no device
/// call in the layer loop.
CUtensorMap tensor_map(const char* what, const __nv_bfloat16* base, int64_t rows, int64_t cols, int box_rows);

/// Launches wgmma_attention_kernel with kBlockN keys per tile and kConsumers consumer warpgroups (work
/// planned with block_m = 64 · kConsumers) on a persistent grid of min(capacity · n_heads, SMs) CTAs;
/// the caller has checked the arguments and the device (attention_flash). Encodes three TMA maps per
/// call on the host. Throws Error(kDevice) on launch failure, Error(kInvalidArgument) when the driver
/// rejects a map, Error(kUnsupported) when the driver lacks cuTensorMapEncodeTiled.
template <int kBlockN, int kConsumers>
void launch_wgmma(const AttentionArgs& a, const AttentionWorkItem* work, const int32_t* work_count, int64_t capacity,
                  cudaStream_t stream) {
  constexpr int kKStages = kKStagesOf<kBlockN, kConsumers>, kVStages = kVStagesOf<kBlockN, kConsumers>;
  using T = WgmmaTraits<kBlockN, kKStages, kVStages, kConsumers>;
  constexpr auto kernel = wgmma_attention_kernel<kBlockN, kKStages, kVStages, kConsumers>;
  constexpr int kSmem = T::kSmemBytes;
  // No rows: the plan admits no tile (attention_tile_valid), and a map needs at least one row.
  if (a.q_rows <= 0 || a.kv_rows <= 0) return;
  detail::ensure_smem_opt_in<kernel>(kSmem);
  const int64_t cols = static_cast<int64_t>(a.n_heads) * kHeadDim,
                kv_cols = static_cast<int64_t>(a.kv_heads()) * kHeadDim;
  const CUtensorMap tm_q = tensor_map("q", a.q, a.q_rows, cols, 64);
  const CUtensorMap tm_k = tensor_map("k_store", a.k, a.kv_rows, kv_cols, kBlockN);
  const CUtensorMap tm_v = tensor_map("v_store", a.v, a.kv_rows, kv_cols, kBlockN);
  // Persistent: one CTA per SM (its shared memory), each walking units gridDim.x apart; the grid
  // depends on the capacity only, so recorded graphs keep it.
  const int64_t units = capacity * a.n_heads;
  const auto grid = static_cast<unsigned>(
      std::min<int64_t>(units, detail::cached_device_attribute<cudaDevAttrMultiProcessorCount>()));
  kernel<<<grid, T::kThreads, kSmem, stream>>>(a, work, work_count, tm_q, tm_k, tm_v);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels::flash_wgmma
