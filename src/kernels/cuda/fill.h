// Deterministic device-side fills for benchmarks and large tests (no host-side generation of
// gigabytes of inputs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// p[i] = bf16(lo + (hi − lo)·u_i), u_i = philox_uniform(seed, 0, 0, i) (i < 2^32 distinct
/// streams; larger i reuse the low 32 bits with the high bits in the step). n == 0 is a no-op.
/// Throws Error(kDevice) on launch failure.
void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

}  // namespace flashdllm::kernels
