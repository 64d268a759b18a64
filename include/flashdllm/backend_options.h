// Backend options: how the compute backend runs (attention kernel and cuDNN route, GEMM algorithm choice, CUDA graphs,
// row padding, synchronisation, host staging), typed, carried unchanged from EngineOptions::backend
// to the backend that make_backend creates.
//
// Every field's default means "the policy decides": the choice per device and call shape is made by
// the small pure functions of src/backend/backend_policy.h (unit-tested without a GPU; the model is
// FlashAttention-3's hopper/heuristics.h). A value other than the default forces one route, for
// measurements and debugging. The CPU backend reads only row_padding.
//
// The command-line tools let FLASHDLLM_* environment variables override these defaults; they are
// read in one place, apps/cli/env_registry.cpp (`flashdllm env` lists them). The library itself
// never reads the environment.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace flashdllm {

/// The attention kernel of the CUDA backend's attention calls (FLASHDLLM_ATTENTION).
enum class AttentionKernel {
  kAuto,       ///< the policy (default_flash_choice / small_call_kernel)
  kReference,  ///< the scalar reference kernel for every call, the verify pass included (slow; any head_dim <= 256)
  kM64N64,     ///< mma.sync, 64 query rows x 64 keys per step (sm_80+)
  kWgmma128,   ///< Hopper wgmma, 128 x 128 (sm_90 builds with CUTLASS)
  kWgmma64,    ///< Hopper wgmma with one consumer warpgroup, 64 x 128
};
// Other tile shapes, measured and never picked by the policy, are not in the library: bench/kernels/.

/// Which attention tiles run in cuDNN's fused attention (FLASHDLLM_CUDNN_ATTENTION).
enum class CudnnAttention {
  kAuto,     ///< prefill tiles where cuDNN is available, quietly the backend's kernel where it is not
  kPrefill,  ///< tiles of >= 256 query rows (the admission prefills); an unavailable cuDNN is an error
  kAll,      ///< every tile of a planned attention call; an unavailable cuDNN is an error
  kOff,      ///< none
};

/// The row counts that share one cuBLASLt algorithm (FLASHDLLM_GEMM_BUCKETS).
enum class GemmBuckets {
  kPowerOfTwo,     ///< "pow2": the next power of two
  kQuarterOctave,  ///< "quarter": the next quarter octave (5/8, 6/8, 7/8, 1 of a power of two)
  kExact,          ///< "exact": every row count its own
};

/// Where the cuBLASLt algorithm picks come from (FLASHDLLM_GEMM_PICKS).
enum class GemmPicks {
  kBuiltin,  ///< the built-in table of this GPU, cuBLASLt version and bucket rule, if there is one
  kOff,      ///< none: the heuristic's first choice
  kFile,     ///< BackendOptions::gemm_picks_file
};

/// When the CUDA backend waits for the device (FLASHDLLM_CUDA_SYNC).
enum class SyncMode {
  kAsync,    ///< only at copy_to_host / synchronize
  kEveryOp,  ///< after every op, checking for errors (debugging: pins asynchronous faults to their op; no graphs)
};

struct BackendOptions {
  AttentionKernel attention = AttentionKernel::kAuto;
  CudnnAttention cudnn_attention = CudnnAttention::kAuto;
  /// Time cuBLASLt's first K heuristic algorithms per GEMM shape at run time and keep the fastest
  /// (K > 1 replaces row buckets and picks); 0 or 1: the heuristic's (or the picks') choice. [0, 16].
  int gemm_tune = 0;
  GemmBuckets gemm_buckets = GemmBuckets::kQuarterOctave;
  GemmPicks gemm_picks = GemmPicks::kBuiltin;
  std::string gemm_picks_file;  ///< the table file when gemm_picks is kFile (format: src/backend/cuda/gemm_picks.h)
  /// run_recorded captures and replays CUDA graphs (off: the layer loops run op by op).
  bool cuda_graphs = true;
  /// Pad forwards' query rows to multiples of 64 and logit rows to 16 (Backend::row_padding);
  /// nullopt: the backend's default (default_row_padding: on for CUDA, off for the CPU).
  std::optional<bool> row_padding;
  SyncMode sync = SyncMode::kAsync;
  /// Host copies of up to 4 MiB go through pinned staging buffers (off: pageable copies).
  bool pinned_staging = true;
  /// Block-FP8 weights take the dequantising route (bf16 GEMM on dequantised operands, what GPUs
  /// without cuBLASLt's block-scaled FP8 GEMM run) also where that GEMM exists (sm_90). Off by
  /// default: cuBLASLt's FP8 GEMM is the sm_90 route since its products were verified on an H100
  /// (the weight scales' padded row stride, bench/results/2026-12-07-fp8-route/); true is the
  /// fallback to compare against or to work around a cuBLASLt that misbehaves.
  bool fp8_dequantize = false;
};

/// Throws Error(kInvalidArgument) naming the field for gemm_tune outside [0, 16] or gemm_picks kFile
/// without a file.
void validate_backend_options(const BackendOptions& o);

// The names of the enum values (the FLASHDLLM_* variables' values and `flashdllm env`'s listing), and
// their inverses (nullopt for any other name).
const char* attention_kernel_name(AttentionKernel k) noexcept;  ///< "auto", "reference", "m64n64", ... "wgmma64"
std::optional<AttentionKernel> attention_kernel_from_name(std::string_view name) noexcept;
const char* cudnn_attention_name(CudnnAttention c) noexcept;  ///< "auto", "prefill", "all", "off"
std::optional<CudnnAttention> cudnn_attention_from_name(std::string_view name) noexcept;

/// "pow2", "quarter", "exact" (constexpr: the kernels' GEMM wrapper names its buckets with it too).
constexpr std::string_view gemm_buckets_name(GemmBuckets buckets) noexcept {
  switch (buckets) {
    case GemmBuckets::kPowerOfTwo: return "pow2";
    case GemmBuckets::kExact: return "exact";
    case GemmBuckets::kQuarterOctave: break;
  }
  return "quarter";
}
constexpr std::optional<GemmBuckets> gemm_buckets_from_name(std::string_view name) noexcept {
  for (GemmBuckets b : {GemmBuckets::kQuarterOctave, GemmBuckets::kPowerOfTwo, GemmBuckets::kExact})
    if (name == gemm_buckets_name(b)) return b;
  return std::nullopt;
}

}  // namespace flashdllm
