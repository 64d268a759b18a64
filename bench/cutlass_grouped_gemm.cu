// See cutlass_grouped_gemm.h.
#include "bench/cutlass_grouped_gemm.h"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <stdexcept>
#include <string>

#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::bench {
namespace {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per group
using Shape3 = ProblemShape::UnderlyingProblemShape;

// 128 x 128 output tiles, 64-deep K steps (128 bytes of bf16: one TMA swizzle atom), no cluster; the
// epilogue without a source operand (C is void: out is written, never read).
struct Grouped {
  using TileShape = Shape<_128, _128, _64>;
  using ClusterShape = Shape<_1, _1, _1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor*, 8,
      cutlass::bfloat16_t, cutlass::layout::RowMajor*, 8,
      cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::bfloat16_t, cutlass::layout::RowMajor*, 8,
      cutlass::bfloat16_t, cutlass::layout::ColumnMajor*, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

constexpr size_t align256(size_t v) noexcept { return (v + 255) / 256 * 256; }

// The per-group argument arrays at the front of the workspace.
struct GroupArrays {
  Shape3* shapes = nullptr;
  const cutlass::bfloat16_t** a = nullptr;
  const cutlass::bfloat16_t** b = nullptr;
  cutlass::bfloat16_t** d = nullptr;
  Grouped::StrideA* sa = nullptr;
  Grouped::StrideB* sb = nullptr;
  Grouped::StrideD* sd = nullptr;
  size_t bytes = 0;  // of the arrays (256-aligned): CUTLASS's workspace follows
};

GroupArrays carve(void* base, int groups) {
  auto* p = static_cast<char*>(base);
  const auto g = static_cast<size_t>(groups);
  GroupArrays r;
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* at = p == nullptr ? nullptr : p + off;
    off = align256(off + bytes);
    return at;
  };
  r.shapes = reinterpret_cast<Shape3*>(take(g * sizeof(Shape3)));
  r.a = reinterpret_cast<const cutlass::bfloat16_t**>(take(g * sizeof(void*)));
  r.b = reinterpret_cast<const cutlass::bfloat16_t**>(take(g * sizeof(void*)));
  r.d = reinterpret_cast<cutlass::bfloat16_t**>(take(g * sizeof(void*)));
  r.sa = reinterpret_cast<Grouped::StrideA*>(take(g * sizeof(Grouped::StrideA)));
  r.sb = reinterpret_cast<Grouped::StrideB*>(take(g * sizeof(Grouped::StrideB)));
  r.sd = reinterpret_cast<Grouped::StrideD*>(take(g * sizeof(Grouped::StrideD)));
  r.bytes = off;
  return r;
}

// One thread per group: its problem shape (rows from the offsets), operand pointers and strides.
__global__ void group_arguments(const __nv_bfloat16* a, const __nv_bfloat16* w, const int32_t* offsets, int groups,
                                int N, int K, __nv_bfloat16* out, GroupArrays arr) {
  const int g = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (g >= groups) return;
  const int r0 = offsets[g], m = offsets[g + 1] - r0;
  arr.shapes[g] = Shape3{m, N, K};
  arr.a[g] = reinterpret_cast<const cutlass::bfloat16_t*>(a + static_cast<int64_t>(r0) * K);
  arr.b[g] = reinterpret_cast<const cutlass::bfloat16_t*>(w + static_cast<int64_t>(g) * N * K);
  arr.d[g] = reinterpret_cast<cutlass::bfloat16_t*>(out + static_cast<int64_t>(r0) * N);
  // Row-major A [m, K], K-major B [N, K], row-major D [m, N]: (leading stride, 1, no batch).
  arr.sa[g] = Grouped::StrideA{int64_t{K}, Int<1>{}, Int<0>{}};
  arr.sb[g] = Grouped::StrideB{int64_t{K}, Int<1>{}, Int<0>{}};
  arr.sd[g] = Grouped::StrideD{int64_t{N}, Int<1>{}, Int<0>{}};
}

Grouped::Gemm::Arguments arguments(const GroupArrays& arr, int groups) {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  Grouped::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {groups, arr.shapes, nullptr},  // no host shapes: the sizes stay on the device
      {arr.a, arr.sa, arr.b, arr.sb},
      {{}, nullptr, arr.sd, arr.d, arr.sd},
      cutlass::KernelHardwareInfo{dev, kernels::detail::cached_device_attribute<cudaDevAttrMultiProcessorCount>()}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  return args;
}

}  // namespace

bool cutlass_grouped_built() noexcept { return true; }

size_t cutlass_grouped_workspace(int groups) {
  const GroupArrays arr = carve(nullptr, groups);
  return arr.bytes + align256(Grouped::Gemm::get_workspace_size(arguments(arr, groups)));
}

void cutlass_grouped_gemm_bf16(const __nv_bfloat16* a, const __nv_bfloat16* w, const int32_t* offsets, int groups,
                               int N, int K, __nv_bfloat16* out, void* workspace, cudaStream_t stream) {
  if (groups < 1 || N % 8 != 0 || K % 8 != 0)
    throw std::runtime_error("cutlass_grouped_gemm_bf16: needs groups >= 1 and N, K multiples of 8 (groups " +
                             std::to_string(groups) + ", N " + std::to_string(N) + ", K " + std::to_string(K) + ")");
  const GroupArrays arr = carve(workspace, groups);
  group_arguments<<<(groups + 127) / 128, 128, 0, stream>>>(a, w, offsets, groups, N, K, out, arr);
  CUDA_CHECK(cudaGetLastError());
  const auto args = arguments(arr, groups);
  Grouped::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess)
    throw std::runtime_error("cutlass_grouped_gemm_bf16: CUTLASS cannot implement N=" + std::to_string(N) +
                             " K=" + std::to_string(K));
  if (gemm.initialize(args, static_cast<char*>(workspace) + arr.bytes, stream) != cutlass::Status::kSuccess ||
      gemm.run(stream) != cutlass::Status::kSuccess)
    throw std::runtime_error(std::string("cutlass_grouped_gemm_bf16: launch failed: ") +
                             cudaGetErrorString(cudaGetLastError()));
}

}  // namespace flashdllm::bench
