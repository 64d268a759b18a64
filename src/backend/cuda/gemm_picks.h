// Tables of fixed cuBLASLt algorithm picks (kernels::GemmPick, kernels/cuda/gemm_choice.h) for the
// CUDA backend's GemmLt: which of the heuristic's candidates serves each GEMM shape and row bucket,
// measured on one GPU model with one cuBLASLt version by `bench/gemm_bench --write-picks FILE`.
//
// File format (JSON object; every field required):
//   "device":           the GPU's name as cudaGetDeviceProperties reports it, e.g. "NVIDIA H200"
//   "cublaslt_version": cublasLtGetVersion() of the library that was measured (integer)
//   "buckets":          "quarter" | "pow2" | "exact" (kernels::GemmBuckets the rows are buckets of)
//   "picks":            array of {"rows", "N", "K": positive integers, "out": "BF16" | "F32",
//                       "accumulate": bool, "candidate": integer in [0, 16)}; other fields (e.g. the
//                       measured "speedup") are kept for readers and ignored here
// Tables measured on this project's GPUs are built into the binary (gemm_picks/*.json); the backend
// applies the one whose device, version and buckets match the running ones (resolve_gemm_picks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/cuda/gemm_choice.h"

namespace flashdllm {

struct GemmPickTable {
  std::string device;
  int64_t cublaslt_version = 0;
  kernels::GemmBuckets buckets = kernels::GemmBuckets::kQuarterOctave;
  std::vector<kernels::GemmPick> picks;
};

/// The table in `j` (the format above); `what` names its source in messages. Throws
/// Error(kInvalidArgument) "<what>: <field>: ..." for a missing or mistyped field, a value out of
/// range, rows that are not a row count of the table's buckets, or two picks for one shape.
GemmPickTable parse_gemm_pick_table(const nlohmann::json& j, const std::string& what);

/// Reads and parses the table file `path`. Throws Error(kIo) when it cannot be read (not a regular
/// file included), Error(kInvalidArgument) for invalid JSON or as parse_gemm_pick_table.
GemmPickTable read_gemm_pick_table(const std::string& path);

/// The built-in tables (gemm_picks/*.json), parsed. Throws as parse_gemm_pick_table for an invalid
/// one (a build error in effect: tests parse them all).
std::vector<GemmPickTable> builtin_gemm_pick_tables();

/// The picks the backend applies (their source is logged at info level). `env` is
/// FLASHDLLM_GEMM_PICKS: unset/empty = the built-in table of this device, cuBLASLt version and
/// bucket rule if there is one (else none); "off" = none; anything else = that file, which must
/// match device, cublaslt_version and buckets (Error(kInvalidArgument) naming the file and the
/// field otherwise).
std::vector<kernels::GemmPick> resolve_gemm_picks(const char* env, const std::string& device, int64_t cublaslt_version,
                                                  kernels::GemmBuckets buckets);

/// "quarter" / "pow2" / "exact".
const char* gemm_buckets_name(kernels::GemmBuckets buckets) noexcept;

}  // namespace flashdllm
