// CUDA backend: bf16 weights and activations, fp32 accumulation; cuBLASLt GEMMs and the kernels of
// src/kernels/cuda. One class (this header) whose ops are defined per family in cuda_*.cu (below).
// Every op follows validate -> dispatch -> launch:
//   validate  operand device / dtype / shape against backend.h, Error(kInvalidArgument) naming
//             the op and the operand;
//   dispatch  pick the kernel (e.g. flash variant or reference attention);
//   launch    enqueue on this backend's one stream; every launch is checked (CUDA_CHECK_LAUNCH).
// Nothing waits for the device except copy_to_host() and synchronize() (and every op under
// BackendOptions::sync kEveryOp, a debug mode that pins asynchronous faults to the op that caused them).
//
// Data-dependent input errors (token ids, rows, positions, attention tiles) are detected by the
// kernels into a device flag word and reported as Error(kInvalidArgument) at the next
// synchronising call (see kernels/cuda/kernel_errors.h).
//
// Options: BackendOptions (flashdllm/backend_options.h), given at construction; what they leave at
// their defaults is chosen by backend/backend_policy.h (attention kernel per tile, cuDNN route, QKV
// path, row padding, graphs). The FLASHDLLM_* variables that set them from the command line are
// listed by `flashdllm env` (apps/cli/env_registry.cpp); the library reads no environment.
//
// Files (one per concern; llama.cpp's ggml-cuda/*.cu is the model):
//   cuda_backend.h           this class: the context (device, stream, handles, workspaces) and its state
//   cuda_context.cu          construction, memory, host copies (pinned staging), synchronisation, errors
//   cuda_graph_cache.h, cuda_graphs.cu  the graph cache of run_recorded (capture, replay, LRU)
//   cuda_attention_plan.cu   the attention planner: work lists per table (plan_attention*)
//   cuda_cudnn_route.cu      the tiles routed to cuDNN's fused attention
//   cuda_ops_attention.cu    attention, attention_with_importance, attention_verify, attention_importance
//   cuda_ops_linear.cu       matmul (cuBLASLt), qkv_rope_store (fused or GEMM + RoPE + K/V store)
//   cuda_ops_fp8.cu          matmul_fp8 (block-FP8 weights: cuBLASLt's block-scaled FP8 GEMM, or dequantised)
//   cuda_ops_elementwise.cu  embedding, rmsnorm, swiglu, gather_rows, gather_columns
//   cuda_ops_denoise.cu      cfg_combine, select_tokens
//   cuda_ops_moe.cu          moe_route, moe_experts (kernels/cuda/moe.h: no host synchronisation)
// Operand checks are shared with the CPU backend (backend/operand_checks.h). Private to
// src/backend/cuda: include it first in a .cu (it carries the fmt workaround below).
#pragma once

// nvcc 13 cannot evaluate fmt 9's C++20 consteval format-string checks (core/check.h includes
// fmt): when compiled as C++20, this translation unit uses fmt's runtime-checked format strings
// instead (what fmt itself does in C++17). Argument types are still checked by the compiler.
#if defined(__CUDACC__) && __cplusplus >= 202002L
#ifndef FMT_CONSTEVAL
#define FMT_CONSTEVAL
#endif
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_policy.h"
#include "backend/cuda/cuda_graph_cache.h"
#include "backend/cuda/gemm_picks.h"
#include "backend/operand_checks.h"
#include "core/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_importance.h"
#include "kernels/cuda/attention_verify.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/gather.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernel_errors.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope_store.h"
#include "kernels/cuda/select.h"
#include "kernels/cuda/swiglu.h"

namespace flashdllm::cuda_impl {

// ----------------------------------------------------------------------------- validation

// The shared operand checks (backend/operand_checks.h), for device tensors.
inline void expect(const Tensor& t, DType dtype, const char* op, const char* operand) {
  opcheck::expect(t, dtype, DeviceKind::kCUDA, op, operand);
}
using opcheck::expect_disjoint;
using opcheck::expect_matrix;
using opcheck::expect_numel;
using opcheck::overlap;

inline __nv_bfloat16* bf16(const Tensor& t) { return static_cast<__nv_bfloat16*>(t.data); }

// ----------------------------------------------------------------------------- policy -> kernels

// The kernel of a flash attention choice (backend_policy.h speaks AttentionKernel; kAuto and
// kReference never reach here).
constexpr kernels::FlashVariant flash_variant(AttentionKernel k) noexcept {
  switch (k) {
    case AttentionKernel::kWgmma128: return kernels::FlashVariant::kWgmma128;
    case AttentionKernel::kWgmma64: return kernels::FlashVariant::kWgmma64;
    case AttentionKernel::kAuto:
    case AttentionKernel::kReference:
    case AttentionKernel::kM64N64: break;
  }
  return kernels::FlashVariant::kM64N64;
}
constexpr kernels::FlashVariant kSmallTileVariant = flash_variant(kSmallTileKernel);

// The smallest power of two >= n (n in [1, 2^30]); cuDNN graphs are built per power-of-two bucket.
inline int32_t pow2_at_least(int32_t n) {
  int32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

struct CudaFree {
  void operator()(void* p) const noexcept {
    if (p) cudaFree(p);
  }
};
struct CudaFreeHost {
  void operator()(void* p) const noexcept {
    if (p) cudaFreeHost(p);
  }
};
struct StreamDestroy {
  void operator()(cudaStream_t s) const noexcept {
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;
using StreamPtr = std::unique_ptr<CUstream_st, StreamDestroy>;
using PinnedPtr = std::unique_ptr<void, CudaFreeHost>;

inline DevicePtr device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    FDLLM_FAIL(err == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kDevice,
               "cannot allocate {} bytes ({:.2f} GiB) of CUDA device memory for {} ({:.2f} GiB free): {}", bytes,
               static_cast<double>(bytes) / (1 << 30), what, static_cast<double>(free_b) / (1 << 30),
               cudaGetErrorString(err));
  }
  return DevicePtr(p);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device_index, const BackendOptions& options);

  // A forced flash kernel must run on this device (and be in this build).
  void check_forced_attention(int cc_major, int cc_minor) const;

  ~CudaBackend() override;

  DeviceKind device() const noexcept override { return DeviceKind::kCUDA; }
  std::string name() const override { return name_; }
  DType activation_dtype() const noexcept override { return DType::kBF16; }
  DType weight_dtype() const noexcept override { return DType::kBF16; }
  void* native_stream() const noexcept override { return stream_; }
  int device_index() const noexcept override { return device_; }

  // --------------------------------------------------------------------------- memory

  Buffer alloc(size_t bytes, const char* what) override;

  void copy_from_host(Tensor dst, const void* src) override;

  void copy_to_host(void* dst, Tensor src) override;

  void fill_zero(Tensor t) override;

  void synchronize() override;

  size_t free_memory() const override;

  void upload_weight(Tensor dst, DType src_dtype, const void* src) override;

  void fill_normal(Tensor dst, uint64_t seed, uint64_t stream, float mean, float std,
                   const FillWindow& window = {}) override;

  // --------------------------------------------------------------------------- recorded sequences

  void run_recorded(const std::vector<int64_t>& caller_key, const std::function<void()>& ops) override;

  int64_t routed_attention_calls() const override { return routed_calls_; }

  RowPadding row_padding() const override { return row_padding_; }

  RecordingStats recording_stats() const override { return graphs_cache_.stats(); }

  // --------------------------------------------------------------------------- model ops

  void embedding(Tensor table, Tensor ids, Tensor out) override;

  void rmsnorm(Tensor x, Tensor w, float eps, Tensor out) override;

  void matmul(Tensor x, Tensor w, Tensor out, bool accumulate) override;

  /// Block-FP8 weights (W8A8; Backend::matmul_fp8): x quantised per token in 1 x 128 groups
  /// (kernels/cuda/fp8.h), then cuBLASLt's block-scaled FP8 GEMM (sm_90 with cuBLASLt >= 12.9); where
  /// cuBLASLt has none for the shape or GPU (Ampere, Ada), the dequantising route: x quantised and
  /// dequantised to bf16, w dequantised to bf16 (128 x 128 block scales), the bf16 GEMM (the weights'
  /// memory is still halved; the speed is not FP8's).
  void matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) override;

  /// matmul_fp8 whose x is SwiGLU(gate_up), quantised by the SwiGLU kernel itself
  /// (kernels::swiglu_quantize_fp8_groups_bf16) on the FP8-GEMM route; the dequantising route runs
  /// swiglu into act, then matmul_fp8.
  void swiglu_matmul_fp8(Tensor gate_up, Tensor act, Tensor w, Tensor w_scale, Tensor out, bool accumulate) override;

  /// FP8 weights run (matmul_fp8); an FP8 K/V cache does not yet (Error(kUnsupported)).
  void check_precision(bool fp8_weights, bool fp8_kv) const override;

  /// GQA (K/V narrower than q) and the q/k/v bias (extra.bias BF16, the weight dtype; added in
  /// rope_store's fp32 epilogue before RoPE, no extra pass) and the per-head QK-norm (extra.q_norm /
  /// k_norm BF16 [Dh]: rope_store's warp-per-head variant, normalised before RoPE, no extra pass).
  void qkv_rope_store(Tensor xn, Tensor wqkv, const QkvExtras& extra, Tensor positions, Tensor rows,
                      const RopeTable& rope, int n_heads, Tensor q_out, Tensor k_store, Tensor v_store,
                      Tensor scratch) override;

  void attention(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale, Tensor out) override;

  void attention_with_importance(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                                 Tensor out, Tensor score_table, float weight, Tensor scores) override;

  void plan_attention(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads,
                      const HostAttentionPlan& host = {}) override;

  void plan_attention_verify(Tensor table, int64_t q_rows, int64_t n_keys) override;

  bool reference_attention() const noexcept { return options_.attention == AttentionKernel::kReference; }

  // attention() and, with `importance` set, the fused raw-importance variant of score_table's rows
  // (flash path only).
  void run_attention(const char* kOp, Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                     Tensor out, Tensor score_table, float weight, float* importance);

  void attention_verify(Tensor q, Tensor k_store, Tensor v_store, Tensor key_rows, Tensor k_tile, Tensor v_tile,
                        Tensor table, int n_heads, float scale, Tensor out) override;

  void attention_importance(Tensor q, Tensor k_store, Tensor table, int n_heads, float scale, bool probability_mass,
                            float weight, Tensor scores) override;

  void swiglu(Tensor gate_up, Tensor out) override;

  void gather_rows(Tensor x, Tensor rows, Tensor out) override;

  void gather_columns(Tensor x, Tensor cols, Tensor out) override;

  // --------------------------------------------------------------------------- mixture of experts

  /// Every switch of core/moe_routing.h as the CPU op computes it (kernels/cuda/moe.h): softmax or
  /// sigmoid scores (evaluated in double, rounded to fp32), the expert bias on the selection key,
  /// group-limited selection, top-k, renormalise and scaling. At most kernels::kMoeMaxExperts experts
  /// (more: Error(kUnsupported)).
  void moe_route(Tensor router_logits, Tensor expert_bias, const MoeRouting& routing, Tensor expert_ids,
                 Tensor expert_weights) override;

  /// Device-side counting sort into per-expert groups, grouped WMMA GEMMs over one-expert row tiles
  /// (gate|up, SwiGLU, down to fp32) and the fp32 weighted combine (kernels/cuda/moe.h): the grids
  /// are bounded from T, k and E alone, so a recorded layer loop replays it. An expert id outside
  /// [0, E) is reported at the next synchronising call (the token's row turns NaN). top_k <= 64.
  void moe_experts(Tensor x, Tensor expert_ids, Tensor expert_weights, Tensor w_gate_up, Tensor w_down, Tensor out,
                   bool accumulate, Tensor scratch) override;

  // --------------------------------------------------------------------------- denoiser ops

  void cfg_combine(Tensor cond, Tensor uncond, float scale, Tensor out) override;

  void select_tokens(Tensor logits, Tensor row_keys, const SelectParams& p, Tensor x0, Tensor conf) override;

 private:
  static constexpr size_t kStagingBytes = size_t{64} << 20;

  int* flags() const noexcept { return static_cast<int*>(flags_.get()); }
  int32_t* work_count() const noexcept { return static_cast<int32_t*>(work_count_.get()); }

  // Synchronises the stream, then turns device-side input errors into Error(kInvalidArgument).
  void sync_and_check(const char* where);

  // Every op's last call (inline: the hot path pays one branch): checks the op at once under
  // SyncMode::kEveryOp.
  void after_op(const char* op) {
    if (options_.sync == SyncMode::kEveryOp) sync_and_check(op);
  }

  // Pinned host staging of small copies (BackendOptions::pinned_staging false: none). An upload is copied into
  // staged_upload_ at `used` and DMA'd from there; its bytes are reused only after a stream
  // synchronisation (sync_and_check) has seen the copy complete. A download lands in
  // staged_download_ and is copied out after the synchronisation. Copies over kStagingMax (weights)
  // and copies while a graph is being captured (the graph would keep the staging address) stay
  // pageable, as does everything when pinned memory cannot be had. Returns nullptr for those.
  static constexpr size_t kStagingMax = size_t{4} << 20, kStagingCap = 4 * kStagingMax;
  struct HostStaging {
    PinnedPtr buf;
    size_t capacity = 0, used = 0, wanted = 0;
    bool failed = false;  // cudaMallocHost refused: pageable from then on
  };
  // Grows `s` to at least `bytes` (<= kStagingCap; 1 MiB, then doubling). Only while nothing is in
  // flight from it: the old buffer is freed.
  static bool grow_staging(HostStaging& s, size_t bytes);
  void* stage_upload(size_t bytes);
  void* stage_download(size_t bytes);

  // What an attention work list was made for: the table (4 ints per AttentionTile, 5 per
  // VerifyTile), query rows, key rows (store rows or gathered keys) and rows per work item.
  // skip_min_rows > 0: tiles of at least that many query rows are left out (the cuDNN route's).
  struct PlanKey {
    Tensor table;
    int64_t tile_ints = 0, q_rows = 0, kv_rows = 0;
    int block_m = 0;
    kernels::FlashVariant main = kernels::FlashVariant::kM64N64;  // the main list's kernel (attention tables)
    int32_t skip_min_rows = 0;
    int32_t split_rows = 0;  // > 0: tiles of fewer rows in a second list of kSmallTileVariant (block_m 64)
    // With split_rows: false when plan_attention's host copy of the table showed no such tile (a
    // Flash-Cache main pass of 128-row windows), so the small list and its launch are left out.
    bool small_tiles = true;
    int64_t n_tiles() const noexcept { return table.numel() / tile_ints; }
    // With split_rows: the tiles of fewer rows than this run in the small-tile list (the others in
    // the main list or, from skip_min_rows rows on, in cuDNN).
    int32_t small_below() const noexcept {
      return skip_min_rows > 0 ? std::min(skip_min_rows, split_rows) : split_rows;
    }
    bool same_table(const PlanKey& o) const noexcept {
      return table.data == o.table.data && table.numel() == o.table.numel() && tile_ints == o.tile_ints &&
             q_rows == o.q_rows && kv_rows == o.kv_rows && block_m == o.block_m && main == o.main &&
             split_rows == o.split_rows;
    }
    bool operator==(const PlanKey& o) const noexcept {
      return same_table(o) && skip_min_rows == o.skip_min_rows && small_tiles == o.small_tiles;
    }
  };

  // The plan key of an attention call over `table` (4-int AttentionTile rows).
  PlanKey attention_key(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads) const;

  // The plan key of a verify attention call over `table` (6-int VerifyTile rows): work items of the
  // verify mode's CTA rows (every VerifyCta the engine picks plans alike).
  static PlanKey verify_key(Tensor table, int64_t q_rows, int64_t n_keys);

  // The capacities of a plan's work lists (bounds from the key alone, so that a recorded loop's
  // launches keep their grids): the main list at work_[0, main) with its count at work_count()[0];
  // with split_rows, the small tiles' list at work_[main, main + small), count at work_count()[1]
  // (none when the key says no tile is small: small_tiles, which the recorded loop's key carries).
  // Split bounds: a small tile (< split_rows rows) is at most ceil((split_rows - 1) / 64) items of
  // 64 rows and at least one row; a main tile has r >= split_rows > 64 rows, and ceil(r / block_m)
  // <= r / 64 for those when block_m is 128, so the main list needs at most q_rows / 64 items (the
  // tiles' query ranges are disjoint): its grid stays small when every tile is small. (With block_m
  // 64, wgmma64, a 65-row tile is two items: the general bound holds.)
  struct WorkLists {
    int64_t main = 0, small = 0;
  };
  static WorkLists work_lists(const PlanKey& key);

  // Makes the work lists of `key` (kernels on the stream: no host wait).
  WorkLists make_plan(const PlanKey& key);

  // The work lists for `key`: plan_attention's when it was made for exactly this call, else planned
  // here (which drops the standing plan: the lists it lived in are overwritten).
  WorkLists planned_work(const PlanKey& key);

  void drop_plan_if_written(const Tensor& dst);

  // Grows the attention work list; only reallocates when a larger table than ever before arrives.
  // The counts exist from the first plan on, also when its lists have no capacity (every tile routed
  // to cuDNN, no small tile): the plan kernel writes them either way.
  void ensure_attention_work(int64_t capacity);

  // select_tokens' scratch (kernels::SelectArgs): a partial per (row, chunk) and an arrival counter
  // per row, zeroed here once and left zeroed by every selection. Selections run outside recorded
  // loops, so growing it drops no graph; queued selections may still use the old arrays.
  void ensure_select_scratch(int64_t rows, int64_t chunks);

  // matmul_fp8's scratch (the quantised activations and their scales, or the dequantising route's
  // bf16 operands): grows only; a move drops the recorded graphs (they hold the old address).
  void* ensure_fp8_scratch(size_t bytes);
  // matmul_fp8's dequantising route on checked operands (T > 0).
  void dequantized_matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate);
  // Writes the [T, K] activations, quantised, into q (e4m3 [T, K]) and scales (outer-major, group
  // stride ld): fp8_gemm's producer of its x operand.
  using Fp8Quantiser = std::function<void(uint8_t* q, float* scales, int64_t ld)>;
  // matmul_fp8 on cuBLASLt's block-scaled FP8 GEMM of the [T, K] activations `quantise` writes; false
  // when cuBLASLt has none for it.
  bool fp8_gemm(int64_t T, int64_t K, const Fp8Quantiser& quantise, Tensor w, Tensor w_scale, Tensor out,
                bool accumulate);

  // ------------------------------------------------------------------------- cuDNN route

  // The tiles of the standing plan that run in cuDNN: those of >= min_rows query rows, packed as
  // one ragged SDPA batch. cudnn_buf_ holds four I32 arrays of cudnn_stride(B) entries each (16-byte
  // aligned, as cuDNN assumes): seq_q [B], seq_kv [B], q offsets [B + 1], kv offsets [B + 1]; then the
  // routed tiles' score tiles, 4 ints each.
  static size_t cudnn_stride(size_t B) { return (B + 1 + 3) / 4 * 4; }

  struct CudnnRoute {
    kernels::CudnnSdpaShape shape;
    int32_t min_rows = 0;
    int64_t n_scored = 0;       // their score tiles
    int64_t n_score_tiles = 0;  // the score tiles of the whole plan (HostAttentionPlan::score_tiles)
  };

  void reset_plan();

  // Decides which tiles of `host` run in cuDNN, builds (or finds) the graph for their shape bucket
  // and uploads the batch arrays; nullopt = every tile on our kernel (mode off, no host copy, cuDNN
  // unavailable or refusing the shape, nothing long enough, or a routed tile that is invalid: our
  // plan kernel reports those).
  std::optional<CudnnRoute> route_to_cudnn(const HostAttentionPlan& host, int64_t q_rows, int64_t kv_rows, int n_heads);

  // Creates the cuDNN instance on first use; false (and the reason kept) when there is none.
  bool cudnn_ready();

  // Grows the route's device arrays and cuDNN's workspace; a move drops the recorded graphs (they
  // hold the old addresses).
  void ensure_cudnn_buffers(size_t buf_bytes, size_t workspace);

  // The routed tiles of the standing plan through cuDNN, then the raw importance of their score
  // tiles (a.importance set: attention_with_importance) in the separate importance kernel.
  void run_cudnn(const kernels::AttentionArgs& a);

  int device_ = 0;
  BackendOptions options_;
  DeviceTraits traits_;  // what the policies know of this device
  std::string name_;
  DevicePtr flags_;
  PinnedPtr host_flags_;
  HostStaging staged_upload_, staged_download_;  // stage_upload / stage_download
  DevicePtr staging_;
  std::unique_ptr<kernels::GemmLt> gemm_;
  std::unique_ptr<kernels::AttentionWorkItem, CudaFree> work_;
  DevicePtr work_count_;
  int64_t work_capacity_ = 0;
  std::optional<PlanKey> plan_;                     // the standing plan_attention / plan_attention_verify plan, if any
  std::optional<CudnnRoute> route_;                 // its tiles that run in cuDNN (plan_attention only)
  CudnnChoice cudnn_;                               // cudnn_choice(options_)
  std::unique_ptr<kernels::CudnnSdpa> cudnn_sdpa_;  // created on the first route (null: unavailable)
  bool cudnn_tried_ = false;
  // Why there is no cuDNN path (or the last refused bucket's reason); the (batch, max_q, max_kv)
  // buckets cuDNN refused.
  std::string cudnn_why_;
  std::set<std::array<int32_t, 3>> cudnn_refused_;
  int64_t routed_calls_ = 0;
  std::vector<int32_t> cudnn_host_;
  DevicePtr cudnn_buf_, cudnn_ws_;
  DevicePtr select_partials_, select_arrivals_, select_filter_;  // ensure_select_scratch
  DevicePtr fp8_scratch_;                                        // ensure_fp8_scratch
  size_t fp8_scratch_bytes_ = 0;
  int64_t select_partials_n_ = 0, select_rows_ = 0;
  size_t cudnn_buf_bytes_ = 0, cudnn_ws_bytes_ = 0;
  FlashChoice flash_;  // flash_choice(options_.attention, traits_)
  bool graphs_ = true;
  RowPadding row_padding_;   // Backend::row_padding: row_padding_for(options_.row_padding)
  GraphCache graphs_cache_;  // run_recorded's graphs
  // Declared last, destroyed first: StreamDestroy waits for queued work before anything above is freed.
  StreamPtr stream_owner_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace flashdllm::cuda_impl
