// Flash attention forward on Hopper warpgroup MMA (wgmma), head_dim 128 (see attention.h,
// FlashVariant::kWgmmaM128N64 / kWgmmaM128N128 / kWgmmaM64N128, for the contract; the same one as the
// mma.sync kernel's).
//
// A unit of work is one work item (<= 128 query rows of one tile, e.g. one Flash-Cache slot's
// window tile) × one head. The kernel is persistent and warp-specialised (Shah et al.,
// "FlashAttention-3" (2024), §3.1): one CTA per SM walks the units blockIdx.x, blockIdx.x +
// gridDim.x, ...; of its three warpgroups the first is the producer (one thread issues TMA bulk
// tensor copies of Q and of K/V tiles into shared memory; setmaxnreg down to kProducerRegs), the
// other two the consumers (kConsumerRegs), each owning 64 of a unit's query rows and sharing every
// K/V tile (the mma.sync kernel's 64-row CTAs read each tile twice per 128-row slot). The producer
// runs ahead across units, so the next unit's tiles load while the consumers finish the current
// one. With one consumer (kConsumers = 1, FlashVariant::kWgmmaM64N128) a unit is a 64-row work item:
// each row's arithmetic is that of the two-consumer kernel, in twice the CTAs (for calls too small to
// fill the SMs). Per consumer and key tile j of kBlockN keys (64 or 128):
//   S_j = Q·K_jᵀ        wgmma m64nBk16 (B = kBlockN), both operands from shared memory (SS), fp32
//   O += P_{j-1}·V_{j-1} wgmma m64n128k16, P from registers (RS: S's accumulator layout is the
//                        A-operand layout, element for element), V read transposed (MN-major)
//   both issued together; while they run, the importance of tile j-1's scored rows is committed
//   (shuffles and atomics, attention_flash_common.cuh); once S_j lands, its scored rows' column
//   sums are taken (before masking) and its online softmax runs (FlashAttention-2, Algorithm 1;
//   exp2 with log2(e)·scale folded) while P·V is still in flight, and O is rescaled once it lands
//   (FA3 §3.2's intra-warpgroup overlap).
// Shared memory: Q (kConsumers × 64 rows) and kStages {K, V} stages (6 of 64 keys or 3 of 128) in the
// 128-byte-swizzled GMMA layout (CuTe's GMMA::Layout_K_SW128_Atom, which is what a TMA box of 64
// columns with CU_TENSOR_MAP_SWIZZLE_128B writes), and mbarriers (CUTLASS's ClusterBarrier): per
// stage a full barrier (the producer's arrival with the stage's byte count; the copies complete it)
// and an empty one (128 arrivals per consumer once the last MMA reading the stage has completed); Q
// has the same pair, released after a unit's last S = QKᵀ, and carries the unit's description
// (work item, scored rows), which the producer thread reads ahead of the consumers. A tile is a whole box of rows: rows
// past a work item's keys are whatever follows in the store (the next slot's rows, or never-written
// memory; past the store's end TMA gives zeros). K's columns there are masked to -inf, and the
// consumers overwrite V's rows there with zeros before the last P·V (0 · NaN would poison O);
// query rows past a tile's q_len are computed and never stored.
// Measured on the H200 (bench/results/2026-12-02-h200-wgmma-ws/): FA3's ping-pong between the
// consumers (named barriers ordering their GEMMs) was slower here and is not used.
//
// Built only for sm_90a (wgmma, setmaxnreg), with CUTLASS/CuTe (pip nvidia-cutlass, scripts/setup.sh).
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
#include "kernels/cuda/attention_wgmma.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::kernels {
namespace {

using namespace cute;
using Elem = cute::bfloat16_t;

constexpr int kHeadDim = 128;
constexpr int kWarpgroup = 128;
// A unit's query rows are 64 per consumer warpgroup: two consumers (128-row units, wgmma /
// wgmma128) or one (64-row units, wgmma64). The CTA is the producer warpgroup + the consumers.
template <int kConsumers>
constexpr int kThreadsOf = (1 + kConsumers) * kWarpgroup;
// setmaxnreg budgets: one producer thread reads the work items and issues the bulk copies in 40
// registers; the consumers get the rest (S, O and P fragments: 32 / 64 + 64 + 16 / 32
// registers at 64 / 128 keys).
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

/// kBlockN keys per tile, kStages K/V stages (a consumer holds tile j's K and tile j-1's V; the
/// producer fills the rest ahead), kConsumers warpgroups of 64 query rows.
template <int kBlockN, int kStages, int kConsumers>
struct WgmmaTraits {
  static_assert(kBlockN == 64 || kBlockN == 128, "S tile: m64n64 or m64n128");
  static_assert(kStages >= 2, "a stage for K_j, one for V_{j-1}");
  static constexpr int kNB = kBlockN / 8;  // n8 blocks of S per key tile
  static constexpr int kKVElems = kBlockN * kHeadDim;
  static constexpr uint32_t kKVTxBytes = 2 * kKVElems * 2;  // a stage: K and V tiles, bf16
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
  // Q of every consumer, then kStages × {K, V}, then the mbarriers full[kStages], empty[kStages],
  // q_full, q_empty.
  static constexpr int kTileBytes = (kConsumers * kQElems + 2 * kStages * kKVElems) * 2;
  // Then the unit's description, written by the producer before it arrives on q_full: q_begin,
  // q_end, k_begin, k_end and the scored rows [s0, s1) (detail::score_rows).
  static constexpr int kInfoInts = 6;
  static constexpr int kSmemBytes = kTileBytes + (2 * kStages + 2) * 8 + kInfoInts * 4;
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 shared memory per CTA");
};

template <int kBlockN, int kStages, int kConsumers>
__global__ void __launch_bounds__(kThreadsOf<kConsumers>, 1)
    wgmma_attention_kernel(const AttentionArgs a, const AttentionWorkItem* __restrict__ work,
                           const int32_t* __restrict__ work_count, const __grid_constant__ CUtensorMap tm_q,
                           const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = WgmmaTraits<kBlockN, kStages, kConsumers>;
  using Bar = cutlass::arch::ClusterBarrier;
  using TxBar = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kNB = T::kNB;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Elem* const smem = reinterpret_cast<Elem*>(smem_raw);
  Elem* const kv_base = smem + kConsumers * kQElems;
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem_raw + T::kTileBytes);
  uint64_t* const empty = full + kStages;
  uint64_t* const q_full = empty + kStages;
  uint64_t* const q_empty = q_full + 1;
  int32_t* const info = reinterpret_cast<int32_t*>(q_empty + 1);
  auto k_smem = [&](int stage) { return kv_base + (2 * stage) * T::kKVElems; };
  auto v_smem = [&](int stage) { return kv_base + (2 * stage + 1) * T::kKVElems; };

  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      Bar::init(full + s, 1);                // the producer's arrival; the copies' bytes complete it
      Bar::init(empty + s, kConsumers * kWarpgroup);  // every consumer thread
    }
    Bar::init(q_full, 1);
    Bar::init(q_empty, kConsumers * kWarpgroup);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  const int n_units = *work_count * a.n_heads;
  const int64_t ld = static_cast<int64_t>(a.n_heads) * kHeadDim;

  if (tid < kWarpgroup) {  // ---- producer: one thread issues every copy ----
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (tid != 0) return;
    cute::prefetch_tma_descriptor(&tm_q);
    cute::prefetch_tma_descriptor(&tm_k);
    cute::prefetch_tma_descriptor(&tm_v);
    // Every row is read by one unit only: let it leave L2 first.
    constexpr auto kEvictFirst = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST);
    constexpr int kHalf = kHeadDim / 2;  // a box is one 64-column (128-byte) half of the head dim
    int tiles = 0, units = 0;            // tiles / units loaded so far: stage index and barrier phases
    for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
      // The unit's description is read here, ahead of the consumers, so that the dependent global
      // loads (work item, then its score and table rows) overlap the producer's waits rather than
      // the consumers' unit start.
      const AttentionWorkItem w = work[u / a.n_heads];
      const int head = u % a.n_heads;
      const int n_kv = (w.k_end - w.k_begin + kBlockN - 1) / kBlockN;  // <= 0: the plan gives none
      int s0 = 0, s1 = 0;
      detail::score_rows(a, w, head == 0, &s0, &s1);
      const int col = head * kHeadDim;
      auto load_tile = [&](int t) {
        const int stage = tiles % kStages;
        Bar::wait(empty + stage, ((tiles / kStages) & 1) ^ 1);
        TxBar::arrive_and_expect_tx(full + stage, T::kKVTxBytes);
        const int row = w.k_begin + t * kBlockN;
        for (int h = 0; h < 2; ++h) {
          SM90_TMA_LOAD_2D::copy(&tm_k, full + stage, kEvictFirst, k_smem(stage) + h * kBlockN * kHalf, col + h * kHalf,
                                 row);
          SM90_TMA_LOAD_2D::copy(&tm_v, full + stage, kEvictFirst, v_smem(stage) + h * kBlockN * kHalf, col + h * kHalf,
                                 row);
        }
        ++tiles;
      };
      if (n_kv > 0) load_tile(0);  // before Q: the previous unit's consumers may still hold Q and info
      Bar::wait(q_empty, (units & 1) ^ 1);
      info[0] = w.q_begin;
      info[1] = w.q_end;
      info[2] = w.k_begin;
      info[3] = w.k_end;
      info[4] = s0;
      info[5] = s1;
      if (n_kv > 0) {
        TxBar::arrive_and_expect_tx(q_full, T::kQTxBytes);  // releases the info stores too
        for (int c = 0; c < kConsumers; ++c)
          for (int h = 0; h < 2; ++h)
            SM90_TMA_LOAD_2D::copy(&tm_q, q_full, kEvictFirst, smem + c * kQElems + h * 64 * kHalf, col + h * kHalf,
                                   w.q_begin + 64 * c);
      } else {
        Bar::arrive(q_full);  // no keys: the consumers read the info and skip the unit
      }
      ++units;
      for (int t = 1; t < n_kv; ++t) load_tile(t);
    }
    return;  // the copies in flight complete on their barriers, which the consumers wait for
  }

  // ---- consumers ----
  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int c = tid / kWarpgroup - 1;  // consumer c < kConsumers: rows 64c .. 64c + 63 of every unit
  const int wg_tid = tid % kWarpgroup, lane = tid & 31, warp = wg_tid / 32;
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

  // O += P · V of the tile in `stage` (asynchronous: the caller waits).
  auto issue_pv = [&](int stage) {
    Tensor tOrVt = thr_o.partition_fragment_B(make_tensor(make_smem_ptr(v_smem(stage)), typename T::VtLayout{}));
    warpgroup_fence_operand(tOrP);  // P's registers: written before, read by the asynchronous MMA
    warpgroup_fence_operand(tOrO);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tOrP); ++kb) cute::gemm(mma_o, tOrP(_, _, kb), tOrVt(_, _, kb), tOrO);
    warpgroup_commit_batch();
  };

  int tiles = 0, units = 0;
  for (int u = blockIdx.x; u < n_units; u += gridDim.x) {
    const int head = u % a.n_heads;
    Bar::wait(q_full, units & 1);  // the unit's Q and its description (info) are in
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
    // The scored rows' column sums of the last tile, committed (shuffles, atomics) while the next
    // tile's MMAs run rather than between S and the softmax.
    float imp[kNB][2];
    int prev_stage = 0;
    for (int j = 0; j < n_kv; ++j) {
      const int stage = (tiles + j) % kStages;
      const int kv0 = w.k_begin + j * kBlockN;
      Bar::wait(full + stage, ((tiles + j) / kStages) & 1);  // the bulk copies (async proxy) landed
      Tensor tSrK = thr_s.partition_fragment_B(make_tensor(make_smem_ptr(k_smem(stage)), typename T::KVLayout{}));
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
        issue_pv(prev_stage);
        if (scored)
          detail::importance_commit<kNB>(imp, lane, kv0 - kBlockN, w.k_end, a.importance, a.importance_weight);
        warpgroup_wait<1>();  // S_j done (groups complete in order); P·V may still run
      } else {
        warpgroup_wait<0>();
      }
      warpgroup_fence_operand(tSrS);
      if (j == n_kv - 1) Bar::arrive(q_empty);  // the unit's last read of Q is done

      if (scored) detail::importance_row_sums<kNB>(s_at, lane, score_lo, score_hi, imp);
      if (kv0 + kBlockN > w.k_end) detail::mask_columns_from<kNB>(s_at, lane, w.k_end - kv0);
      float alpha[2];
      detail::online_softmax<kNB, kND, false, false>(s_at, o_at, row_max, row_sum, scale_log2, alpha);

      warpgroup_wait<0>();  // P_{j-1} · V_{j-1} landed in O: rescale it, then P_j may replace P_{j-1}
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);  // no P_j write may move above the wait
      if (j > 0) Bar::arrive(empty + prev_stage);  // K_{j-1} and V_{j-1} read
      detail::rescale_row<kND>(o_at, 0, alpha[0]);
      detail::rescale_row<kND>(o_at, 1, alpha[1]);
      CUTE_UNROLL
      for (int i = 0; i < size(tOrP); ++i) tOrP(i) = static_cast<Elem>(tSrS(i));
      prev_stage = stage;
    }
    if (const int valid = n_keys - (n_kv - 1) * kBlockN; valid < kBlockN) {
      // The last tile's rows past k_end hold whatever follows in the store (another slot's keys,
      // or never-written memory): its P columns are 0, but 0 · NaN would poison O, so V's rows
      // there become zeros (K's columns are masked to -inf) before the last P·V reads them.
      Elem* const vt = v_smem(prev_stage);
      for (int i = tid - kWarpgroup; i < (kBlockN - valid) * kChunksPerRow; i += kConsumers * kWarpgroup) {
        const int r = valid + i / kChunksPerRow;
        *reinterpret_cast<uint4*>(vt + tile_offset<kBlockN>(r, i % kChunksPerRow)) = make_uint4(0, 0, 0, 0);
      }
      cutlass::arch::fence_view_async_shared();  // generic-proxy stores -> wgmma's (and the next copy's) view
      cutlass::arch::NamedBarrier::sync(kConsumers * kWarpgroup, kConsumerBarrier);
    }
    issue_pv(prev_stage);
    if (scored)
      detail::importance_commit<kNB>(imp, lane, w.k_begin + (n_kv - 1) * kBlockN, w.k_end, a.importance,
                                     a.importance_weight);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    Bar::arrive(empty + prev_stage);
    tiles += n_kv;
    ++units;
    detail::store_rows<kND>(
        o_at, row_sum, lane, q_len - warp_row0,
        a.out + static_cast<int64_t>(w.q_begin + warp_row0) * ld + static_cast<int64_t>(head) * kHeadDim, ld);
  }
#endif
}

// The instantiations: 64-key tiles in six stages, 128-key tiles in three (224 KiB of tiles either
// way, one CTA per SM).
template <int kBlockN>
constexpr int kStagesOf = kBlockN == 64 ? 6 : 3;

/// A 2-D TMA map of a [rows, cols] bf16 matrix (row stride cols): boxes of box_rows rows × 64
/// columns (128 bytes) written in GMMA's 128-byte swizzle; reads past `rows` give zeros. Host-side
/// encoding only (the driver's cuTensorMapEncodeTiled, found once through the runtime): no device
/// call in the layer loop.
CUtensorMap tensor_map(const char* what, const __nv_bfloat16* base, int64_t rows, int64_t cols, int box_rows) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      cuda::throw_unsupported("attention: the driver has no cuTensorMapEncodeTiled (CUDA 12.0+ driver needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(__nv_bfloat16)};
  const cuuint32_t box[2] = {kHeadDim / 2, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(base), dims, strides,
                            box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    cuda::throw_invalid_argument(std::string("attention: cuTensorMapEncodeTiled failed for ") + what + " (CUresult " +
                                 std::to_string(static_cast<int>(r)) + ", " + std::to_string(rows) + " rows of " +
                                 std::to_string(cols) + ")");
  return map;
}

template <int kBlockN, int kConsumers>
void launch_wgmma(const AttentionArgs& a, const AttentionWorkItem* work, const int32_t* work_count, int64_t capacity,
                  cudaStream_t stream) {
  using T = WgmmaTraits<kBlockN, kStagesOf<kBlockN>, kConsumers>;
  constexpr auto kernel = wgmma_attention_kernel<kBlockN, kStagesOf<kBlockN>, kConsumers>;
  constexpr int kSmem = T::kSmemBytes;
  // No rows: the plan admits no tile (attention_tile_valid), and a map needs at least one row.
  if (a.q_rows <= 0 || a.kv_rows <= 0) return;
  detail::ensure_smem_opt_in<kernel>(kSmem);
  const int64_t cols = static_cast<int64_t>(a.n_heads) * kHeadDim;
  const CUtensorMap tm_q = tensor_map("q", a.q, a.q_rows, cols, 64);
  const CUtensorMap tm_k = tensor_map("k_store", a.k, a.kv_rows, cols, kBlockN);
  const CUtensorMap tm_v = tensor_map("v_store", a.v, a.kv_rows, cols, kBlockN);
  // Persistent: one CTA per SM (its shared memory), each walking units gridDim.x apart; the grid
  // depends on the capacity only, so recorded graphs keep it.
  const int64_t units = capacity * a.n_heads;
  const auto grid = static_cast<unsigned>(
      std::min<int64_t>(units, detail::cached_device_attribute<cudaDevAttrMultiProcessorCount>()));
  kernel<<<grid, T::kThreads, kSmem, stream>>>(a, work, work_count, tm_q, tm_k, tm_v);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_wgmma(const AttentionArgs& a, int block_n, int consumers, const AttentionWorkItem* work,
                     const int32_t* work_count, int64_t capacity, cudaStream_t stream) {
  if (consumers == 1)
    launch_wgmma<128, 1>(a, work, work_count, capacity, stream);  // wgmma64: 128-key tiles only
  else if (block_n == 128)
    launch_wgmma<128, 2>(a, work, work_count, capacity, stream);
  else
    launch_wgmma<64, 2>(a, work, work_count, capacity, stream);
}

}  // namespace flashdllm::kernels
