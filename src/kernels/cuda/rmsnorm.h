// RMSNorm in the reference cast order (reference-algorithms §A.3, upstream modeling_llada.py):
//   y = bf16( x_fp32 * 1/sqrt(mean(x_fp32^2) + eps) );  out = bf16( float(y) * float(w) )
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// x, out: device bf16 [rows, cols] (out may alias x); w: device bf16 [cols]; eps > 0.
/// Sum of squares in fp32 (block reduction), one block per row; rows of cols % 8 == 0 up to 8192
/// columns with 16-byte-aligned x, w and out are read once in 16-byte loads. rows == 0 is a no-op.
/// Throws Error(kDevice) on launch failure.
void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t rows, int64_t cols, float eps,
                  __nv_bfloat16* out, cudaStream_t stream);

}  // namespace flashdllm::kernels
