// Device helpers shared by the attention plan / flash / reference kernels (.cu files only).
#pragma once

#include <cstdint>

namespace flashdllm::kernels::detail {

/// A block-table row is valid when 0 <= q_start <= q_end <= q_rows, 0 <= k_start <= k_end <=
/// kv_rows and a non-empty query range has a non-empty key range (softmax over no keys is undefined).
__device__ __forceinline__ bool attention_tile_valid(int32_t qs, int32_t qe, int32_t ks, int32_t ke, int64_t q_rows,
                                                     int64_t kv_rows) {
  if (qs < 0 || qs > qe || qe > q_rows) return false;
  if (ks < 0 || ks > ke || ke > kv_rows) return false;
  return qe == qs || ke > ks;
}

}  // namespace flashdllm::kernels::detail
