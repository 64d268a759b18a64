// Deterministic device-side fills for benchmarks, large tests and dummy weights (no host-side
// generation of gigabytes of inputs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// p[i] = bf16(lo + (hi − lo)·u_i), u_i = philox_uniform(seed, 0, 0, i) (i < 2^32 distinct
/// streams; larger i reuse the low 32 bits with the high bits in the step). n == 0 is a no-op.
/// Throws Error(kDevice) on launch failure.
void fill_uniform_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

/// The Box-Muller normal fill of Backend::fill_normal (backend.h has the exact definition): for
/// even i, u1 = philox_uniform(seed, rng_stream, i >> 32, i), u2 = philox_uniform(seed ^
/// 0x9e3779b97f4a7c15, rng_stream, i >> 32, i), r = sqrt(-2 ln u1)·std, a = 2π·u2,
/// p[i] = fp32(r·cos a + mean), p[i+1] = fp32(r·sin a + mean), computed in double without FMA
/// contraction (as the CPU backend); the bf16 variant stores the RNE rounding of that fp32 value.
/// One thread per pair (grid-stride). n == 0 is a no-op. Throws Error(kDevice) on launch failure.
void fill_normal_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, uint64_t rng_stream, float mean, float std,
                      cudaStream_t stream);
void fill_normal_f32(float* p, int64_t n, uint64_t seed, uint64_t rng_stream, float mean, float std,
                     cudaStream_t stream);

/// The same values at a window of a parent tensor (Backend::fill_normal's FillWindow): element
/// (r, c) of the [rows, cols] destination gets the value of parent index offset + r·parent_cols + c
/// (parent_cols >= cols, offset >= 0: checked by the caller). One thread per element (a slice can
/// split a Box-Muller pair). rows·cols == 0 is a no-op. Throws Error(kDevice) on launch failure.
void fill_normal_window_bf16(__nv_bfloat16* p, int64_t rows, int64_t cols, int64_t offset, int64_t parent_cols,
                             uint64_t seed, uint64_t rng_stream, float mean, float std, cudaStream_t stream);
void fill_normal_window_f32(float* p, int64_t rows, int64_t cols, int64_t offset, int64_t parent_cols, uint64_t seed,
                            uint64_t rng_stream, float mean, float std, cudaStream_t stream);

/// Whether the current device can run this library's kernels: cudaFuncGetAttributes of one of them,
/// which fails (cudaErrorNoKernelImageForDevice / cudaErrorInvalidDeviceFunction) when the build has
/// neither machine code for the device's architecture nor PTX its driver can compile. On success
/// *binary_version / *ptx_version get the loaded image's (e.g. 90; 0 when it is not PTX-compiled).
/// The error is cleared (not sticky).
cudaError_t probe_device_code(int* binary_version, int* ptx_version);

}  // namespace flashdllm::kernels
