// Flash attention forward on Hopper warpgroup MMA (wgmma), head_dim 128 (see attention.h,
// FlashVariant::kWgmmaM128N64 / kWgmmaM128N128, for the contract; the same one as the mma.sync
// kernel's).
//
// Per CTA: one work item (<= 128 query rows of one tile, e.g. one Flash-Cache slot's window tile)
// × one head; two warpgroups, each owning 64 query rows, sharing every K/V tile in shared memory
// (the mma.sync kernel's 64-row CTAs read each tile twice per 128-row slot). Per warpgroup and key
// tile j of kBlockN keys (64 or 128):
//   S_j = Q·K_jᵀ        wgmma m64nBk16 (B = kBlockN), both operands from shared memory (SS), fp32
//   O += P_{j-1}·V_{j-1} wgmma m64n128k16, P from registers (RS: S's accumulator layout is the
//                        A-operand layout, element for element), V read transposed (MN-major)
//   both issued together; the online softmax of S_j (FlashAttention-2, Algorithm 1; exp2 with
//   log2(e)·scale folded) runs while the P·V product is in flight, and O is rescaled once it lands
//   (the intra-warpgroup overlap of Shah et al., "FlashAttention-3" (2024), §3.2).
// The raw importance of score tiles is summed from S before masking, as in the mma.sync kernel
// (attention_flash_common.cuh). Shared memory: Q (2 × 64 rows) and kStages {K, V} stages (4 of 64
// keys or 3 of 128) in the 128-byte-swizzled GMMA layout (CuTe's GMMA::Layout_K_SW128_Atom); tile
// j + kStages - 2 is loaded with cp.async while tile j is computed, and landed tiles are made visible
// to wgmma's async proxy with fence.proxy.async before the barrier. No TMA producer warp and no
// ping-pong between the warpgroups (FA3 §3.1): both warpgroups load and meet at one barrier per tile.
//
// Built only for sm_90a (wgmma), with CUTLASS/CuTe (pip nvidia-cutlass, scripts/setup.sh).
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <type_traits>
#include <cutlass/arch/barrier.h>

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
constexpr int kBlockM = 128;  // query rows per CTA (two warpgroups of 64)
constexpr int kThreads = 256;
constexpr int kND = kHeadDim / 8;  // n8 blocks of O
constexpr int kChunksPerRow = kHeadDim / 8;
constexpr int kQElems = 64 * kHeadDim;  // one warpgroup's Q rows

// A [kRows][128] bf16 tile (a warpgroup's 64 Q rows, or a K or V tile of kBlockN keys), K-major
// (head dim contiguous): two column halves of 64 (kRows·64 elements each), each in 8-row atoms of
// 8 × 128 bytes whose 16-byte chunks are XOR-swizzled with the row (GMMA's 128-byte swizzle).
template <int kRows>
using TileLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Elem>{}, Shape<Int<kRows>, Int<kHeadDim>>{}));

// Element offset of (row, 16-byte chunk) in a TileLayout<kRows> tile whose base is 1024-byte
// aligned. CuTe's swizzle acts on the address bits of the smem pointer (TileLayout{}(r, c) alone is
// not the physical offset), so the function is written out for the cp.async stores; a mismatch with
// the descriptors wgmma reads through would scramble every tile (the twin tests).
template <int kRows>
__device__ __forceinline__ int tile_offset(int row, int chunk) {
  return (chunk >> 3) * (kRows * 64) + (row >> 3) * 512 + (row & 7) * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

/// kBlockN keys per tile, kStages K/V stages (tile j's K, tile j-1's V, and kStages - 2 tiles
/// prefetched ahead).
template <int kBlockN, int kStages>
struct WgmmaTraits {
  static_assert(kBlockN == 64 || kBlockN == 128, "S tile: m64n64 or m64n128");
  static_assert(kStages >= 3, "a stage for K_j, one for V_{j-1}, at least one ahead");
  static constexpr int kNB = kBlockN / 8;  // n8 blocks of S per key tile
  static constexpr int kAhead = kStages - 2;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  using KVLayout = TileLayout<kBlockN>;
  // V^T: the (head dim, key) view of a K-major V tile, MN-major for the P·V product.
  using VtLayout =
      decltype(composition(KVLayout{}, Layout<Shape<Int<kHeadDim>, Int<kBlockN>>, Stride<Int<kBlockN>, _1>>{}));
  using MmaS = std::conditional_t<kBlockN == 64, SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>,
                                  SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>>;
  using MmaO = SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>;
  static_assert(cosize_v<KVLayout> == kKVElems && cosize_v<TileLayout<64>> == kQElems, "dense tiles");
  // Q of both warpgroups, then kStages × {K, V}.
  static constexpr int kSmemBytes = (2 * kQElems + 2 * kStages * kKVElems) * 2;
  static_assert(kSmemBytes <= 227 * 1024, "sm_90 shared memory per CTA");
};

template <int kBlockN, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_attention_kernel(const AttentionArgs a, const AttentionWorkItem* __restrict__ work,
                           const int32_t* __restrict__ work_count) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = WgmmaTraits<kBlockN, kStages>;
  constexpr int kNB = T::kNB;
  using detail::cp_async_16;
  using detail::smem_addr;
  if (static_cast<int>(blockIdx.x) >= *work_count) return;  // uniform over the CTA
  const AttentionWorkItem w = work[blockIdx.x];
  const int head = blockIdx.y;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Elem* const smem = reinterpret_cast<Elem*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, wg = tid / 128, wg_tid = tid % 128, warp = (tid / 32) % 4;
  const int q_len = w.q_end - w.q_begin;
  const int wg_row0 = wg * 64;                // this warpgroup's first row in the work item
  const bool active = wg_row0 < q_len;        // uniform over the warpgroup (wgmma is collective)
  const int warp_row0 = wg_row0 + warp * 16;  // this warp's first row

  int score_lo = 0, score_hi = 0;
  detail::warp_score_rows(a, w, warp_row0, tid == 0 && head == 0, &score_lo, &score_hi);
  const bool scored = score_lo < score_hi;  // uniform over the warp

  const int64_t ld = static_cast<int64_t>(a.n_heads) * kHeadDim;
  const __nv_bfloat16* const qg = a.q + static_cast<int64_t>(head) * kHeadDim;
  const __nv_bfloat16* const kg = a.k + static_cast<int64_t>(head) * kHeadDim;
  const __nv_bfloat16* const vg = a.v + static_cast<int64_t>(head) * kHeadDim;
  const int n_keys = w.k_end - w.k_begin;
  const int n_kv = (n_keys + kBlockN - 1) / kBlockN;
  if (n_kv <= 0) return;  // the plan gives no work item without keys (attention_tile_valid); uniform

  Elem* const kv_base = smem + 2 * kQElems;
  auto k_smem = [&](int t) { return kv_base + (2 * (t % kStages)) * T::kKVElems; };
  auto v_smem = [&](int t) { return kv_base + (2 * (t % kStages) + 1) * T::kKVElems; };

  // K/V tile t -> its stage (keys past the end zero-filled); one cp.async group per call site.
  auto load_kv = [&](int t) {
    Elem* const sK = k_smem(t);
    Elem* const sV = v_smem(t);
#pragma unroll
    for (int it = 0; it < kBlockN * kChunksPerRow / kThreads; ++it) {
      const int c = tid + it * kThreads;
      const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
      const int key = t * kBlockN + r;
      const bool valid = key < n_keys;
      const int64_t off = valid ? static_cast<int64_t>(w.k_begin + key) * ld + ch * 8 : 0;
      const int so = tile_offset<kBlockN>(r, ch);
      cp_async_16(smem_addr(sK + so), kg + off, valid);
      cp_async_16(smem_addr(sV + so), vg + off, valid);
    }
  };

  // Prologue: group 0 = Q (rows >= q_len zero-filled) + K/V tile 0, then groups 1 .. kAhead - 1 =
  // tiles 1 .. kAhead - 1 (empty past the last tile: the group count stays uniform).
  detail::load_q_rows_async<kBlockM, kThreads>(tid, qg, ld, w.q_begin, q_len, [&](int r, int ch) {
    return smem + (r / 64) * kQElems + tile_offset<64>(r % 64, ch);
  });
  load_kv(0);
  detail::cp_async_commit();
#pragma unroll
  for (int t = 1; t < T::kAhead; ++t) {
    if (t < n_kv) load_kv(t);
    detail::cp_async_commit();
  }
  detail::cp_async_wait<T::kAhead - 1>();
  cutlass::arch::fence_view_async_shared();  // cp.async (generic proxy) writes -> wgmma (async proxy) reads
  __syncthreads();

  auto mma_s = make_tiled_mma(typename T::MmaS{});
  auto mma_o = make_tiled_mma(typename T::MmaO{});
  auto thr_s = mma_s.get_slice(wg_tid);
  auto thr_o = mma_o.get_slice(wg_tid);
  Tensor tSrQ = thr_s.partition_fragment_A(make_tensor(make_smem_ptr(smem + wg * kQElems), TileLayout<64>{}));
  Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<64>, Int<kBlockN>>{});                  // ((2,2,kNB),1,1)
  Tensor tOrO = partition_fragment_C(mma_o, Shape<Int<64>, Int<kHeadDim>>{});                 // ((2,2,16),1,1)
  Tensor tOrP = make_tensor<Elem>(partition_shape_A(mma_o, Shape<Int<64>, Int<kBlockN>>{}));  // ((2,2,2),1,kNB/2)
  static_assert(decltype(size(tSrS))::value == 4 * kNB && decltype(size(tOrP))::value == 4 * kNB, "S/P fragments");
  static_assert(decltype(size(tOrO))::value == 4 * kND, "O fragment");
  clear(tOrO);
  // Flat index 4·nb + e of an m64nN accumulator is element e of n8 block nb in the per-warp layout
  // of attention_flash_common.cuh (CLayout_64xN: values (2 columns, 2 row halves, N/8 blocks)); the
  // RS A operand of keys [16kk, 16kk+16) (ALayout_64x16) is S's blocks 2kk, 2kk+1 in the same order.
  auto s_at = [&](int nb, int e) -> float& { return tSrS(4 * nb + e); };
  auto o_at = [&](int nd, int e) -> float& { return tOrO(4 * nd + e); };
  float row_max[2] = {detail::kNegInf, detail::kNegInf};  // log2 domain, scaled
  float row_sum[2] = {0.f, 0.f};
  const float scale_log2 = a.scale * 1.4426950408889634f;

  // O += P · V of tile t (asynchronous: the caller waits).
  auto issue_pv = [&](int t) {
    Tensor tOrVt = thr_o.partition_fragment_B(make_tensor(make_smem_ptr(v_smem(t)), typename T::VtLayout{}));
    warpgroup_fence_operand(tOrP);  // P's registers: written before, read by the asynchronous MMA
    warpgroup_fence_operand(tOrO);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tOrP); ++kb) cute::gemm(mma_o, tOrP(_, _, kb), tOrVt(_, _, kb), tOrO);
    warpgroup_commit_batch();
  };

  for (int j = 0; j < n_kv; ++j) {
    // The stage of tile j + kAhead held tile j-2, whose V the P·V of iteration j-1 read and waited for.
    if (j + T::kAhead < n_kv) load_kv(j + T::kAhead);
    detail::cp_async_commit();
    if (active) {
      // S_j = Q · K_jᵀ, then O += P_{j-1} · V_{j-1}, both in flight together.
      Tensor tSrK = thr_s.partition_fragment_B(make_tensor(make_smem_ptr(k_smem(j)), typename T::KVLayout{}));
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
        issue_pv(j - 1);
        warpgroup_wait<1>();  // S_j done (groups complete in order); P·V may still run
      } else {
        warpgroup_wait<0>();
      }
      warpgroup_fence_operand(tSrS);

      if (scored)
        detail::accumulate_importance<kNB>(s_at, lane, score_lo, score_hi, w.k_begin + j * kBlockN, w.k_end,
                                           a.importance, a.importance_weight);
      const int kv0 = w.k_begin + j * kBlockN;
      if (kv0 + kBlockN > w.k_end) detail::mask_columns_from<kNB>(s_at, lane, w.k_end - kv0);
      float alpha[2];
      detail::online_softmax<kNB, kND, false, false>(s_at, o_at, row_max, row_sum, scale_log2, alpha);

      warpgroup_wait<0>();  // P_{j-1} · V_{j-1} landed in O: rescale it, then P_j may replace P_{j-1}
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);  // no P_j write may move above the wait
      detail::rescale_row<kND>(o_at, 0, alpha[0]);
      detail::rescale_row<kND>(o_at, 1, alpha[1]);
      CUTE_UNROLL
      for (int i = 0; i < size(tOrP); ++i) tOrP(i) = static_cast<Elem>(tSrS(i));
    }
    detail::cp_async_wait<T::kAhead - 1>();    // tile j+1 has landed (tiles after it may be in flight) ...
    cutlass::arch::fence_view_async_shared();  // ... is visible to wgmma ...
    __syncthreads();                           // ... for every thread; stage of tile j-1 free after the next P·V
  }
  if (!active) return;
  issue_pv(n_kv - 1);
  warpgroup_wait<0>();
  warpgroup_fence_operand(tOrO);

  detail::store_rows<kND>(
      o_at, row_sum, lane, q_len - warp_row0,
      a.out + static_cast<int64_t>(w.q_begin + warp_row0) * ld + static_cast<int64_t>(head) * kHeadDim, ld);
#endif
}

// The instantiations: 64-key tiles in four stages (two tiles prefetched ahead), 128-key tiles in
// three (one ahead; a fourth 64 KiB stage would exceed the 227 KiB of shared memory per CTA).
template <int kBlockN>
constexpr int kStagesOf = kBlockN == 64 ? 4 : 3;
template <int kBlockN>
using WgmmaOf = WgmmaTraits<kBlockN, kStagesOf<kBlockN>>;

template <int kBlockN>
void launch_wgmma(const AttentionArgs& a, const AttentionWorkItem* work, const int32_t* work_count, int64_t capacity,
                  cudaStream_t stream) {
  constexpr auto kernel = wgmma_attention_kernel<kBlockN, kStagesOf<kBlockN>>;
  constexpr int kSmem = WgmmaOf<kBlockN>::kSmemBytes;
  detail::ensure_smem_opt_in<kernel>(kSmem);
  const dim3 grid(static_cast<unsigned>(capacity), static_cast<unsigned>(a.n_heads));
  kernel<<<grid, kThreads, kSmem, stream>>>(a, work, work_count);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_wgmma(const AttentionArgs& a, int block_n, const AttentionWorkItem* work, const int32_t* work_count,
                     int64_t capacity, cudaStream_t stream) {
  if (block_n == 128)
    launch_wgmma<128>(a, work, work_count, capacity, stream);
  else
    launch_wgmma<64>(a, work, work_count, capacity, stream);
}

}  // namespace flashdllm::kernels
