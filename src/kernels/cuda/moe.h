// The mixture-of-experts FFN on the device (Backend::moe_route / moe_experts; the algorithm in
// core/moe_routing.h and backend.h), with no host synchronisation, so a captured layer loop replays it:
//   moe_route_f32         per token: fp32 scores (softmax in double, or sigmoid), selection keys (+ an
//                         expert bias), the group limit, top-k of the keys, weights from the scores
//   moe_plan              counting sort of the T·k (token, choice) pairs by expert (histogram, scan,
//                         scatter) and the list of row tiles: every tile is at most kMoeTileRows rows
//                         of ONE expert's group, so a GEMM CTA works on one expert's weights; the
//                         number of tiles is data-dependent but bounded by moe_max_tiles (known on the
//                         host: the grid), and CTAs past the count stop at once
//   moe_grouped_gemm_bf16 out[s] = a[s]·W_eᵀ for the rows s of each tile (e its expert): WMMA bf16
//                         tiles, fp32 accumulation; rows gathered from x through the sort (gate/up) or
//                         read in group order (down)
//   moe_combine_bf16      out[t] (+)= Σ over t's k experts in ascending expert order of w·y[slot], fp32
// The tile list is vLLM's moe_align_block_size idea (each expert's group covered by whole tiles) without
// padding the rows themselves: a tile ends where its expert's group ends.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Largest expert count of the MoE kernels (moe_route's per-warp keys and moe_plan's histogram
/// live in shared memory).
inline constexpr int kMoeMaxExperts = 2048;
/// Largest top-k of moe_combine (its per-token expert order lives in shared memory).
inline constexpr int kMoeMaxTopK = 64;
/// Rows of a grouped-GEMM tile (BM).
inline constexpr int kMoeTileRows = 64;

/// Upper bound of the tiles of `pairs` sorted rows over `experts` groups: Σ_e ceil(n_e / BM) <=
/// ceil(pairs / BM) + experts.
constexpr int64_t moe_max_tiles(int64_t pairs, int64_t experts) noexcept {
  return (pairs + kMoeTileRows - 1) / kMoeTileRows + experts;
}

/// int32 elements of moe_plan's output for `pairs` pairs and `experts` experts.
constexpr int64_t moe_meta_ints(int64_t pairs, int64_t experts) noexcept {
  return 1 + 2 * pairs + 3 * moe_max_tiles(pairs, experts);
}

/// moe_plan's output, carved from one int32 buffer of moe_meta_ints elements (moe_meta_view).
struct MoeMeta {
  int32_t* n_tiles = nullptr;       ///< [1] tiles written
  int32_t* slot_of_pair = nullptr;  ///< [pairs] row of pair i = t·k + j in the sorted groups (-1: bad id)
  int32_t* pair_of_slot = nullptr;  ///< [pairs] the inverse (rows past the valid pairs: unspecified)
  int32_t* tiles = nullptr;         ///< [max_tiles, 3] (expert, first row, end row) of each tile
};

/// The views of an int32 buffer of moe_meta_ints(pairs, experts) elements.
inline MoeMeta moe_meta_view(int32_t* base, int64_t pairs) noexcept {
  MoeMeta m;
  m.n_tiles = base;
  m.slot_of_pair = base + 1;
  m.pair_of_slot = base + 1 + pairs;
  m.tiles = base + 1 + 2 * pairs;
  return m;
}

/// Arguments of moe_route_f32. All pointers are device memory.
struct MoeRouteArgs {
  const float* logits = nullptr;  ///< [T, E] router logits
  const float* bias = nullptr;    ///< [E] expert bias added to the selection keys, or null (none)
  int32_t* ids = nullptr;         ///< [T, k] out: experts, descending key (ties: lower index first)
  float* weights = nullptr;       ///< [T, k] out: their weights
  int64_t tokens = 0;             ///< T
  int n_experts = 0;              ///< E in [1, kMoeMaxExperts]
  int top_k = 0;                  ///< k in [1, E] (grouped: at most topk_groups x E / n_groups)
  int n_groups = 1;               ///< G dividing E: the experts in G consecutive groups (1: no group limit)
  int topk_groups = 1;            ///< groups whose experts are candidates, in [1, G]
  bool sigmoid = false;           ///< scores: sigmoid per expert (else softmax over all experts)
  bool renormalize = false;       ///< weights divided by (their fp32 sum over the k + 1e-20)
  float scaling = 1.0f;           ///< weights multiplied by this
};

/// One warp per token, the algorithm of core/moe_routing.h as the CPU op computes it:
///   scores s_i = fp32(exp(z_i − max z) / Σ exp(z − max z)) (or fp32(1/(1 + exp(−z_i)))), evaluated
///     in double;
///   keys key_i = s_i + bias_i (fp32; s_i without a bias);
///   G > 1: group g scores the fp32 sum of its two largest keys; topk_groups rounds of a warp argmax
///     (ties: the lower group) pick the groups, the other groups' experts are no candidates;
///   k rounds of a warp argmax over the candidates' keys (ties: the lower expert);
///   weights s of the chosen experts (÷ their fp32 sum in selection order + 1e-20 when renormalize)
///     × scaling.
/// A row with a non-finite logit gets ids 0..k−1 and NaN weights (the CPU op's rule). A NaN key (a
/// non-finite bias, outside the op's contract) ranks below every other key, so the ids stay in
/// [0, E). Shared memory: (E + G when grouped) floats per warp, at most 48 KiB. tokens == 0 is a
/// no-op. Throws Error(kInvalidArgument) for E, k or the groups out of range, Error(kDevice) on
/// launch failure.
void moe_route_f32(const MoeRouteArgs& args, cudaStream_t stream);

/// Counting sort of the `pairs` expert ids (I32 [pairs] = expert_ids [T, k] flattened) into
/// per-expert groups, in one block: histogram (shared atomics), exclusive scan, tile list, scatter.
/// The order of the rows inside a group is unspecified (atomics); every consumer computes a row
/// from its own values only, so no result depends on it. An id outside [0, experts) sets
/// kErrMoeExpert in *error_flags and its pair gets slot −1 (its token's output turns NaN).
/// meta: moe_meta_ints(pairs, experts) int32. pairs == 0 writes n_tiles = 0.
void moe_plan(const int32_t* ids, int64_t pairs, int experts, int32_t* meta, int* error_flags, cudaStream_t stream);

/// Arguments of moe_grouped_gemm_bf16. All pointers are device memory.
struct MoeGemmArgs {
  const __nv_bfloat16* a = nullptr;       ///< gather: x [T, K]; else [pairs, K] rows in group order
  const int32_t* pair_of_slot = nullptr;  ///< gather: row s reads x[pair_of_slot[s] / top_k]; null: a[s]
  int top_k = 1;
  const __nv_bfloat16* w = nullptr;  ///< [E, N, K] expert weights (nn.Linear layout per expert)
  const int32_t* tiles = nullptr;    ///< moe_plan's tiles and count
  const int32_t* n_tiles = nullptr;
  int64_t max_tiles = 0;  ///< the grid's tile bound (moe_max_tiles)
  void* out = nullptr;    ///< [pairs, N] in group order: F32 (out_f32) or BF16
  bool out_f32 = false;
  int64_t n = 0;  ///< N
  int64_t k = 0;  ///< K
};

/// For every tile (expert e, rows [r0, r1)) and column c < N: out[s, c] = Σ_k a_s[k]·W_e[c, k], bf16
/// products exact in fp32 tensor-core accumulation, rounded once to the output dtype. 64x64 tiles,
/// 4 warps of 2x2 WMMA 16x16x16 fragments; 16-byte loads when K % 8 == 0 and the operands are aligned.
/// max_tiles == 0 is a no-op. Throws Error(kDevice) on launch failure.
void moe_grouped_gemm_bf16(const MoeGemmArgs& args, cudaStream_t stream);

/// Arguments of moe_combine_bf16. All pointers are device memory.
struct MoeCombineArgs {
  const float* y = nullptr;               ///< [pairs, D] expert outputs in group order (fp32)
  const int32_t* ids = nullptr;           ///< [T, k]
  const float* weights = nullptr;         ///< [T, k]
  const int32_t* slot_of_pair = nullptr;  ///< [T·k] (moe_plan)
  __nv_bfloat16* out = nullptr;           ///< [T, D]
  bool accumulate = false;
  int64_t tokens = 0;
  int top_k = 0;  ///< in [1, kMoeMaxTopK]
  int64_t d = 0;
};

/// out[t, c] = bf16(acc) or bf16(out[t, c] + acc) with acc = Σ_j w_tj·y[slot_tj, c] summed in fp32 in
/// ascending (expert id, j) order from 0 (the CPU oracle's order), each product rounded before its add.
/// A pair with slot −1 adds NaN. tokens == 0 is a no-op. Throws Error(kDevice) on launch failure.
void moe_combine_bf16(const MoeCombineArgs& args, cudaStream_t stream);

}  // namespace flashdllm::kernels
