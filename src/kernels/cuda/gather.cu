#include "kernels/cuda/gather.h"

#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {
namespace {

// One block per output row; Word = the access unit (uint4 = 16 bytes, or single bytes).
template <class Word>
__global__ void gather_rows_kernel(const Word* __restrict__ src, int64_t src_rows, int64_t row_words,
                                   const int32_t* __restrict__ index, Word* __restrict__ dst, int* error_flags,
                                   int error_bit) {
  const int64_t r = blockIdx.x;
  const int32_t s = index[r];
  Word* out = dst + r * row_words;
  if (s < 0 || s >= src_rows) {
    Word poison;
    memset(&poison, 0xff, sizeof(Word));
    for (int64_t i = threadIdx.x; i < row_words; i += blockDim.x) out[i] = poison;
    if (threadIdx.x == 0 && error_flags) atomicOr(error_flags, error_bit);
    return;
  }
  const Word* in = src + static_cast<int64_t>(s) * row_words;
  for (int64_t i = threadIdx.x; i < row_words; i += blockDim.x) out[i] = in[i];
}

// One thread per row.
__global__ void gather_columns_kernel(const float* __restrict__ x, int64_t rows, int64_t n_cols,
                                      const int32_t* __restrict__ cols, float* __restrict__ out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int32_t c = cols[r];
  out[r] = c >= 0 && c < n_cols ? x[r * n_cols + c] : __int_as_float(0x7fc00000);
}

}  // namespace

void gather_columns_f32(const float* x, int64_t rows, int64_t n_cols, const int32_t* cols, float* out,
                        cudaStream_t stream) {
  if (rows <= 0) return;
  constexpr int kThreads = 128;
  const int64_t blocks = (rows + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) cuda::throw_invalid_argument("gather_columns: too many rows");
  gather_columns_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, rows, n_cols, cols, out);
  CUDA_CHECK_LAUNCH();
}

void gather_rows(const void* src, int64_t src_rows, int64_t row_bytes, const int32_t* index, int64_t n_out, void* dst,
                 int* error_flags, int error_bit, cudaStream_t stream) {
  if (n_out <= 0 || row_bytes <= 0) return;
  if (n_out > 0x7fffffff) cuda::throw_invalid_argument("gather_rows: more than 2^31-1 output rows");
  const bool vec16 = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(n_out));
  if (vec16) {
    const int64_t words = row_bytes / 16;
    const int threads = words >= 256 ? 256 : static_cast<int>((words + 31) / 32 * 32);
    gather_rows_kernel<uint4><<<grid, threads, 0, stream>>>(static_cast<const uint4*>(src), src_rows, words, index,
                                                             static_cast<uint4*>(dst), error_flags, error_bit);
  } else {
    const int threads = row_bytes >= 256 ? 256 : static_cast<int>((row_bytes + 31) / 32 * 32);
    gather_rows_kernel<unsigned char><<<grid, threads, 0, stream>>>(static_cast<const unsigned char*>(src), src_rows,
                                                                    row_bytes, index, static_cast<unsigned char*>(dst),
                                                                    error_flags, error_bit);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
