// CUDA_CHECK / CUBLAS_CHECK / CUDA_CHECK_LAUNCH: the one way CUDA host code reports failures.
//
// Each macro evaluates a CUDA runtime / cuBLASLt call once and, on failure, throws
// flashdllm::Error(kDevice) whose message names the failing call (its source text), the file and
// the line, and the CUDA/cuBLAS error name and description. The throwing functions live in a .cpp
// compiled by the host compiler, so this header pulls in no fmt and is safe to include from .cu
// files (nvcc 13 cannot compile fmt 9's C++20 consteval format checks).
//
// Launch discipline (design guide §7): every kernel launch is followed by CUDA_CHECK_LAUNCH(),
// which reads cudaGetLastError() (bad grid/block/shared-memory configurations, missing device
// code). Faults inside a kernel surface at the next synchronising call; the CUDA backend's
// debug mode (FLASHDLLM_CUDA_SYNC=1) synchronises after every op to pin them to the op.
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace flashdllm::cuda {

/// Throws Error(kInvalidArgument, message) / Error(kUnsupported, message) from code that cannot
/// include core/check.h (CUDA translation units).
[[noreturn]] void throw_invalid_argument(const std::string& message);
[[noreturn]] void throw_unsupported(const std::string& message);

/// Throws Error(kDevice): "<expr> failed: <cudaGetErrorName>: <cudaGetErrorString> (file:line)".
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
/// Throws Error(kDevice) for a cublasStatus_t value `status` (passed as int to keep cuBLAS
/// headers out of this one).
[[noreturn]] void throw_cublas_error(int status, const char* expr, const char* file, int line);

}  // namespace flashdllm::cuda

#define CUDA_CHECK(expr)                                                                   \
  do {                                                                                     \
    const cudaError_t fdllm_cuda_err_ = (expr);                                            \
    if (fdllm_cuda_err_ != cudaSuccess)                                                    \
      ::flashdllm::cuda::throw_cuda_error(fdllm_cuda_err_, #expr, __FILE__, __LINE__);     \
  } while (0)

/// Checks the launch that was just enqueued (configuration errors, no kernel image, ...).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

#define CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                     \
    const int fdllm_cublas_st_ = static_cast<int>(expr);                                   \
    if (fdllm_cublas_st_ != 0)                                                             \
      ::flashdllm::cuda::throw_cublas_error(fdllm_cublas_st_, #expr, __FILE__, __LINE__);  \
  } while (0)
