// Fused QKV projection + RoPE + K/V cache write (Flash-Cache part 1; reference-algorithms §D.5
// [bench only: no policy picks it, see bench/kernels/README.md and backend_policy.h's
// fused_qkv_beats_unfused]
// step 2, Flash-dLLM's fused cache-update kernel): the Backend::qkv_rope_store of the CUDA backend
// without the [T, 3·H·Dh] intermediate and without a second pass over it.
//
// On sm_90 (builds with CUTLASS, FLASHDLLM_HAVE_QKV_SM90): a CUTLASS 3 Hopper GEMM (TMA, wgmma,
// warp-specialised persistent kernel) computes xn · wqkvᵀ tile by tile, and its epilogue
// (qkv_rope_sm90.cu) rotates q and k in registers and writes q to the dense output, k and v straight
// into their store rows. Other GPUs have no fused path (the unfused cuBLASLt GEMM + rope_store_bf16
// is the CUDA backend's path there).
//
// Numerics equal the unfused path (cuBLASLt GEMM to bf16, then rope_store_bf16): the FP32 sum is
// rounded to bf16 first, then rotated with separately rounded fp32 products and sums. Only the
// summation order of the dot products differs (last-bit differences where a sum lies on a bf16
// rounding boundary). (The released kernel rotates the fp32 accumulator before rounding,
// reference-algorithms §A.3; we keep HF's order so that fused and unfused agree.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// Arguments of qkv_rope_store_fused_bf16. All pointers are device memory.
struct FusedQkvArgs {
  const __nv_bfloat16* xn = nullptr;    ///< [T, d_model] normalised hidden rows
  const __nv_bfloat16* wqkv = nullptr;  ///< [3·H·Dh, d_model]: rows of q_proj | k_proj | v_proj
  const int32_t* positions = nullptr;   ///< [T] RoPE positions, each in [0, max_positions)
  const int32_t* rows = nullptr;        ///< [T] destination rows of the K/V stores, each in [0, store_rows)
  const float* cos = nullptr;           ///< [max_positions, Dh/2]
  const float* sin = nullptr;           ///< [max_positions, Dh/2]
  __nv_bfloat16* q_out = nullptr;       ///< [T, H·Dh]
  __nv_bfloat16* k_store = nullptr;     ///< [store_rows, H·Dh]
  __nv_bfloat16* v_store = nullptr;     ///< [store_rows, H·Dh]
  int64_t tokens = 0;                   ///< T
  int64_t d_model = 0;
  int n_heads = 0;   ///< H
  int head_dim = 0;  ///< Dh
  int64_t max_positions = 0;
  int64_t store_rows = 0;
  int* error_flags = nullptr;  ///< device int or null; kErrRopePosition / kErrStoreRow
};

/// The GEMM tile: rows × columns of an output tile of CUTLASS's cooperative kernel (the CTA's two
/// consumer warpgroups share it); b: its epilogue stages the rotated tile in shared memory and hands
/// each row to the bulk-copy engine (cp.async.bulk). (Register-to-global and thread-copied staged
/// epilogues, the ping-pong kernel, clusters of two CTAs, staging in 128-column chunks and an
/// epilogue run by the kernel's idle epilogue-load warp measured slower or no faster and were
/// dropped: bench/results/2026-12-03-h200-qkv-cutlass, .../2026-12-03-h200-qkv-epilogues,
/// .../2026-12-03-h200-qkv-helper.)
enum class QkvTile { kAuto, k128x128b, k128x256b };

/// Every tile configuration (all but kAuto), for sweeps (bench/qkv_bench, the twin tests).
inline constexpr QkvTile kQkvTiles[] = {QkvTile::k128x128b, QkvTile::k128x256b};

/// One configuration of the fused kernel: the tile, and the persistent scheduler's walk over the
/// output tiles (swizzle: tiles taken in groups of this many along the minor direction, 1, 2, 4 or
/// 8; along_n: the N tile index moves fastest, else M's). kAuto: chosen by T (qkv_fused_auto).
struct QkvConfig {
  QkvTile tile = QkvTile::kAuto;
  int swizzle = 1;
  bool along_n = false;
};

/// "auto", "128x128b", "128x256b".
const char* qkv_tile_name(QkvTile t) noexcept;

/// The tile named `name` (one of qkv_tile_name's names, "auto" included) in *out; false, *out
/// untouched, for any other name or a null `name`.
bool qkv_tile_from_name(const char* name, QkvTile* out) noexcept;

/// The configuration kAuto runs for T tokens (bench/qkv_bench on the H200).
QkvConfig qkv_fused_auto(int64_t tokens) noexcept;

/// The main loop's pipeline stages (K-blocks of 64 in flight) of `tile`'s kernel; 0 for kAuto or in
/// builds without the fused kernel.
int qkv_fused_stages(QkvTile tile) noexcept;

/// Whether this build has the fused kernel and the current device runs it (compute capability 9.0).
bool qkv_rope_fused_available();

/// Whether the fused kernel handles these operands: head_dim 64 or 128; d_model a positive multiple
/// of 8 below 2^31; 3·H·Dh and T below 2^31; xn, wqkv, q_out and the stores
/// 16-byte aligned; cos / sin 8-byte aligned.
bool qkv_rope_fused_supported(const FusedQkvArgs& args) noexcept;

/// Same contract as rope_store_bf16 after the GEMM (see rope_store.h): q_out[t] = rotated q, k_store
/// and v_store rows rows[t] = rotated k and v; a position out of range poisons q_out[t] with NaN and
/// skips the store rows; a store row out of range skips them; both set their bit in *error_flags.
/// tokens == 0 is a no-op. Host work per call: the GEMM's TMA maps are encoded (no device call,
/// no allocation). Throws Error(kUnsupported) if !qkv_rope_fused_available() or
/// !qkv_rope_fused_supported(args), Error(kInvalidArgument) for a swizzle outside {1, 2, 4, 8},
/// Error(kDevice) on launch failure.
void qkv_rope_store_fused_bf16(const FusedQkvArgs& args, cudaStream_t stream, QkvConfig config = {});

}  // namespace flashdllm::kernels
