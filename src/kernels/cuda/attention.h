// Bidirectional multi-head attention over a block table (Backend::attention).
//
// Three implementations with the same contract (the flash one also serves the Flash-Verify pass, see
// attention_verify_flash; flash and wgmma can accumulate the raw importance of window tiles,
// AttentionArgs):
//  * flash (attention_flash_kernel.cuh, instantiated in attention_flash.cu): FA2-style, head_dim
//    128, bf16 mma.sync.m16n8k16 tensor cores with fp32 accumulation, online softmax in fp32 with
//    exp2 (log2(e) folded into the scale), cp.async double-buffered K/V tiles in XOR-swizzled shared
//    memory read with ldmatrix; no score matrix is materialised. Dao, "FlashAttention-2" (2023),
//    Algorithm 1 (forward).
//  * wgmma (attention_wgmma_kernel.cuh, instantiated in attention_wgmma.cu; sm_90 only,
//    FlashVariant::kWgmma128 / kWgmma64): the same algorithm on Hopper warpgroup MMA through CuTe:
//    persistent and warp-specialised (a producer warpgroup streams K/V tiles through an mbarrier
//    pipeline to two consumer warpgroups sharing each tile, or one in kWgmma64), the previous tile's
//    P·V overlapped with the current softmax; the fused importance as above.
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
/// columns [h·head_dim, (h+1)·head_dim)). Grouped-query attention (Backend::attention): query head h
/// reads K/V head kv_head_of(h) = h / (n_heads / Hkv) of the Hkv = kv_heads() heads of a K/V row.
struct AttentionArgs {
  const __nv_bfloat16* q = nullptr;  ///< [q_rows, n_heads·head_dim]
  const __nv_bfloat16* k = nullptr;  ///< [kv_rows, Hkv·head_dim] (the K store)
  const __nv_bfloat16* v = nullptr;  ///< [kv_rows, Hkv·head_dim] (the V store)
  __nv_bfloat16* out = nullptr;      ///< [q_rows, n_heads·head_dim]; rows outside every tile untouched
  int64_t q_rows = 0;
  int64_t kv_rows = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  ///< Hkv, dividing n_heads; 0 means n_heads (multi-head attention)
  int head_dim = 0;
  float scale = 0.f;  ///< softmax scale (> 0), applied to q·k in fp32
  /// Flash kernel only, optional: raw importance (Backend::attention_importance, probability_mass
  /// false) of the score tiles, fused: score tile i (I32 [4] at score_tiles + 4i, i < n_score_tiles)
  /// names the query rows of table tile i to score (a sub-range, same keys: score_tile_inside);
  /// importance[t] += importance_weight · Σ_{scored rows} Σ_heads q·k_t from the kernel's own fp32
  /// score tiles (column sums per warp over its scored rows, one global float atomic per key, warp
  /// and head). A score tile outside its tile sets kErrAttentionTile in *error_flags and is skipped.
  float* importance = nullptr;  ///< [kv_rows] F32, accumulated into; nullptr = off
  float importance_weight = 0.f;
  const int32_t* table = nullptr;        ///< device I32 [n_tiles, 4], the planned table (for the check)
  const int32_t* score_tiles = nullptr;  ///< device I32 [n_score_tiles, 4]
  int32_t n_score_tiles = 0;
  int* error_flags = nullptr;  ///< kErrAttentionTile for a bad score tile (may be null)

  /// Hkv: the K/V heads of a K/V row.
  __host__ __device__ int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  /// The K/V head that query head h reads.
  __host__ __device__ int kv_head_of(int h) const { return h / (n_heads / kv_heads()); }
};

/// One CTA's share of a tile: query rows [q_begin, q_end) (at most block_m) against keys [k_begin,
/// k_end); `tile` is the table row it came from.
struct AttentionWorkItem {
  int32_t q_begin, q_end, k_begin, k_end, tile;
};

/// Key sources of the flash kernel's Flash-Verify mode (attention_verify_flash; reference §D.8): per
/// VerifyTile (q_start, q_end, k_start, k_end, n_cand, n_src) of `table`, the keys are the store rows
/// key_rows[k_start, k_end) of AttentionArgs::k / v, then the tile's own fresh K/V rows
/// k_tile/v_tile[q_start, q_end) under the in-tile isolation mask (flashdllm::verify_may_attend).
struct VerifyKeys {
  const int32_t* table = nullptr;         ///< device I32 [n_tiles, 6] VerifyTile rows
  const int32_t* key_rows = nullptr;      ///< device I32 gather list of store rows
  const __nv_bfloat16* k_tile = nullptr;  ///< [q_rows, Hkv·head_dim] fresh K of the query rows
  const __nv_bfloat16* v_tile = nullptr;  ///< [q_rows, Hkv·head_dim]
  int* error_flags = nullptr;             ///< kErrAttentionTile for a gathered row outside [0, kv_rows)
};

/// The verify mode's CTA shape (attention_verify_flash). key_split 1: 64 query rows per CTA, four
/// warps of 16 rows; 2: 32 rows, two warp groups over the two halves of every key tile. A verify
/// tile has 20-32 rows (2·block_length, or k1 + 2·S with --verify-kept commits; + S source rows on
/// a shifted-logit model with --verify-kept commits). min_ctas_per_sm:
/// the register budget (__launch_bounds__) that lets that many CTAs share an SM. Built: 1/1, 2/2,
/// 2/3; the engine picks 2/2 or 2/3 per call (verify_cta_for).
struct VerifyCta {
  int key_split = 2;
  int min_ctas_per_sm = 3;
};
/// Query rows per CTA (the work items' block_m): 64 for key_split 1, 32 for 2.
int verify_block_m(const VerifyCta& cta) noexcept;
/// The engine's shape for a verify call of about `n_ctas` CTAs (work items × heads) on the current
/// device: key split 2 at 3 CTAs per SM, unless 2 per SM needs fewer waves by more than a 3-CTA
/// wave's extra time (1.25×: on the H200 a wave of 3 CTAs per SM took 1.2-1.3× a wave of 2,
/// bench/results/2026-12-03-h200-verify-cta). Both plan with block_m 32. Throws Error(kDevice)
/// when the device cannot be queried.
VerifyCta verify_cta_for(int64_t n_ctas);

/// The flash kernel instantiations that ship (block_m query rows × block_n keys per step; what the
/// policy, src/backend/backend_policy.h, picks): the mma.sync kernel kM64N64 (attention_flash.cu,
/// sm_80+; four warps) and the Hopper kernel (attention_wgmma.cu: persistent, a producer and
/// consumer warpgroups, wgmma, 128-key tiles; sm_90 devices, builds with CUTLASS and sm_90a code)
/// with two consumers, kWgmma128, or one, kWgmma64 (64-row work items: twice the CTAs of
/// wgmma128 for the same rows, each row's arithmetic the same instructions in the same order as in
/// wgmma128, identical output bits, for calls too small to fill the SMs with 128-row units). Other
/// tile shapes of the same kernels, measured and never picked, are in bench/kernels/ (README.md there).
enum class FlashVariant { kM64N64, kWgmma128, kWgmma64 };

/// "m64n64", "wgmma128", "wgmma64".
const char* flash_variant_name(FlashVariant v) noexcept;
/// Query rows per CTA of a variant (64 or 128).
int flash_block_m(FlashVariant v) noexcept;
/// True when this build has the variant's code for devices of compute capability major.minor
/// (the mma.sync variants: sm_80 and newer; the wgmma ones: exactly sm_90, in builds with them).
bool flash_variant_runs_on(FlashVariant v, int cc_major, int cc_minor) noexcept;
/// True when this build contains the wgmma kernel (CUTLASS headers found, sm_90 among the archs).
bool flash_wgmma_built() noexcept;
/// True when the flash kernel has an instantiation for head_dim (only 128).
bool flash_supports_head_dim(int head_dim) noexcept;

/// Upper bound on the work items of a table whose tiles' query ranges are disjoint subsets of
/// [0, q_rows): ceil(q_rows / block_m) + n_tiles.
int64_t attention_work_capacity(int64_t q_rows, int64_t n_tiles, int block_m) noexcept;

/// Cuts the table (device I32 [n_tiles, 4]) into work items (device, `capacity` entries) and
/// writes their number to *work_count (device I32). Invalid tiles (outside [0, q_rows) ×
/// [0, kv_rows), reversed ranges, or query rows with an empty key range) are skipped and set
/// kErrAttentionTile; work beyond capacity sets kErrAttentionWork. skip_min_rows > 0: valid tiles
/// of at least that many query rows get no work items (another kernel, cuDNN's, runs them); valid
/// tiles of fewer than min_rows query rows get none either (another flash variant's list has them).
/// One block; no host sync. Throws Error(kDevice) on launch failure.
void attention_plan(const int32_t* table, int64_t n_tiles, int64_t q_rows, int64_t kv_rows, int block_m,
                    AttentionWorkItem* work, int32_t* work_count, int64_t capacity, int* error_flags,
                    cudaStream_t stream, int32_t skip_min_rows = 0, int32_t min_rows = 0);

/// Runs the flash kernel over the planned work (grid = capacity × n_heads; work planned with the
/// variant's block_m). Preconditions (validated, Error(kInvalidArgument)/kUnsupported): head_dim ==
/// 128; q, k, v, out 16-byte aligned; n_heads·head_dim·2 bytes a multiple of 16; rows < 2^31;
/// the wgmma variants only where flash_variant_runs_on says so for the current device (kUnsupported).
/// Throws Error(kDevice) on launch failure.
void attention_flash(const AttentionArgs& args, FlashVariant variant, const AttentionWorkItem* work,
                     const int32_t* work_count, int64_t capacity, cudaStream_t stream);

/// Cuts a Flash-Verify table (device I32 [n_tiles, 6] VerifyTile rows) into work items of at most
/// block_m query rows (k_begin/k_end = the tile's gather range, tile = its table row). Tiles outside
/// [0, q_rows) × [0, n_keys), reversed, or not verify_tile_groups_valid are skipped and set
/// kErrAttentionTile; an empty gather range is valid (every row sees a column of its tile). Same
/// contract otherwise as attention_plan.
void attention_plan_verify(const int32_t* table, int64_t n_tiles, int64_t q_rows, int64_t n_keys, int block_m,
                           AttentionWorkItem* work, int32_t* work_count, int64_t capacity, int* error_flags,
                           cudaStream_t stream);

/// The Flash-Verify pass on the flash kernel (tensor cores, fp32 online softmax over the gathered
/// and the in-tile keys together, a proper running maximum across both, §F.8), work from
/// attention_plan_verify with block_m = verify_block_m(cta). args.k / args.v are the K/V stores,
/// args.kv_rows their rows, args.importance must be null. Same preconditions as attention_flash,
/// plus 16-byte aligned k_tile / v_tile and a built CTA shape (Error(kInvalidArgument)). Throws
/// Error(kDevice) on launch failure.
void attention_verify_flash(const AttentionArgs& args, const VerifyKeys& keys, const AttentionWorkItem* work,
                            const int32_t* work_count, int64_t capacity, cudaStream_t stream,
                            const VerifyCta& cta = {});

/// Reference attention straight from the table (one block per (tile, head), one warp per query
/// row, expf-based online softmax in fp32). head_dim must be a multiple of 32 and <= 256.
/// Invalid tiles are skipped and set kErrAttentionTile. Throws Error(kDevice) on launch failure.
void attention_reference(const AttentionArgs& args, const int32_t* table, int64_t n_tiles, int* error_flags,
                         cudaStream_t stream);

}  // namespace flashdllm::kernels
