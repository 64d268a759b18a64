// l2_prefetch_rows (l2_prefetch.h): argument and device checks; the kernel is l2_prefetch_sm90.cu.
#include "kernels/cuda/l2_prefetch.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/l2_prefetch_sm90.h"

#ifndef FLASHDLLM_HAVE_L2_PREFETCH
#define FLASHDLLM_HAVE_L2_PREFETCH 0
#endif

namespace flashdllm::kernels {

bool l2_prefetch_available() {
  if (!FLASHDLLM_HAVE_L2_PREFETCH) return false;
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major == 9;
}

void l2_prefetch_rows(const void* base, int64_t rows, int64_t row_stride, int64_t bytes_per_row, cudaStream_t stream) {
  FDLLM_CHECK_ARG(rows >= 0 && row_stride > 0 && row_stride % 16 == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0,
                  "l2_prefetch_rows: base {} and row stride {} must be multiples of 16 bytes (rows {})", base,
                  row_stride, rows);
  const int64_t per_row = std::min(bytes_per_row, row_stride) / 16 * 16;
  if (rows == 0 || per_row <= 0) return;
  FDLLM_CHECK(FLASHDLLM_HAVE_L2_PREFETCH, ErrorCode::kUnsupported,
              "l2_prefetch_rows: this build has no sm_90 prefetch kernel (needs CUTLASS and sm_90 among the archs)");
  constexpr int64_t kPiece = int64_t{64} << 10;
  // Whole contiguous rows are one range; otherwise each row's first per_row bytes.
  const bool whole = per_row == row_stride;
  const int64_t range = whole ? rows * row_stride : per_row, n_rows = whole ? 1 : rows;
  const int64_t pieces_per_row = (range + kPiece - 1) / kPiece;
#if FLASHDLLM_HAVE_L2_PREFETCH
  l2_prefetch_sm90(base, whole ? range : row_stride, range, kPiece, pieces_per_row, n_rows * pieces_per_row, stream);
#else
  (void)stream;
  (void)pieces_per_row;
  (void)n_rows;
#endif
}

}  // namespace flashdllm::kernels
