// The CPU backend's FP8 ops: Backend::matmul_fp8 (block-FP8 weights, W8A8 with fp32 accumulation;
// the oracle of the FP8 GEMM kernels) and the FP8 K/V rounding of qkv_rope_store (QkvExtras::kv_scale).
// The arithmetic is core/fp8.h's. Internal to the CPU backend.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/fp8.h"

namespace flashdllm::cpu {

/// Backend::matmul_fp8 on host tensors with `threads` OpenMP threads: W dequantised to fp32
/// (dequantize_fp8_blocks), x quantised per token in 1 x 128 groups (fake_quantize_fp8_groups), one
/// OpenBLAS SGEMM of the two.
void matmul_fp8(int threads, Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate);

/// The rows of an FP8 K/V cache: each of the `heads` head vectors of `row` ([heads · Dh]) rounded in
/// place as e4m3_round(value, scale[h]).
inline void fp8_round_heads(float* row, int64_t heads, int64_t Dh, const float* scale) noexcept {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < Dh; ++i) row[h * Dh + i] = e4m3_round(row[h * Dh + i], scale[h]);
}

}  // namespace flashdllm::cpu
