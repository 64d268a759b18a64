// See cutlass_fp8_blockwise.h.
#include "bench/cutlass_fp8_blockwise.h"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <stdexcept>
#include <string>

#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::bench {
namespace {

using namespace cute;

// Scales: one per token and 128-deep K block for the activations (granularity 1 x 128, M-major: the
// outer-major layout), one per 128 x 128 block for the weights (K-major: the checkpoint's row-major
// grid).
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::MN, cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

template <class Scheduler>
struct Fp8Gemm {
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,
      cutlass::bfloat16_t, cutlass::layout::RowMajor, 8, cutlass::epilogue::NoSmemWarpSpecialized>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::float_e4m3_t,
      cute::tuple<cutlass::layout::RowMajor, LayoutSFA>, 16, cutlass::float_e4m3_t,
      cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, 16, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

using DataParallel = Fp8Gemm<cutlass::gemm::PersistentScheduler>;
using StreamK = Fp8Gemm<cutlass::gemm::StreamKScheduler>;

template <class G>
typename G::Kernel::Arguments arguments(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws,
                                        __nv_bfloat16* out, int T, int N, int K, bool accumulate) {
  using Kernel = typename G::Kernel;
  using SA = typename Kernel::StrideA;
  using SB = typename Kernel::StrideB;
  using SC = typename Kernel::StrideC;
  using SD = typename Kernel::StrideD;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const auto shape = make_shape(T, N, K, 1);
  typename Kernel::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {T, N, K, 1},
      {reinterpret_cast<const cutlass::float_e4m3_t*>(xq), SA{int64_t{K}, Int<1>{}, int64_t{T} * K},
       reinterpret_cast<const cutlass::float_e4m3_t*>(wq), SB{int64_t{K}, Int<1>{}, int64_t{N} * K}, xs,
       ScaleConfig::tile_atom_to_shape_SFA(shape), ws, ScaleConfig::tile_atom_to_shape_SFB(shape)},
      {{1.0f, accumulate ? 1.0f : 0.0f},
       reinterpret_cast<const cutlass::bfloat16_t*>(out),
       SC{int64_t{N}, Int<1>{}, int64_t{T} * N},
       reinterpret_cast<cutlass::bfloat16_t*>(out),
       SD{int64_t{N}, Int<1>{}, int64_t{T} * N}},
      cutlass::KernelHardwareInfo{dev, kernels::detail::cached_device_attribute<cudaDevAttrMultiProcessorCount>()}};
  return args;
}

template <class G>
size_t workspace(int T, int N, int K) {
  return G::Gemm::get_workspace_size(arguments<G>(nullptr, nullptr, nullptr, nullptr, nullptr, T, N, K, false));
}

template <class G>
void run(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, __nv_bfloat16* out, int T, int N,
         int K, bool accumulate, void* ws_mem, cudaStream_t stream) {
  const auto args = arguments<G>(xq, xs, wq, ws, out, T, N, K, accumulate);
  typename G::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    throw std::runtime_error("cutlass_fp8_blockwise: cannot implement T=" + std::to_string(T) +
                             " N=" + std::to_string(N) + " K=" + std::to_string(K));
  if (gemm.initialize(args, ws_mem, stream) != cutlass::Status::kSuccess ||
      gemm.run(stream) != cutlass::Status::kSuccess)
    throw std::runtime_error(std::string("cutlass_fp8_blockwise: launch failed: ") +
                             cudaGetErrorString(cudaGetLastError()));
}

}  // namespace

bool cutlass_fp8_blockwise_built() noexcept { return true; }

size_t cutlass_fp8_blockwise_workspace(int T, int N, int K, CutlassFp8Schedule schedule) {
  return schedule == CutlassFp8Schedule::kStreamK ? workspace<StreamK>(T, N, K) : workspace<DataParallel>(T, N, K);
}

void cutlass_fp8_blockwise(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, __nv_bfloat16* out,
                           int T, int N, int K, bool accumulate, CutlassFp8Schedule schedule, void* workspace,
                           cudaStream_t stream) {
  if (schedule == CutlassFp8Schedule::kStreamK)
    run<StreamK>(xq, xs, wq, ws, out, T, N, K, accumulate, workspace, stream);
  else
    run<DataParallel>(xq, xs, wq, ws, out, T, N, K, accumulate, workspace, stream);
}

}  // namespace flashdllm::bench
