// See cutlass_gemm_ref.h.
#include "bench/cutlass_gemm_ref.h"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::bench {
namespace {

using namespace cute;

// kMinCarve: shared memory withheld from the main loop's stages if more than the epilogue's own
// (to give it the stage count of the fused kernel, whose staging tile is carved out the same way).
template <class EpilogueSchedule, int kMinCarve = 0>
struct RefGemm {
  using TileShape = Shape<_128, _256, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, 8,
      cutlass::bfloat16_t, cutlass::layout::RowMajor, 8, EpilogueSchedule>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8,
      cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<std::max(
          static_cast<int>(sizeof(typename Epilogue::SharedStorage)), kMinCarve)>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr int kStages = Mainloop::DispatchPolicy::Stages;
};

template <class G>
void run(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out, int M, int N, int K, cudaStream_t stream) {
  using Kernel = typename G::Kernel;
  using SA = typename Kernel::StrideA;
  using SB = typename Kernel::StrideB;
  using SD = typename Kernel::StrideD;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  typename Kernel::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {M, N, K, 1},
      {reinterpret_cast<const cutlass::bfloat16_t*>(x), SA{int64_t{K}, Int<1>{}, int64_t{M} * K},
       reinterpret_cast<const cutlass::bfloat16_t*>(w), SB{int64_t{K}, Int<1>{}, int64_t{N} * K}},
      {{1.0f, 0.0f},
       nullptr,
       SD{int64_t{N}, Int<1>{}, int64_t{M} * N},
       reinterpret_cast<cutlass::bfloat16_t*>(out),
       SD{int64_t{N}, Int<1>{}, int64_t{M} * N}},
      cutlass::KernelHardwareInfo{dev, kernels::detail::cached_device_attribute<cudaDevAttrMultiProcessorCount>()}};
  typename G::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    throw std::runtime_error("cutlass_gemm_ref: cannot implement");
  if (G::Gemm::get_workspace_size(args) != 0) throw std::runtime_error("cutlass_gemm_ref: needs a workspace");
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess ||
      gemm.run(stream) != cutlass::Status::kSuccess)
    throw std::runtime_error(std::string("cutlass_gemm_ref: launch failed: ") + cudaGetErrorString(cudaGetLastError()));
}

}  // namespace

bool cutlass_gemm_ref_built() noexcept { return true; }

// The fused 128x256b kernel's staging tile: 128 rows × (256 + 8) bf16.
using TmaCarved = RefGemm<cutlass::epilogue::TmaWarpSpecializedCooperative, 128 * 264 * 2>;
using Tma = RefGemm<cutlass::epilogue::TmaWarpSpecializedCooperative>;
using NoSmem = RefGemm<cutlass::epilogue::NoSmemWarpSpecialized>;

void cutlass_gemm_ref(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* out, int M, int N, int K,
                      RefEpilogue epilogue, cudaStream_t stream) {
  switch (epilogue) {
    case RefEpilogue::kTma: run<Tma>(x, w, out, M, N, K, stream); return;
    case RefEpilogue::kTmaCarved: run<TmaCarved>(x, w, out, M, N, K, stream); return;
    case RefEpilogue::kNoSmem: run<NoSmem>(x, w, out, M, N, K, stream); return;
  }
  throw std::runtime_error("cutlass_gemm_ref: unknown epilogue");
}

int cutlass_gemm_ref_stages(RefEpilogue epilogue) noexcept {
  switch (epilogue) {
    case RefEpilogue::kTma: return Tma::kStages;
    case RefEpilogue::kTmaCarved: return TmaCarved::kStages;
    case RefEpilogue::kNoSmem: return NoSmem::kStages;
  }
  return 0;
}

}  // namespace flashdllm::bench
