#include "kernels/cuda/cuda_check.h"

#include <cublasLt.h>

#include "core/check.h"

namespace flashdllm::cuda {

void throw_invalid_argument(const std::string& message) { throw_error(ErrorCode::kInvalidArgument, message); }
void throw_unsupported(const std::string& message) { throw_error(ErrorCode::kUnsupported, message); }

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  // Clear a sticky-free error so that later unrelated calls do not report it again.
  (void)cudaGetLastError();
  throw_error(ErrorCode::kDevice, fmt::format("CUDA call {} failed: {}: {} ({}:{})", expr, cudaGetErrorName(err),
                                              cudaGetErrorString(err), file, line));
}

void throw_cublas_error(int status, const char* expr, const char* file, int line) {
  const auto st = static_cast<cublasStatus_t>(status);
  throw_error(ErrorCode::kDevice, fmt::format("cuBLAS call {} failed: {} ({}) ({}:{})", expr,
                                              cublasLtGetStatusName(st), cublasLtGetStatusString(st), file, line));
}

}  // namespace flashdllm::cuda

#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {

std::string describe_kernel_errors(int flags) {
  static constexpr struct {
    int bit;
    const char* text;
  } kErrors[] = {
      {kErrEmbeddingId, "embedding: token id outside [0, rows of the embedding table)"},
      {kErrGatherRow, "gather_rows: row index outside [0, rows of x)"},
      {kErrRopePosition, "qkv_rope_store: position outside [0, rows of the RoPE table)"},
      {kErrStoreRow, "qkv_rope_store: K/V store row outside [0, rows of k_store)"},
      {kErrAttentionTile,
       "attention: a block-table tile is outside [0, q rows) x [0, K/V store rows), reversed, or has an empty key "
       "range"},
      {kErrAttentionWork, "attention: block-table tiles overlap (work list overflow)"},
      {kErrMoeExpert, "moe_experts: expert id outside [0, n_experts)"},
  };
  std::string out;
  for (const auto& e : kErrors) {
    if (flags & e.bit) {
      if (!out.empty()) out += "; ";
      out += e.text;
    }
  }
  const int known = kErrEmbeddingId | kErrGatherRow | kErrRopePosition | kErrStoreRow | kErrAttentionTile |
                    kErrAttentionWork | kErrMoeExpert;
  if (flags & ~known) out += fmt::format("{}unknown kernel error bits {:#x}", out.empty() ? "" : "; ", flags & ~known);
  return out;
}

}  // namespace flashdllm::kernels
