// The Hopper (wgmma) flash attention's shipped instantiations (attention_wgmma.h; the kernel template
// and its description: attention_wgmma_kernel.cuh). Built only for sm_90a, with CUTLASS/CuTe.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_wgmma.h"
#include "kernels/cuda/attention_wgmma_kernel.cuh"
#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {

namespace flash_wgmma {

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

}  // namespace flash_wgmma

void attention_wgmma(const AttentionArgs& a, int consumers, const AttentionWorkItem* work, const int32_t* work_count,
                     int64_t capacity, cudaStream_t stream) {
  if (consumers == 1)
    flash_wgmma::launch_wgmma<128, 1>(a, work, work_count, capacity, stream);  // wgmma64
  else
    flash_wgmma::launch_wgmma<128, 2>(a, work, work_count, capacity, stream);  // wgmma128
}

}  // namespace flashdllm::kernels
