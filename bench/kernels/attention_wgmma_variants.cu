// The bench-only wgmma flash variant (attention_variants.h): the Hopper kernel template
// (src/kernels/cuda/attention_wgmma_kernel.cuh) with 64-key tiles and two consumer warpgroups. Built
// only for sm_90a, with CUTLASS/CuTe.
#include "bench/kernels/attention_variants.h"
#include "kernels/cuda/attention_wgmma_kernel.cuh"

namespace flashdllm::bench {

void attention_wgmma_m128n64(const kernels::AttentionArgs& a, const kernels::AttentionWorkItem* work,
                             const int32_t* work_count, int64_t capacity, cudaStream_t stream) {
  kernels::flash_wgmma::launch_wgmma<64, 2>(a, work, work_count, capacity, stream);
}

}  // namespace flashdllm::bench
