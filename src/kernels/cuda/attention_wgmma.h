// The Hopper (wgmma) flash attention kernel behind FlashVariant::kWgmmaM128N64, kWgmmaM128N128 and
// kWgmmaM64N128 (attention.h).
// Internal to the attention kernels: callers go through attention_flash().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace flashdllm::kernels {

/// Runs the wgmma kernel with block_n (64: six K/V stages; 128: three) keys per tile and `consumers`
/// warpgroups of 64 query rows per CTA over work items of at most 64·consumers query rows
/// (attention_plan with that block_m). consumers 2: block_n 64 or 128; consumers 1: block_n 128. Only in builds with
/// FLASHDLLM_HAVE_WGMMA (sm_90a code); the caller checks the device (compute capability 9.0) and the arguments
/// (attention_flash). Encodes three TMA maps (q, k, v) per call on the host (no device call). Throws Error(kDevice) on
/// launch failure, Error(kInvalidArgument) when the driver rejects a map, Error(kUnsupported) when the driver lacks
/// cuTensorMapEncodeTiled.
void attention_wgmma(const AttentionArgs& args, int block_n, int consumers, const AttentionWorkItem* work,
                     const int32_t* work_count, int64_t capacity, cudaStream_t stream);

}  // namespace flashdllm::kernels
