// The backend's default choices, as small pure functions of the device and the call's shape (the
// model: FlashAttention-3's hopper/heuristics.h). BackendOptions (flashdllm/backend_options.h) holds
// what a user forced; everything left at its default is decided here. Host code without CUDA: built
// in every configuration and unit-tested without a GPU (tests/unit/test_backend_policy.cpp). The
// measurements behind each choice are cited where it is made.
#pragma once

#include <cstdint>
#include <optional>

#include "backend/backend.h"
#include "flashdllm/backend_options.h"

namespace flashdllm {

/// What the policies need to know of a device and of this build's kernels for it.
struct DeviceTraits {
  int cc_major = 0, cc_minor = 0;  ///< compute capability
  int sms = 0;                     ///< streaming multiprocessors
  /// The build has the Hopper (wgmma) attention kernel and the device runs it (sm_90).
  bool hopper_attention = false;
};

/// True for the Hopper (wgmma) attention kernels.
constexpr bool is_hopper_kernel(AttentionKernel k) noexcept {
  return k == AttentionKernel::kWgmma128 || k == AttentionKernel::kWgmma64;
}

/// The flash kernels of an attention call: `main` for its tiles, and with split_rows > 0 the small-tile
/// kernel (kSmallTileKernel) for the tiles of fewer than split_rows query rows.
struct FlashChoice {
  AttentionKernel main = AttentionKernel::kM64N64;
  int32_t split_rows = 0;
  bool operator==(const FlashChoice& o) const noexcept { return main == o.main && split_rows == o.split_rows; }
};
/// The kernel of the small tiles of a split choice (64-row CTAs: a 16-row tile computes less padding).
inline constexpr AttentionKernel kSmallTileKernel = AttentionKernel::kM64N64;

/// The default on a device: where the Hopper kernel runs, wgmma128 (a unit of 128 rows per two
/// consumer warpgroups sharing each 128-key K/V tile) for tiles of more than 64 query rows (a
/// Flash-Cache slot's 128-row window tile, prefills) and m64n64 for tiles of at most 64 (the released
/// 16-row tiling, --query-tile-rows 16, where a 128-row CTA would compute mostly padding); elsewhere
/// m64n64 for every tile. Measured on the H200 (bench/results/2026-12-03-h200-wgmma-tma/,
/// docs/decisions.md). The tile shapes that lost these measurements are in bench/kernels/ (its
/// README.md: 128-row mma.sync tiles, 64-key wgmma tiles). A tile's kernel depends on its own row count only,
/// never on the rest of the batch (batch invariance), with one exception that keeps the bits:
/// small_call_kernel.
FlashChoice default_flash_choice(const DeviceTraits& device) noexcept;

/// `attention` forced (a flash kernel: every tile on it, no split), else default_flash_choice.
/// kReference has no flash choice: the default's is returned (the backend does not plan for it).
FlashChoice flash_choice(AttentionKernel attention, const DeviceTraits& device) noexcept;

/// The kernel a tile of `tile_rows` query rows runs on under `choice`.
AttentionKernel tile_kernel(const FlashChoice& choice, int64_t tile_rows) noexcept;

/// A call whose 128-row units leave most SMs idle (one or two Flash-Cache slots: 32 or 64 CTAs on the
/// H200's 132 SMs) runs wgmma128's tiles on wgmma64 instead: one consumer warpgroup per CTA, 64-row
/// work items, so twice the CTAs each with half the rows. Every row goes through the same wgmma
/// instructions over the same key tiles in the same order as in wgmma128 (the two consumers of a
/// wgmma128 CTA are independent 64-row halves), so the output bits do not change with the batch; only
/// the importance's float atomics add in another order (as they may anyway). Taken when the 64-row
/// units of all query rows fit in one wave: 2·ceil(q_rows / 128)·n_heads <= sms. Any other `main`
/// is returned unchanged.
AttentionKernel small_call_kernel(AttentionKernel main, int64_t q_rows, int n_heads, int sms) noexcept;

/// Tiles of at least this many query rows (the admission prefills) run in cuDNN under
/// CudnnAttention::kAuto / kPrefill; the Flash-Cache windows (16-128 rows, with the fused importance)
/// stay on the backend's kernel.
inline constexpr int32_t kCudnnPrefillRows = 256;

/// Which tiles go to cuDNN's fused attention: those of >= min_rows query rows (0: none). required:
/// an unavailable cuDNN is an error (the route was asked for), else those tiles quietly stay on the
/// backend's kernel. The choice depends only on a tile's own shape, never on what else is in the
/// batch (batch invariance). The reference attention sends nothing to cuDNN.
struct CudnnChoice {
  int32_t min_rows = 0;
  bool required = false;
};
CudnnChoice cudnn_choice(CudnnAttention cudnn, AttentionKernel attention) noexcept;

/// Whether the fused QKV + RoPE + store kernel measured faster than the unfused cuBLASLt GEMM +
/// rope_store at `tokens` rows on the H200 (bench/qkv_bench; bench/results/2026-12-03-h200-qkv-*):
/// it never did (1.13-1.16x their time at 1024-8192 rows), so the kernel lives in bench/kernels/ and
/// Backend::qkv_rope_store on CUDA is the unfused path. The measurement a kernel must beat to return.
bool fused_qkv_beats_unfused(int64_t tokens) noexcept;

/// The row padding of a backend on `device` (Backend::row_padding): {64, 16} when `requested` is
/// true, {1, 1} when false; nullopt takes the device's default, on for CUDA (graphs replay while row
/// counts change; docs/decisions.md) and off for the CPU (it records nothing: padding only costs).
Backend::RowPadding row_padding_for(DeviceKind device, std::optional<bool> requested) noexcept;

/// Whether run_recorded records CUDA graphs: cuda_graphs, and never while syncing after every op.
bool cuda_graphs_enabled(const BackendOptions& options) noexcept;

/// Whether block-FP8 weights try cuBLASLt's block-scaled FP8 GEMM (its 128 x 128 / 1 x 128 scale
/// modes exist on sm_90 only: Ada scales FP8 per tensor, Blackwell in MX blocks) before the
/// dequantising route; never with fp8_dequantize.
constexpr bool fp8_gemm_applies(const BackendOptions& options, const DeviceTraits& device) noexcept {
  return !options.fp8_dequantize && device.cc_major == 9;
}

/// Whether the cuBLASLt picks apply: timing at run time (gemm_tune > 1) replaces buckets and picks.
constexpr bool gemm_picks_apply(int gemm_tune) noexcept { return gemm_tune <= 1; }

}  // namespace flashdllm
