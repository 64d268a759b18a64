// Row buckets of kernels::GemmLt (gemm.h): which row counts T share one cuBLASLt algorithm. Host
// arithmetic without CUDA headers, so host-only code and tests can include it.
#pragma once

#include <cstdint>

namespace flashdllm::kernels {

/// How row counts share an algorithm (gemm.h's file comment): kPowerOfTwo, B = the next power of two
/// >= T; kQuarterOctave, B = the smallest of 5/8, 6/8, 7/8 and 8/8 of that power of two that is
/// >= T; kExact, B = T (a heuristic query per row count). B is at least 16 in every mode.
enum class GemmBuckets { kPowerOfTwo, kQuarterOctave, kExact };

/// The bucket's row count B of T rows (T >= 1) under `buckets`.
int64_t gemm_bucket_rows(int64_t T, GemmBuckets buckets) noexcept;

}  // namespace flashdllm::kernels
