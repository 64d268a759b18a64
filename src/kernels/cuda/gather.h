// Row gather: the embedding lookup and the gather_rows op (Backend::embedding / gather_rows); one
// element per row: gather_columns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// dst[r, :] = src[index[r], :] for r < n_out, rows of `row_bytes` bytes (any element type).
///   src   device, [src_rows, row_bytes] bytes;   index device I32 [n_out];   dst device [n_out, row_bytes].
/// An index outside [0, src_rows) sets `error_bit` in *error_flags (device int, may be null) and
/// fills that output row with 0xFF bytes (NaN for bf16/f32). Uses 16-byte accesses when
/// row_bytes and both pointers allow it. n_out == 0 is a no-op. Throws Error(kDevice) on launch
/// failure.
void gather_rows(const void* src, int64_t src_rows, int64_t row_bytes, const int32_t* index, int64_t n_out, void* dst,
                 int* error_flags, int error_bit, cudaStream_t stream);

/// out[r] = x[r·n_cols + cols[r]] for r < rows (Backend::gather_columns); a column outside [0, n_cols)
/// gives NaN.   x device F32 [rows, n_cols];   cols device I32 [rows];   out device F32 [rows].
/// rows == 0 is a no-op. Throws Error(kDevice) on launch failure.
void gather_columns_f32(const float* x, int64_t rows, int64_t n_cols, const int32_t* cols, float* out,
                        cudaStream_t stream);

}  // namespace flashdllm::kernels
