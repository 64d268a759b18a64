// The Hopper (wgmma) flash attention kernel behind FlashVariant::kWgmma128 and kWgmma64
// (attention.h).
// Internal to the attention kernels: callers go through attention_flash().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace flashdllm::kernels {

/// Runs the wgmma kernel with 128 keys per tile and `consumers` (1 or 2) warpgroups of 64 query rows
/// per CTA over work items of at most 64·consumers query rows (attention_plan with that block_m):
/// consumers 2 is wgmma128 (two K and two V stages), 1 is wgmma64 (three of each). Only in builds
/// with FLASHDLLM_HAVE_WGMMA (sm_90a code); the caller checks the device (compute capability 9.0) and
/// the arguments (attention_flash). Encodes three TMA maps (q, k, v) per call on the host (no device
/// call). Throws Error(kDevice) on launch failure, Error(kInvalidArgument) when the driver rejects a
/// map, Error(kUnsupported) when the driver lacks cuTensorMapEncodeTiled.
void attention_wgmma(const AttentionArgs& args, int consumers, const AttentionWorkItem* work, const int32_t* work_count,
                     int64_t capacity, cudaStream_t stream);

}  // namespace flashdllm::kernels
