// Attention importance of keys (Backend::attention_importance; Flash-dLLM's a_t, reference §D.6).
//
// A deliberately simple, separate kernel: one CTA per (tile, head). The CTA stages up to 16 query
// rows of its head in shared memory (fp32), optionally computes each row's log-sum-exp over the
// tile's keys (probability-mass variant; one warp per row, online max/sum), then every thread takes
// keys of the tile in turn, forms the 16 dot products against the staged rows in fp32 and adds
// weight · Σ_rows f to scores[key] with one float atomicAdd per (key, head, 16-row pass).
//
// The raw variant (probability_mass = false) takes another kernel: the sum over a tile's rows and
// heads of q·k is linear in q, so it sums q̄ = Σ_rows q (fp32) once per CTA, folding the query heads
// of each K/V head's group together (grouped-query attention: Σ_h q[h]·k[h / group] = Σ_j
// (Σ_{h of group j} q[h])·k[j]), and adds weight · q̄·k[t] per key (one warp per key, one atomicAdd
// per key and tile): every key row is read once, not once per head and 16-row pass
// (n_kv_heads·head_dim <= 12288; wider rows use the kernel above).
//
// Grouped-query attention: query head h scores K/V head h / (n_heads / n_kv_heads), and the sum runs
// over all n_heads query heads (as the CPU backend: the importance of a key is the sum over every
// query head that reads it).
//
// The engine's default (raw) variant runs fused into the flash attention kernel instead
// (AttentionArgs::importance, Backend::attention_with_importance); this file serves the
// probability variant, which needs each row's final log-sum-exp (a second sweep over K), the
// reference attention mode, head dims without a flash kernel, and the tiles the CUDA backend routes
// to cuDNN's attention (which cannot produce the importance).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Operands (device memory, row-major; head h of a row in columns [h·head_dim, (h+1)·head_dim)).
struct ImportanceArgs {
  const __nv_bfloat16* q = nullptr;  ///< [q_rows, n_heads·head_dim]
  const __nv_bfloat16* k = nullptr;  ///< [kv_rows, n_kv_heads·head_dim] (the K store)
  float* scores = nullptr;           ///< [kv_rows], accumulated into
  int64_t q_rows = 0;
  int64_t kv_rows = 0;
  int n_heads = 0;
  int head_dim = 0;
  float scale = 0.f;              ///< softmax scale (probability-mass variant only)
  float weight = 1.f;             ///< multiplier of every contribution
  bool probability_mass = false;  ///< false: raw q·k (released code); true: softmax probabilities
  /// K/V heads dividing n_heads (0: n_heads); query head h reads K/V head h / (n_heads / n_kv_heads).
  int n_kv_heads = 0;
};

/// scores[t] += weight · Σ_{tile} Σ_{rows} Σ_{heads} f(q_row, k_t) for keys t of each tile (see
/// Backend::attention_importance). table: device I32 [n_tiles, 4] AttentionTile rows. Invalid tiles
/// (outside [0, q_rows) × [0, kv_rows), reversed, or rows with an empty key range) are skipped and
/// set kErrAttentionTile in *error_flags. head_dim must be in [1, 256]; n_heads in [1, 65535],
/// n_kv_heads dividing it.
/// Throws Error(kInvalidArgument/kUnsupported) for those, Error(kDevice) on launch failure.
void attention_importance_bf16(const ImportanceArgs& args, const int32_t* table, int64_t n_tiles, int* error_flags,
                               cudaStream_t stream);

}  // namespace flashdllm::kernels
