// The sm_90 kernel behind l2_prefetch_rows (l2_prefetch.h). Internal to the kernels: callers go
// through l2_prefetch_rows, which checks the device and the arguments.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Launches the bulk-prefetch kernel: `pieces` prefetches, piece i of row r = i / pieces_per_row
/// covering [base + r·row_stride + (i % pieces_per_row)·piece_bytes, + piece_bytes) clipped to
/// bytes_per_row. All sizes multiples of 16, pieces >= 1. Only in builds with
/// FLASHDLLM_HAVE_L2_PREFETCH. Throws Error(kDevice) on launch failure.
void l2_prefetch_sm90(const void* base, int64_t row_stride, int64_t bytes_per_row, int64_t piece_bytes,
                      int64_t pieces_per_row, int64_t pieces, cudaStream_t stream);

}  // namespace flashdllm::kernels
