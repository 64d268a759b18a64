// TMA bulk L2 prefetch of weight rows (l2_prefetch.h), on CuTe's SM90_BULK_COPY_G2S::PREFETCH atom.
#include "kernels/cuda/l2_prefetch_sm90.h"

#include <cute/arch/copy_sm90_tma.hpp>

#include <algorithm>

#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 32;  // a few SMs issue; the memory system does the rest

__global__ void __launch_bounds__(kThreads)
    l2_prefetch_kernel(const char* base, int64_t row_stride, int64_t bytes_per_row, int64_t piece_bytes,
                       int64_t pieces_per_row, int64_t pieces) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < pieces; i += int64_t{gridDim.x} * kThreads) {
    const int64_t row = i / pieces_per_row, off = (i % pieces_per_row) * piece_bytes;
    const auto bytes = static_cast<int32_t>(std::min(piece_bytes, bytes_per_row - off));
    cute::SM90_BULK_COPY_G2S::PREFETCH::copy(base + row * row_stride + off, bytes);
  }
}

}  // namespace

void l2_prefetch_sm90(const void* base, int64_t row_stride, int64_t bytes_per_row, int64_t piece_bytes,
                      int64_t pieces_per_row, int64_t pieces, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(std::min(kMaxBlocks, (pieces + kThreads - 1) / kThreads));
  l2_prefetch_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const char*>(base), row_stride, bytes_per_row,
                                                      piece_bytes, pieces_per_row, pieces);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
