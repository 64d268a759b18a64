// Data-dependent input errors detected inside kernels.
//
// Some preconditions can only be checked on the device without a host sync (token ids, row
// indices, positions, attention tiles). Kernels that find a violation set a bit in a device-side
// int flag word (atomicOr), leave the affected output poisoned (NaN) or untouched, and carry on.
// The CUDA backend reads the word at its synchronising calls (synchronize, copy_to_host) and
// throws Error(kInvalidArgument) naming the ops (describe_kernel_errors).
#pragma once

#include <string>

namespace flashdllm::kernels {

enum KernelErrorBit : int {
  kErrEmbeddingId = 1 << 0,    ///< embedding: a token id outside [0, vocab rows)
  kErrGatherRow = 1 << 1,      ///< gather_rows: a row index outside [0, rows of x)
  kErrRopePosition = 1 << 2,   ///< qkv_rope_store: a position outside [0, rope table rows)
  kErrStoreRow = 1 << 3,       ///< qkv_rope_store: a K/V store row outside [0, store rows)
  kErrAttentionTile = 1 << 4,  ///< attention: a tile outside the q / K/V row ranges, or with keys empty
  kErrAttentionWork = 1 << 5,  ///< attention: tiles overlap so much that the work list overflowed
  kErrMoeExpert = 1 << 6,      ///< moe_experts: an expert id outside [0, n_experts)
};

/// Human-readable list of the errors whose bits are set in `flags` ("" when flags == 0).
std::string describe_kernel_errors(int flags);

}  // namespace flashdllm::kernels
