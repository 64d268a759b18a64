// How kernels::GemmLt (gemm.h) chooses its cuBLASLt algorithms: row buckets (which row counts share
// one heuristic query) and fixed picks among the heuristic's candidates. Host-only vocabulary
// without CUDA headers, so host code, table parsers and their tests can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "flashdllm/backend_options.h"

namespace flashdllm::kernels {

/// Output element type of a GEMM: bf16 or fp32.
enum class GemmOut { kBF16, kF32 };

/// How row counts share an algorithm (gemm.h's file comment): kPowerOfTwo, B = the next power of two
/// >= T; kQuarterOctave, B = the smallest of 5/8, 6/8, 7/8 and 8/8 of that power of two that is
/// >= T; kExact, B = T (a heuristic query per row count). B is at least 16 in every mode. The enum
/// and its names ("quarter" / "pow2" / "exact", gemm_buckets_name / gemm_buckets_from_name) are
/// BackendOptions' (flashdllm/backend_options.h), the one owner.
using GemmBuckets = ::flashdllm::GemmBuckets;
using ::flashdllm::gemm_buckets_from_name;
using ::flashdllm::gemm_buckets_name;

/// The bucket's row count B of T rows (T >= 1) under `buckets`. Row counts beyond 2^62 (no GEMM
/// has them) share the bucket 2^62.
constexpr int64_t gemm_bucket_rows(int64_t T, GemmBuckets buckets) noexcept {
  if (buckets == GemmBuckets::kExact) return T > 16 ? T : 16;
  int64_t b = 16;
  while (b < T && b < (int64_t{1} << 62)) b <<= 1;
  if (buckets == GemmBuckets::kQuarterOctave && b > 16)
    for (int64_t q = 5; q < 8; ++q)
      if (b / 8 * q >= T) return b / 8 * q;
  return b;
}

/// The cuBLASLt workspace of the engine's GemmLt (and of the pick measurements: the heuristic's list
/// depends on it).
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

/// A fixed algorithm for one GEMM shape at one row bucket: the `candidate`-th algorithm cuBLASLt's
/// heuristic lists for out[rows, N] = x[rows, K] · w[N, K]ᵀ (0 = its first, what GemmLt uses
/// without a pick). `rows` is a bucket's row count (gemm_bucket_rows(rows) == rows); the pick then
/// serves every row count of that bucket. Picks are measured per GPU and cuBLASLt version
/// (bench/gemm_bench --write-picks) on 16-byte-aligned operands and apply to those only; they are a
/// function of the shape alone, so reruns stay bitwise identical.
struct GemmPick {
  int64_t rows = 0, N = 0, K = 0;
  GemmOut out = GemmOut::kBF16;
  bool accumulate = false;
  int candidate = 0;  ///< in [0, kMaxGemmCandidates)
};

/// The most heuristic candidates GemmLt asks for (tuning and picks).
inline constexpr int kMaxGemmCandidates = 16;

}  // namespace flashdllm::kernels
