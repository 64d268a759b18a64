// Element-type conversion to bf16 on the device (weights are converted at load, issue 4).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace flashdllm::kernels {

/// dst[i] = bf16(src[i]) for i < n, round to nearest even (F16 goes through its exact fp32 value,
/// as PyTorch's .to(torch.bfloat16)). `src` is device memory of dtype `src_dtype` (F32, F16 or
/// BF16; BF16 is copied). Throws Error(kInvalidArgument) for other dtypes, Error(kDevice) on
/// launch failure. n == 0 is a no-op.
void convert_to_bf16(DType src_dtype, const void* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream);

}  // namespace flashdllm::kernels
