// The reduction of a split-K GEMM (kernels/cuda/gemm.h): out = Σ_s partial[s] (+ out).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// out[i] = round(Σ_{s < splits} partial[s · n + i] (+ float(out[i]) when accumulate)) for i < n, the
/// sum in fp32 in the order s = 0, 1, ..., then the accumulated value added, rounded once to out's
/// dtype (bf16 when out_bf16, else F32). partial: device F32 [splits, n]; out: device, n elements,
/// 16-byte aligned when n % 4 == 0 (then 4 elements a thread). n == 0 is a no-op.
/// Throws Error(kDevice) on launch failure.
void splitk_reduce(const float* partial, int splits, int64_t n, void* out, bool out_bf16, bool accumulate,
                   cudaStream_t stream);

}  // namespace flashdllm::kernels
