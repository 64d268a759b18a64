// The fused QKV projection + RoPE + K/V store on sm_90 (qkv_rope_sm90.h): a CUTLASS 3 GEMM
// (TMA loads, wgmma, warp-specialised persistent kernel with two consumer warpgroups from CUTLASS's
// collective builder) whose epilogue is ours.
//
// The epilogue works on the accumulator fragment in registers. In the wgmma accumulator layout a
// thread holds, per 8-column block j of its warpgroup's 64 × BN slice, the columns
// 8j + 2·(lane % 4) + {0, 1} of two rows (lane / 4 and lane / 4 + 8): the partner of column n in the
// half-rotation RoPE, n + Dh/2, is block j + Dh/16 of the same thread. So each thread rounds its
// pair to bf16 (the unfused GEMM's output), rotates it with the table's cos / sin of the row's
// position (separately rounded fp32 products and sums, as rope_store_bf16) and writes it to a tile
// in shared memory, whose rows the bulk-copy engine then writes to q's dense rows and to the K and V
// store rows (RopeStoreEpilogue): no [T, 3·H·Dh] intermediate and no second pass. A tile's BN
// columns are whole heads (BN a multiple of Dh), so rotation pairs never straddle tiles; the
// q | k | v section of each column pair is computed from its global column.
#include "bench/kernels/qkv_rope_sm90.h"

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/cluster_launch.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

using namespace cute;

enum : int { kConsumers = 256 };  // the cooperative kernel's two consumer warpgroups (threads)
// The staged tile's row pitch (bf16): 8 columns of padding make a wgmma fragment's 4-byte writes
// conflict-free; (kBN + 8)·2 bytes stays a multiple of 16 for the bulk copies.
template <int kBN>
constexpr int kTileLd = kBN + 8;

// The operator-style epilogue CUTLASS's sm_90 kernels take through Sm90TmaWarpSpecializedAdapter
// (the interface of cutlass::epilogue::collective::DefaultEpilogue), for the cooperative kernel.
// The rotated bf16 pairs go to a kBM × kBN tile in shared memory (carved out of the main loop's
// stages); then one thread per tile row hands each of its q / k / v row segments to the bulk-copy
// engine (cp.async.bulk shared → global) and the consumers go on to the next tile's main loop. The
// copies are waited for (their shared-memory reads) before the tile is written again and at the
// end of the kernel, as CUTLASS's TMA epilogue does with its stores.
// bench/results/2026-12-03-h200-qkv-epilogues: this is the fastest of the epilogues tried (1.23-1.27x
// the cuBLASLt GEMM at T >= 1024); storing each thread's pairs from registers cost 1.29-1.34x, also
// in CUTLASS's ping-pong kernel 1.27-1.33x, and staging with 16-byte stores from the threads more.
template <int kBM, int kBN>
class RopeStoreEpilogue {
 public:
  using ElementC = cutlass::bfloat16_t;  // the kernel asks for these types; C is never read
  using ElementD = cutlass::bfloat16_t;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct SharedStorage {
    alignas(128) __nv_bfloat16 tile[kBM * kTileLd<kBN>];
  };
  using TensorStorage = SharedStorage;
  struct Arguments {
    FusedQkvArgs args;
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& a, void*) {
    return a;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  CUTLASS_HOST_DEVICE explicit RopeStoreEpilogue(Params const& p) : p_(p) {}

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL, BlockShapeMNK, BlockCoordMNKL blk_coord,
                                 cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char* smem) {
    static_assert(size<0>(BlockShapeMNK{}) == kBM && size<1>(BlockShapeMNK{}) == kBN, "epilogue / GEMM tile");
    // ((2 columns, 2 rows, J column blocks), MMA_M, MMA_N): one wgmma atom spans the tile's columns.
    static_assert(rank(FrgLayout{}) == 3 && size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2,
                  "unexpected wgmma accumulator layout");
    static_assert(size<2>(FrgLayout{}) == 1 && size<0, 2>(FrgLayout{}) * 8 == kBN,
                  "the epilogue needs one wgmma atom across the tile's columns");
    __nv_bfloat16* tile = reinterpret_cast<SharedStorage*>(smem)->tile;
    wait_bulk(thread_idx);                             // this thread's copies of the previous tile read it
    cutlass::arch::NamedBarrier::sync(kConsumers, 0);  // ... and every thread's
    if (p_.args.head_dim == 128)
      store<8>(blk_coord, acc, tiled_mma, thread_idx, tile);
    else
      store<4>(blk_coord, acc, tiled_mma, thread_idx, tile);
    cute::tma_store_fence();  // make the tile visible to the copy engine
    cutlass::arch::NamedBarrier::sync(kConsumers, 0);
    copy_out_bulk(blk_coord, tile, thread_idx);
  }

  // Waits until this thread's bulk copies have read the tile (a no-op for threads that issue none).
  // Called before the tile is written again and from the adapter's store_tail.
  CUTLASS_DEVICE static void wait_bulk(int thread_idx) {
    if (thread_idx < kBM) cute::tma_store_wait<0>();
  }

 private:
  // Thread r < kBM copies tile row r, split at the q | k | v boundaries, to q / the store rows
  // with one cp.async.bulk per segment (16-byte multiples: columns are multiples of 8, the row
  // pitch kTileLd·2 bytes a multiple of 16; destinations 16-byte aligned, qkv_rope_fused_supported).
  template <class BlockCoordMNKL>
  CUTLASS_DEVICE void copy_out_bulk(BlockCoordMNKL blk_coord, const __nv_bfloat16* tile, int thread_idx) {
    const FusedQkvArgs& a = p_.args;
    const int rr = thread_idx;
    const int64_t t = static_cast<int64_t>(get<0>(blk_coord)) * kBM + rr;
    if (rr >= kBM || t >= a.tokens) return;
    const int n0 = static_cast<int>(get<1>(blk_coord)) * kBN;
    const int width = a.n_heads * a.head_dim;
    const int n_end = min(n0 + kBN, 3 * width);
    const int32_t pos = __ldg(a.positions + t);
    const int32_t row = __ldg(a.rows + t);
    const bool store_ok = pos >= 0 && pos < a.max_positions && row >= 0 && row < a.store_rows;
    for (int g = n0; g < n_end;) {
      const int section = (g >= width) + (g >= 2 * width);
      const int seg_end = min(n_end, (section + 1) * width);
      const int col = g - section * width;
      __nv_bfloat16* dst = section == 0
                               ? a.q_out + t * width + col
                               : (section == 1 ? a.k_store : a.v_store) + static_cast<int64_t>(row) * width + col;
      if (section == 0 || store_ok)
        cute::SM90_BULK_COPY_S2G::copy(tile + rr * kTileLd<kBN> + (g - n0), dst, (seg_end - g) * 2);
      g = seg_end;
    }
    cute::tma_store_arrive();
  }

  // Rotates and rounds the fragment into `tile`: the rows below T, q of a bad position as NaN, k and
  // v only where their store row will be written. kPartner = Dh/16: the column blocks between a
  // rotation pair's two halves.
  template <int kPartner, class BlockCoordMNKL, class FrgEngine, class FrgLayout, class TiledMma>
  CUTLASS_DEVICE void store(BlockCoordMNKL blk_coord, cute::Tensor<FrgEngine, FrgLayout> const& acc, TiledMma tiled_mma,
                            int thread_idx, __nv_bfloat16* tile) {
    constexpr int kJ = kBN / 8;
    constexpr int kMM = size<1>(FrgLayout{});
    const FusedQkvArgs& a = p_.args;
    const int64_t m0 = static_cast<int64_t>(get<0>(blk_coord)) * kBM;
    // Columns fit in int (qkv_rope_fused_supported: 3·H·Dh < 2^31); no 64-bit division per element.
    const int n0 = static_cast<int>(get<1>(blk_coord)) * kBN;
    const int width = a.n_heads * a.head_dim;  // H·Dh
    constexpr int half = kPartner * 8;
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor coord = thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBM>{}, Int<kBN>{})));

    // Fully unrolled loops without lambdas: every fragment index is a compile-time constant, so the
    // accumulators stay in registers.
    CUTLASS_PRAGMA_UNROLL
    for (int mi = 0; mi < kMM; ++mi) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < 2; ++r) {
        const int m_local = get<0>(coord(make_coord(make_coord(0, r, 0), mi, 0)));
        const int64_t t = m0 + m_local;
        if (t >= a.tokens) continue;
        // Read-only loads (ld.global.nc): the compiler may schedule them freely.
        const int32_t pos = __ldg(a.positions + t);
        const int32_t row = __ldg(a.rows + t);
        const bool pos_ok = pos >= 0 && pos < a.max_positions;
        const bool row_ok = row >= 0 && row < a.store_rows;
        if (a.error_flags != nullptr && (!pos_ok || !row_ok))
          atomicOr(a.error_flags, (pos_ok ? 0 : kErrRopePosition) | (row_ok ? 0 : kErrStoreRow));
        const float* cos_row = a.cos + static_cast<int64_t>(pos) * half;
        const float* sin_row = a.sin + static_cast<int64_t>(pos) * half;
        // Whether block j holds a head's first half (and so a rotation pair, with its partner in
        // block j + kPartner) is a property of j alone, as BN is whole heads.
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kJ; ++j) {
          const int n_local = get<1>(coord(make_coord(make_coord(0, r, j), mi, 0)));  // even column
          const int g = n0 + n_local;
          if (g >= 3 * width) continue;
          const int section = (g >= width) + (g >= 2 * width);  // 0 q, 1 k, 2 v
          const int col = g - section * width;
          __nv_bfloat16* const dst = tile + m_local * kTileLd<kBN> + n_local;
          const float x0 = acc(make_coord(make_coord(0, r, j), mi, 0));
          const float x1 = acc(make_coord(make_coord(1, r, j), mi, 0));
          if (section == 2) {
            if (pos_ok && row_ok) *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(x0, x1);
            continue;
          }
          if (j % (2 * kPartner) < kPartner) {
            if (!pos_ok) {  // as rope_store_bf16: q poisoned, no store rows
              if (section == 0) {
                const __nv_bfloat162 nan2 = __halves2bfloat162(detail::bf16_nan(), detail::bf16_nan());
                *reinterpret_cast<__nv_bfloat162*>(dst) = nan2;
                *reinterpret_cast<__nv_bfloat162*>(dst + half) = nan2;
              }
              continue;
            }
            if (section == 1 && !row_ok) continue;
            const float y0 = acc(make_coord(make_coord(0, r, j + kPartner), mi, 0));
            const float y1 = acc(make_coord(make_coord(1, r, j + kPartner), mi, 0));
            const int d = col % (2 * half);
            const float2 c = __ldg(reinterpret_cast<const float2*>(cos_row + d));
            const float2 s = __ldg(reinterpret_cast<const float2*>(sin_row + d));
            __nv_bfloat162 lo, hi;
            detail::rope_rotate(detail::round_bf16(x0), detail::round_bf16(y0), c.x, s.x, &lo.x, &hi.x);
            detail::rope_rotate(detail::round_bf16(x1), detail::round_bf16(y1), c.y, s.y, &lo.y, &hi.y);
            *reinterpret_cast<__nv_bfloat162*>(dst) = lo;
            *reinterpret_cast<__nv_bfloat162*>(dst + half) = hi;
          }
        }
      }
    }
  }

  Params p_;
};

// CUTLASS's adapter, plus a store_tail that waits for the bulk copies of the CTA's last tile (the
// adapter's own does nothing: an operator-style epilogue has no asynchronous stores of its own).
template <class Op>
struct EpilogueAdapter : cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Op> {
  using Base = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Op>;
  using Base::Base;
  template <class LoadPipeline, class LoadState, class StorePipeline, class StoreState>
  CUTLASS_DEVICE auto store_tail(LoadPipeline load_pipeline, LoadState load_state, StorePipeline store_pipeline,
                                 StoreState store_state) {
    Op::wait_bulk(static_cast<int>(threadIdx.x) % kConsumers);
    return Base::store_tail(load_pipeline, load_state, store_pipeline, store_state);
  }
};

// One GEMM configuration: C[T, 3·H·Dh] = xn[T, D] · wqkvᵀ (both K-major bf16, fp32 accumulation),
// CUTLASS's cooperative kernel (the CTA's two consumer warpgroups share a kBM × kBN tile, kBM/2 rows
// each), clusters of one CTA, persistent; the epilogue is RopeStoreEpilogue.
template <int kBM, int kBN>
struct QkvGemm {
  using TileShape = Shape<Int<kBM>, Int<kBN>, Int<64>>;
  using ClusterShape = Shape<_1, _1, _1>;
  using EpilogueOp = RopeStoreEpilogue<kBM, kBN>;
  using Epilogue = EpilogueAdapter<EpilogueOp>;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,
      cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename EpilogueOp::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

template <class Gemm>
void launch(const FusedQkvArgs& a, const QkvConfig& config, cudaStream_t stream) {
  using Kernel = typename Gemm::Kernel;
  const int M = static_cast<int>(a.tokens), N = 3 * a.n_heads * a.head_dim, K = static_cast<int>(a.d_model);
  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  cutlass::KernelHardwareInfo hw{dev, detail::cached_device_attribute<cudaDevAttrMultiProcessorCount>()};
  typename Kernel::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {reinterpret_cast<const cutlass::bfloat16_t*>(a.xn), StrideA{int64_t{K}, Int<1>{}, int64_t{M} * K},
       reinterpret_cast<const cutlass::bfloat16_t*>(a.wqkv), StrideB{int64_t{K}, Int<1>{}, int64_t{N} * K}},
      {typename Gemm::EpilogueOp::Arguments{a}},
      hw,
      {config.swizzle, config.along_n ? cutlass::gemm::kernel::detail::RasterOrderOptions::AlongN
                                      : cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM}};
  if (!Kernel::can_implement(args))
    cuda::throw_unsupported("qkv_rope_store (fused): CUTLASS cannot run this shape (T " + std::to_string(M) +
                            ", d_model " + std::to_string(K) + ", width " + std::to_string(N) + ")");
  if (Kernel::get_workspace_size(args) != 0)
    cuda::throw_invalid_argument("qkv_rope_store (fused): the GEMM asks for a workspace");
  // Host work only (the TMA maps' encoding): no device call, no allocation in the layer loop.
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  constexpr auto kernel = cutlass::device_kernel<Kernel>;
  detail::ensure_smem_opt_in<kernel>(Kernel::SharedStorageSize);
  const cutlass::ClusterLaunchParams lp{Kernel::get_grid_shape(params), Kernel::get_block_shape(), dim3(1, 1, 1),
                                        Kernel::SharedStorageSize, stream};
  const cutlass::Status st = cutlass::launch_kernel_on_cluster(lp, reinterpret_cast<const void*>(kernel), params);
  CUDA_CHECK_LAUNCH();  // a CUDA error names itself (kDevice)
  if (st != cutlass::Status::kSuccess)
    cuda::throw_cuda_error(cudaErrorLaunchFailure, "qkv_rope_store (fused): CUTLASS cluster launch", __FILE__,
                           __LINE__);
}

}  // namespace

void qkv_rope_store_sm90(const FusedQkvArgs& a, const QkvConfig& config, cudaStream_t stream) {
  switch (config.tile) {
    case QkvTile::k128x128b: launch<QkvGemm<128, 128>>(a, config, stream); return;
    case QkvTile::k128x256b: launch<QkvGemm<128, 256>>(a, config, stream); return;
    case QkvTile::kAuto: break;
  }
  cuda::throw_invalid_argument("qkv_rope_store (fused): no tile configuration chosen");
}

int qkv_rope_sm90_stages(QkvTile tile) noexcept {
  switch (tile) {
    case QkvTile::k128x128b: return QkvGemm<128, 128>::Mainloop::DispatchPolicy::Stages;
    case QkvTile::k128x256b: return QkvGemm<128, 256>::Mainloop::DispatchPolicy::Stages;
    case QkvTile::kAuto: break;
  }
  return 0;
}

}  // namespace flashdllm::kernels
