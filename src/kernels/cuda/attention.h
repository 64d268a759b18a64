// Bidirectional multi-head attention over a block table (Backend::attention).
//
// Two implementations with the same contract:
//  * flash (attention_flash.cu): FA2-style, head_dim 128, bf16 mma.sync.m16n8k16 tensor cores with
//    fp32 accumulation, online softmax in fp32 with exp2 (log2(e) folded into the scale),
//    cp.async double-buffered K/V tiles in XOR-swizzled shared memory read with ldmatrix; no
//    score matrix is materialised. Dao, "FlashAttention-2" (2023), Algorithm 1 (forward).
//  * reference (attention_reference.cu): one warp per query row, scalar fp32, no tensor cores;
//    obviously correct, slow; the second oracle in tests and a debugging fallback.
//
// Work decomposition of the flash kernel: every tile (q_start, q_end, k_start, k_end) of the
// table is cut into chunks of block_m query rows; one CTA per (chunk, head). attention_plan does
// the cut on the device (a one-block prefix-sum kernel) so that no host sync is needed; the
// flash kernel is launched with `capacity` CTAs along x and CTAs past the planned count exit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Operands shared by both implementations (all device memory, row-major, head h of a row in
/// columns [h·head_dim, (h+1)·head_dim)).
struct AttentionArgs {
  const __nv_bfloat16* q = nullptr;  ///< [q_rows, n_heads·head_dim]
  const __nv_bfloat16* k = nullptr;  ///< [kv_rows, n_heads·head_dim] (the K store)
  const __nv_bfloat16* v = nullptr;  ///< [kv_rows, n_heads·head_dim] (the V store)
  __nv_bfloat16* out = nullptr;      ///< [q_rows, n_heads·head_dim]; rows outside every tile untouched
  int64_t q_rows = 0;
  int64_t kv_rows = 0;
  int n_heads = 0;
  int head_dim = 0;
  float scale = 0.f;  ///< softmax scale (> 0), applied to q·k in fp32
};

/// One CTA's share of a tile: query rows [q_begin, q_end) (at most block_m) against keys [k_begin, k_end).
struct AttentionWorkItem {
  int32_t q_begin, q_end, k_begin, k_end;
};

/// The flash kernel instantiations (block_m query rows × block_n keys per step; block_m/16 warps).
enum class FlashVariant { kM64N64, kM128N64, kM128N128 };

/// "m64n64", "m128n64", "m128n128".
const char* flash_variant_name(FlashVariant v) noexcept;
/// Query rows per CTA of a variant (64 or 128).
int flash_block_m(FlashVariant v) noexcept;
/// Dynamic shared memory of a variant in bytes.
int flash_smem_bytes(FlashVariant v) noexcept;
/// True when the flash kernel has an instantiation for head_dim (only 128).
bool flash_supports_head_dim(int head_dim) noexcept;

/// Upper bound on the work items of a table whose tiles' query ranges are disjoint subsets of
/// [0, q_rows): ceil(q_rows / block_m) + n_tiles.
int64_t attention_work_capacity(int64_t q_rows, int64_t n_tiles, int block_m) noexcept;

/// Cuts the table (device I32 [n_tiles, 4]) into work items (device, `capacity` entries) and
/// writes their number to *work_count (device I32). Invalid tiles (outside [0, q_rows) ×
/// [0, kv_rows), reversed ranges, or query rows with an empty key range) are skipped and set
/// kErrAttentionTile; work beyond capacity sets kErrAttentionWork. One block; no host sync.
/// Throws Error(kDevice) on launch failure.
void attention_plan(const int32_t* table, int64_t n_tiles, int64_t q_rows, int64_t kv_rows, int block_m,
                    AttentionWorkItem* work, int32_t* work_count, int64_t capacity, int* error_flags,
                    cudaStream_t stream);

/// Runs the flash kernel over the planned work (grid = capacity × n_heads).
/// Preconditions (validated, Error(kInvalidArgument)/kUnsupported): head_dim == 128; q, k, v,
/// out 16-byte aligned; n_heads·head_dim·2 bytes a multiple of 16; rows < 2^31.
/// Throws Error(kDevice) on launch failure.
void attention_flash(const AttentionArgs& args, FlashVariant variant, const AttentionWorkItem* work,
                     const int32_t* work_count, int64_t capacity, cudaStream_t stream);

/// Reference attention straight from the table (one block per (tile, head), one warp per query
/// row, expf-based online softmax in fp32). head_dim must be a multiple of 32 and <= 256.
/// Invalid tiles are skipped and set kErrAttentionTile. Throws Error(kDevice) on launch failure.
void attention_reference(const AttentionArgs& args, const int32_t* table, int64_t n_tiles, int* error_flags,
                         cudaStream_t stream);

}  // namespace flashdllm::kernels
