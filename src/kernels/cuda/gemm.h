// cuBLASLt GEMM for nn.Linear layers: out[T, N] = x[T, K] · w[N, K]ᵀ (+ out), bf16 inputs,
// fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32 output.
//
// Row-major out[T, N] is column-major outᵀ[N, T] = w · xᵀ, so cuBLASLt sees
//   A = w as column-major [K, N] (ld K) with op T, B = x as column-major [K, T] (ld K) with op N,
//   C = D = out as column-major [N, T] (ld N); m = N, n = T, k = K.
// accumulate = true sets beta = 1 with C = D: the residual add is fused into the epilogue.
// Descriptors and the chosen algorithm are cached per (shape, output type, beta, alignments), so
// a steady-state call is a hash lookup plus cublasLtMatmul. The algorithm is the heuristic's first
// (or a pick's candidate, below) for the row bucket of T (tune_candidates 0 or 1), or the fastest of the heuristic's
// first tune_candidates for exactly T rows, timed once on the call's own operands when the shape is first seen (one
// host synchronisation then; never afterwards).
//
// Row buckets: the heuristic is asked once per (bucket, N, K, output, beta, alignments), at the
// bucket's row count B (GemmBuckets; by default the smallest quarter octave >= T: 5/8, 6/8, 7/8 or
// 8/8 of the next power of two, at least 16), and its first algorithm (or the pick's) serves
// every T of the bucket that cuBLASLt accepts it for (cublasLtMatmulAlgoCheck; otherwise T gets its
// own query). A new row count then costs descriptors and a check instead of a heuristic query and,
// often, the lazy loading of another kernel (several ms on the H200: Flash-Cache's windows shrink
// at the canvas end and admissions add prefill rows, so T changes often). The choice is a function
// of T alone (never of the order shapes arrive in), and at T = B it is the heuristic's own (or the
// pick's).
// Power-of-two buckets (the earlier default) cost up to 1.8x the exact row count's heuristic choice
// between powers of two; quarter octaves are within noise of exact row counts at four queries per
// octave (bench/results/2026-12-03-h200-gemm-quarter-buckets/).
//
// Picks (set_picks): for a listed (bucket rows, N, K, output, beta) the bucket's algorithm is the
// heuristic's candidate-th instead of its first: measured once per GPU and cuBLASLt version by
// bench/gemm_bench --write-picks (the fastest of the first candidates where it beats the first by a
// margin), so the choice stays a function of the shape, unlike tune_candidates' timing at run time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/gemm_choice.h"

namespace flashdllm::kernels {

/// How the block scales of cuBLASLt's block-scaled FP8 GEMM (CUDA 12.9+, sm_90: A = the weight with
/// CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, B = the activations with VEC128_32F; both operands
/// K-major, scales multiply: value = e4m3 · scale) are laid out in memory; the caller prepares them
/// so (GemmLt::matmul_fp8 passes the pointers on).
/// Which cuBLASLt operand each factor of the block-scaled FP8 GEMM is: kWeightAsA (A = w with the
/// 128 x 128 scales, B = x with the 1 x 128 ones; out row-major [T, N]) or kActivationsAsA (A = x,
/// B = w, as NVIDIA's LtBlk128x128Fp8Matmul sample orders them; out is then outᵀ, row-major [N, T]).
enum class Fp8Roles { kWeightAsA, kActivationsAsA };

struct Fp8ScaleLayouts {
  /// false: the weight's scales as the checkpoint stores them, row-major [ceil(N/128), ceil(K/128)];
  /// true: transposed, row-major [ceil(K/128), ceil(N/128)].
  bool weight_transposed = false;
  /// true: the scale of token t and K group g at g·ld + t, ld = T rounded up to act_ld_align;
  /// false: at t·ceil(K/128) + g.
  bool act_outer_major = true;
  int act_ld_align = 1;
  Fp8Roles roles = Fp8Roles::kWeightAsA;  ///< the operand roles these layouts were established with
  /// The weight's scale rows (not transposed) start every ld floats, ld = ceil(K/128) rounded up to
  /// weight_ld_align. cuBLASLt reads the 128 x 128 block scales with that row stride rounded up to 4
  /// (PyTorch's _scaled_mm checks the same stride for its cuBLAS block-wise route): on an H100 the
  /// products were wrong for ceil(K/128) = 2 and 3 with the stored stride and right for 4, 32 and
  /// 96 (bench/results/2026-12-07-moe-model/). Real checkpoints' K (4096, 12288, 3584, 18944, 2048,
  /// 1024) give multiples of 4; the small models' 256 and 768 do not.
  int weight_ld_align = 1;
};

/// The row counts matmul_fp8 takes: T rounded up to a multiple of 16. On an H100 with cuBLASLt 13.1
/// the block-scaled FP8 GEMMs had algorithms at 8, 16, 32, 40, 48, 64, 128 and 256 rows and none at
/// 37, in either operand order and with a padded output (tools/diag/cublaslt_fp8_probe.cu,
/// bench/results/2026-12-07-fp8-gemm/); the caller pads the activations with zero rows.
constexpr int64_t fp8_padded_rows(int64_t T) { return (T + 15) / 16 * 16; }

/// The layouts cuBLASLt reads, as the GPU test (tests/kernels/test_cuda_fp8.cpp, ScaleLayoutProbe)
/// establishes against the CPU oracle among the candidates Fp8ScaleLayouts describes.
inline constexpr Fp8ScaleLayouts kCublasFp8Scales{false, true, 4, Fp8Roles::kWeightAsA, 4};

class GemmLt {
 public:
  /// Creates the cuBLASLt handle and a device workspace of `workspace_bytes` on the current device;
  /// tune_candidates in [0, 16], `buckets` for tune_candidates 0 or 1 (see the file comment).
  /// Throws Error(kDevice) / Error(kOutOfMemory), Error(kInvalidArgument) for tune_candidates
  /// outside [0, 16].
  explicit GemmLt(size_t workspace_bytes = kGemmWorkspaceBytes, int tune_candidates = 0,
                  GemmBuckets buckets = GemmBuckets::kQuarterOctave);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  /// out[T, N] (dtype `out_type`) = x[T, K] · w[N, K]ᵀ (+ out when accumulate), all device,
  /// row-major and contiguous. out must not overlap x or w. T, N, K > 0 (T == 0 is a no-op).
  /// Throws Error(kInvalidArgument) for non-positive sizes, Error(kUnsupported) when cuBLASLt
  /// offers no algorithm, Error(kDevice) when a call fails. Not thread-safe (one per stream user).
  void matmul(const __nv_bfloat16* x, const __nv_bfloat16* w, void* out, GemmOut out_type, int64_t T, int64_t N,
              int64_t K, bool accumulate, cudaStream_t stream);

  /// The block-FP8 linear layer's product (Backend::matmul_fp8 after the activation quantisation):
  ///   out[t, n] (+)= Σ_k (xq[t, k] · x_scales(t, k / 128)) · (w[n, k] · w_scales(n / 128, k / 128))
  /// with e4m3 xq [T, K] and w [N, K] (row-major bytes), F32 scales laid out as kCublasFp8Scales, fp32 accumulation,
  /// bf16 or fp32 out (row-major [T, N]; with roles kActivationsAsA outᵀ, row-major [N, T]); T a multiple
  /// of 16 (fp8_padded_rows). Returns false, having done
  /// nothing, when cuBLASLt offers no algorithm for it (a GPU other than sm_90, a cuBLASLt before 12.9, an unsupported
  /// shape or output): the caller takes the dequantising route. The answer is cached per shape. Throws
  /// Error(kInvalidArgument) for non-positive sizes or T not a multiple of 16, Error(kDevice) when a call fails.
  bool matmul_fp8(const uint8_t* xq, const float* x_scales, const uint8_t* w, const float* w_scales, void* out,
                  GemmOut out_type, int64_t T, int64_t N, int64_t K, bool accumulate, cudaStream_t stream,
                  Fp8Roles roles = Fp8Roles::kWeightAsA);

  /// Replaces the fixed picks (see the file comment) and forgets every cached plan and bucket
  /// algorithm, so the next calls choose again. A pick whose candidate the heuristic does not list
  /// for its shape falls back to the first; picks apply to 16-byte-aligned operands only, and not at
  /// all with tune_candidates > 1. Throws Error(kInvalidArgument) for a pick with
  /// non-positive sizes, rows that are not a row count of this GemmLt's buckets, a candidate outside
  /// [0, kMaxGemmCandidates), or two picks for one shape.
  void set_picks(const std::vector<GemmPick>& picks);

  /// cublasLtGetVersion() of the loaded cuBLASLt (pick tables are measured per version).
  static int64_t library_version() noexcept;

  /// Number of distinct cached GEMM plans (for tests and logs).
  size_t cached_plans() const noexcept;
  /// cuBLASLt heuristic queries made so far (one per row bucket and shape; tests and logs).
  size_t heuristic_queries() const noexcept;
  /// What the plan of the last matmul call chose: its index in the heuristic's list (0 = the
  /// heuristic's first; a pick's candidate when one served it) and the candidates that were timed
  /// (0 without tuning).
  struct Choice {
    int index = 0, candidates = 0;
  };
  Choice last_choice() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashdllm::kernels
