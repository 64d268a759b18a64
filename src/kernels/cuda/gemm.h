// cuBLASLt GEMM for nn.Linear layers: out[T, N] = x[T, K] · w[N, K]ᵀ (+ out), bf16 inputs,
// fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32 output.
//
// Row-major out[T, N] is column-major outᵀ[N, T] = w · xᵀ, so cuBLASLt sees
//   A = w as column-major [K, N] (ld K) with op T, B = x as column-major [K, T] (ld K) with op N,
//   C = D = out as column-major [N, T] (ld N); m = N, n = T, k = K.
// accumulate = true sets beta = 1 with C = D: the residual add is fused into the epilogue.
// Descriptors and the chosen algorithm are cached per (shape, output type, beta, alignments), so
// a steady-state call is a hash lookup plus cublasLtMatmul. The algorithm is the heuristic's first
// (tune_candidates 0), or the fastest of its first tune_candidates, timed once on the call's own
// operands when the shape is first seen (one host synchronisation then; never afterwards).
//
// Split-K for few rows (weight streaming): with T <= 256 rows the output has few 128 x 128 tiles
// (attn_out and the down projection at one Flash-Cache slot, T = 128: 32 tiles on 132 SMs), so one
// GEMM reads the weights with a quarter of the SMs. Then the K dimension is split S ways (2, 4 or 8:
// the most that keeps the tiles x S CTAs within one wave, K a multiple of 64·S): cuBLASLt runs the S
// GEMMs over K / S as one strided batch into F32 partials [S, T, N] (a buffer of 16 MiB allocated with
// the GemmLt, so the split only runs where S·T·N·4 bytes fit), and splitk_reduce sums them in fp32
// (+ out when accumulating) and rounds once. The result differs from the unsplit GEMM only by the
// fp32 summation order. split_k: -1 auto (the rule above), 0 or 1 off, S >= 2 always S where valid.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace flashdllm::kernels {

enum class GemmOut { kBF16, kF32 };

class GemmLt {
 public:
  /// Creates the cuBLASLt handle, a device workspace of `workspace_bytes` and (split_k != 0, 1) the
  /// split-K partials on the current device; tune_candidates in [0, 16], split_k -1 or in [0, 16] (see
  /// the file comment). Throws Error(kDevice) / Error(kOutOfMemory), Error(kInvalidArgument) for
  /// tune_candidates or split_k out of range.
  explicit GemmLt(size_t workspace_bytes = size_t{32} << 20, int tune_candidates = 0, int split_k = -1);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  /// out[T, N] (dtype `out_type`) = x[T, K] · w[N, K]ᵀ (+ out when accumulate), all device,
  /// row-major and contiguous. out must not overlap x or w. T, N, K > 0 (T == 0 is a no-op).
  /// Throws Error(kInvalidArgument) for non-positive sizes, Error(kUnsupported) when cuBLASLt
  /// offers no algorithm, Error(kDevice) when a call fails. Not thread-safe (one per stream user).
  void matmul(const __nv_bfloat16* x, const __nv_bfloat16* w, void* out, GemmOut out_type, int64_t T, int64_t N,
              int64_t K, bool accumulate, cudaStream_t stream);

  /// Number of distinct cached GEMM plans (for tests and logs).
  size_t cached_plans() const noexcept;
  /// What the plan of the last matmul call chose: its index in the heuristic's list (0 = the
  /// heuristic's first) and the candidates that were timed (0 without tuning).
  struct Choice {
    int index = 0, candidates = 0;
    int splits = 1;  ///< K-splits of the call (1: one GEMM)
  };
  Choice last_choice() const noexcept;
  /// The K-splits matmul uses for out[T, N] = x[T, K]·w[N, K]ᵀ on this GemmLt (1: one GEMM).
  int splits_for(int64_t T, int64_t N, int64_t K) const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashdllm::kernels
