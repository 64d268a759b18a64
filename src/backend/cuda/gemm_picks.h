// Tables of fixed cuBLASLt algorithm picks (kernels::GemmPick, kernels/cuda/gemm_choice.h) for the
// CUDA backend's GemmLt: which of the heuristic's candidates serves each GEMM shape and row bucket,
// measured on one GPU model with one cuBLASLt version by `bench/gemm_bench --write-picks FILE`.
// Host code without CUDA: built in every configuration (the stub backend too), so the parser of this
// user-supplied file is also tested under the sanitizers.
//
// File format (JSON object; every field required; a key given twice is an error):
//   "device":           the GPU's name as cudaGetDeviceProperties reports it, e.g. "NVIDIA H200"
//   "sm_count":         its multiprocessor count (a MIG slice or a cut-down part of the same name
//                       differs here)
//   "cublaslt_version": cublasLtGetVersion() of the library that was measured (integer)
//   "workspace_bytes":  the cuBLASLt workspace the picks were measured with (the heuristic's list
//                       depends on it)
//   "buckets":          "quarter" | "pow2" | "exact" (kernels::GemmBuckets the rows are buckets of)
//   "picks":            array of {"rows", "N", "K": positive integers, "out": "BF16" | "F32",
//                       "accumulate": bool, "candidate": integer in [0, 16)}; other fields (e.g. the
//                       measured "speedup") are kept for readers and ignored here
// Tables measured on this project's GPUs are built into the binary (gemm_picks/*.json); the backend
// applies the one whose target equals the running one (resolve_gemm_picks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "flashdllm/backend_options.h"
#include "kernels/cuda/gemm_choice.h"

namespace flashdllm {

/// What a table was measured on, and what the running backend is: all must match.
struct GemmPickTarget {
  std::string device;
  int64_t sm_count = 0;
  int64_t cublaslt_version = 0;
  int64_t workspace_bytes = 0;
  kernels::GemmBuckets buckets = kernels::GemmBuckets::kQuarterOctave;
  bool operator==(const GemmPickTarget& o) const {  // (not defaulted: nvcc 13 compiles this header)
    return device == o.device && sm_count == o.sm_count && cublaslt_version == o.cublaslt_version &&
           workspace_bytes == o.workspace_bytes && buckets == o.buckets;
  }
};

struct GemmPickTable {
  GemmPickTarget target;
  std::vector<kernels::GemmPick> picks;
};

/// The table in `j` (the format above); `what` names its source in messages. Throws
/// Error(kInvalidArgument) "<what>: <field>: ..." for a missing or mistyped field, a value out of
/// range, rows that are not a row count of the table's buckets, or two picks for one shape.
GemmPickTable parse_gemm_pick_table(const nlohmann::json& j, const std::string& what);

/// Reads and parses the table file `path`. Throws Error(kIo) when it cannot be read (not a regular
/// file included), Error(kInvalidArgument) for invalid JSON, a duplicate key, or as
/// parse_gemm_pick_table.
GemmPickTable read_gemm_pick_table(const std::string& path);

/// The built-in tables (gemm_picks/*.json), parsed. Throws Error(kInvalidArgument) naming the file
/// for an invalid one or for two with the same target (a build error in effect: tests parse them).
std::vector<GemmPickTable> builtin_gemm_pick_tables();

/// The picks the backend applies (their source is logged at info level), BackendOptions::gemm_picks:
/// kBuiltin = the built-in table whose target equals `running` if there is one (else none); kOff =
/// none; kFile = the table `file`, whose target must equal `running` (Error(kInvalidArgument) naming
/// the file, as FLASHDLLM_GEMM_PICKS=<file>, and the first field that differs otherwise; an empty
/// `file` is Error(kInvalidArgument) too).
std::vector<kernels::GemmPick> resolve_gemm_picks(GemmPicks source, const std::string& file,
                                                  const GemmPickTarget& running);

}  // namespace flashdllm
