// Programmatic dependent launch (PDL) of the forward's own kernels (include from .cu files only).
//
// Inside the recorded layer loop most boundaries are cuBLASLt GEMM -> our kernel (rmsnorm,
// rope_store, swiglu) or our kernel -> our kernel (rope_store -> attention). Launched with PDL, our
// kernel's blocks are scheduled while its predecessor drains, and wait on the device
// (wait_prior_grids) instead of the launch waiting for the predecessor's completion and memory flush
// (CUDA Programming Guide §4.5). The rule that keeps this exact: a kernel launched through
// launch_dependent() calls detail::wait_prior_grids() before its first global memory access (read or
// write), in every thread. The wait returns once every prerequisite grid has completed and its
// writes are visible, so the kernel sees the same memory as after an ordinary launch. Captured into
// a CUDA graph, the launch becomes a programmatic edge. Kernels launched ordinarily after it
// (cuBLASLt) wait for its completion as before.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/launch.h"

namespace flashdllm::kernels {
namespace detail {

/// The device side of launch_dependent(): blocks until the grids this one depends on have completed
/// and flushed their writes (griddepcontrol.wait). A no-op for an ordinary launch and below sm_90.
__device__ __forceinline__ void wait_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

}  // namespace detail

/// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute when dependent_launch() is
/// on. `kernel` must call detail::wait_prior_grids() before any global memory access. Like <<<>>>,
/// a failed launch is left for the caller's CUDA_CHECK_LAUNCH() (cudaGetLastError).
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = dependent_launch() ? 1 : 0;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace flashdllm::kernels
