// Flash-Verify attention (Backend::attention_verify; reference-algorithms §D.8, Flash-dLLM
// `_flash_verify_attention_fwd`).
//
// Per verify tile (q_start, q_end, k_start, k_end, n_cand, n_src) the query rows are [kept T |
// drafts S | masks S | sources n_src] (backend.h VerifyTile); each row attends to the gathered cache keys
// k_store[key_rows[g]], g ∈ [k_start, k_end), and then to the tile's own fresh keys k_tile[q_start .. q_end) under the
// in-tile isolation mask (computed from T and S in registers; no mask tensor in memory). Both parts go through one
// online softmax whose running maximum is updated by every key, the in-tile ones included (the released Triton kernel
// keeps the cache part's maximum for the in-tile block, §F.8).
//
// One CTA per (tile, head) streams the tile's keys through shared memory in chunks of 32; each warp
// carries up to 4 query rows through the sweep. Per chunk a lane forms partial q·k over its head
// dimensions for all 32 keys and a reduce-scatter of 31 shuffles hands lane j the score of key j, so
// the online-softmax bookkeeping happens once per 32 keys, not once per key. No tensor cores (~2
// TFLOP/s at LLaDA-8B shape): the CUDA backend runs the verify pass on the flash kernel's verify mode
// (attention.h, attention_verify_flash) for head_dim 128 and keeps this kernel for other head dims
// and FLASHDLLM_ATTENTION=reference (bench/results/2026-11-30-h200-8b-grid: 13.0 s -> 0.58 s of
// attention per 64-iteration call at 32 slots).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Operands (device memory, row-major; head h of a row in columns [h·head_dim, (h+1)·head_dim);
/// grouped-query attention: query head h reads K/V head h / (n_heads / n_kv_heads)).
struct VerifyAttentionArgs {
  const __nv_bfloat16* q = nullptr;       ///< [q_rows, n_heads·head_dim]
  const __nv_bfloat16* k_store = nullptr;  ///< [kv_rows, n_kv_heads·head_dim] (the layer's K cache)
  const __nv_bfloat16* v_store = nullptr;  ///< [kv_rows, n_kv_heads·head_dim]
  const int32_t* key_rows = nullptr;      ///< [n_keys] gather list of store rows
  const __nv_bfloat16* k_tile = nullptr;  ///< [q_rows, n_kv_heads·head_dim] fresh K of the query rows
  const __nv_bfloat16* v_tile = nullptr;  ///< [q_rows, n_kv_heads·head_dim]
  __nv_bfloat16* out = nullptr;           ///< [q_rows, n_heads·head_dim]; rows outside every tile untouched
  int64_t q_rows = 0;
  int64_t kv_rows = 0;
  int64_t n_keys = 0;
  int n_heads = 0;
  int head_dim = 0;
  float scale = 0.f;   ///< softmax scale (> 0), applied to q·k in fp32
  int n_kv_heads = 0;  ///< K/V heads dividing n_heads (0: n_heads)
};

/// Runs the verify attention over `table` (device I32 [n_tiles, 6] = VerifyTile rows). Invalid
/// tiles (outside [0, q_rows) × [0, n_keys), reversed, or not verify_tile_groups_valid) are skipped
/// and gather entries outside [0, kv_rows) are ignored; both set kErrAttentionTile in *error_flags.
/// head_dim must be a multiple of 32 and <= 256, n_heads in [1, 65535], n_kv_heads dividing it: Error(kUnsupported /
/// kInvalidArgument) otherwise; Error(kDevice) on launch failure.
void attention_verify_bf16(const VerifyAttentionArgs& args, const int32_t* table, int64_t n_tiles, int* error_flags,
                           cudaStream_t stream);

}  // namespace flashdllm::kernels
