// L2 prefetch of GEMM weights (issue 13, item 4: one slot toward the weight-read floor).
//
// At a few slots every GEMM streams its weight matrix from DRAM once per forward, and the kernels
// between two GEMMs (norms, RoPE, attention, SwiGLU) leave most of the DRAM bandwidth idle. A
// prefetch issued on a side stream when the previous GEMM ends (CUDA backend,
// Backend::prefetch_matmul_weight) streams the first bytes of every row of the next GEMM's weight
// into L2 during those kernels, so the GEMM finds them there. Rows are prefetched from their start
// because a GEMM's CTAs walk their weight rows along K from k = 0 together: the first fraction of
// every row is what all of them read first.
//
// The kernel issues TMA bulk prefetches (cp.async.bulk.prefetch.L2, CuTe's SM90_BULK_COPY_G2S::
// PREFETCH: sm_90, fire-and-forget, no completion to wait for) and ends as soon as they are issued;
// it reads nothing into registers or shared memory and writes nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// True when this build has the prefetch kernel (CUTLASS headers and sm_90 among the CUDA archs,
/// FLASHDLLM_HAVE_L2_PREFETCH) and the current device is sm_90 (TMA bulk prefetch).
bool l2_prefetch_available();

/// Prefetches into L2 the first `bytes_per_row` bytes of each of `rows` rows of a device matrix
/// starting at `base`, rows `row_stride` bytes apart (a row-major bf16 weight [N, K]: rows = N,
/// row_stride = 2·K). bytes_per_row is rounded down to a multiple of 16 (the bulk unit) and capped
/// at row_stride; whole contiguous rows are issued as 64 KiB pieces. A hint: it changes no memory
/// and orders nothing. Requirements: base and row_stride multiples of 16 (else Error
/// kInvalidArgument), rows >= 0 (0 or bytes_per_row < 16 is a no-op), l2_prefetch_available()
/// (else Error kUnsupported). Throws Error(kDevice) on launch failure.
void l2_prefetch_rows(const void* base, int64_t rows, int64_t row_stride, int64_t bytes_per_row, cudaStream_t stream);

}  // namespace flashdllm::kernels
