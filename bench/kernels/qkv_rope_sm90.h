// The sm_90 kernel behind qkv_rope_store_fused_bf16 (qkv_rope_fused.h). Internal to the kernels:
// callers go through qkv_rope_store_fused_bf16, which checks the device and the operands.
#pragma once

#include <cuda_runtime.h>

#include "bench/kernels/qkv_rope_fused.h"

namespace flashdllm::kernels {

/// Launches the CUTLASS GEMM with the RoPE/store epilogue in `config` (tile not kAuto). Only in builds
/// with FLASHDLLM_HAVE_QKV_SM90. Throws Error(kUnsupported) when CUTLASS refuses the shape,
/// Error(kDevice) on launch failure.
void qkv_rope_store_sm90(const FusedQkvArgs& args, const QkvConfig& config, cudaStream_t stream);

/// The main loop's pipeline stages of `tile`'s kernel (0 for kAuto).
int qkv_rope_sm90_stages(QkvTile tile) noexcept;

}  // namespace flashdllm::kernels
