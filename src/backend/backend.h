// The small set of operations the LLaDA model and the denoisers need from a compute backend.
//
// The model code (src/model/model.cpp) is written once against this interface; the CPU backend
// (src/backend/cpu, fp32, OpenBLAS, the oracle) always builds, the CUDA backend (src/backend/cuda,
// bf16 storage, fp32 accumulation) builds with FLASHDLLM_CUDA=ON. Every op of the CUDA backend
// has a CPU twin with the same signature and a test comparing the two (tests/kernels/).
//
// Conventions
//  * All tensors are contiguous row-major views (core/tensor.h) living on this backend's device.
//  * "Activation dtype" (F32 on CPU, BF16 on CUDA) is used for hidden states, q, K/V stores.
//    "Weight dtype" (F32 on CPU, BF16 on CUDA) for all weights, except block-FP8 linear weights:
//    F8E4M3 with F32 block scales (matmul_fp8). Logits and confidences are F32/F64.
//  * Ops are asynchronous with respect to the host on CUDA (one stream per backend);
//    copy_to_host() and synchronize() are the only points that wait.
//  * Every op validates shapes and dtypes and throws Error(kInvalidArgument) naming the op and
//    the operand on mismatch; device failures throw Error(kDevice) naming the call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/moe_routing.h"
#include "core/tensor.h"
#include "core/verify_mask.h"
#include "flashdllm/backend_options.h"

namespace flashdllm {

/// One row of an attention schedule ("block table"): query rows [q_start, q_end) attend,
/// bidirectionally, to the K/V store rows [k_start, k_end). Stored as 4 consecutive I32.
struct AttentionTile {
  int32_t q_start, q_end, k_start, k_end;
};

/// True when `s` is a non-empty sub-range of tile `a`'s query rows with `a`'s key range: what a score
/// tile of Backend::attention_with_importance (and ImportanceSpec) must be for the tile it scores.
constexpr bool score_tile_inside(const AttentionTile& s, const AttentionTile& a) noexcept {
  return a.q_start <= s.q_start && s.q_start < s.q_end && s.q_end <= a.q_end && s.k_start == a.k_start &&
         s.k_end == a.k_end;
}

/// The host copy of a forward's attention schedule, handed to Backend::plan_attention() beside the
/// device table: `tiles` row for row what the table holds, `score_tiles` the score tiles that the
/// forward's attention_with_importance() calls pass (ImportanceSpec::tiles; may be empty). The
/// CUDA backend reads it to route tiles without waiting for the device: tiles of at least
/// 256 query rows (BackendOptions::cudnn_attention auto or prefill, the default) or every tile
/// (all) run in cuDNN's fused attention, their score tiles' importance in a separate kernel.
/// head_dim, scale and kv_heads (the K/V heads of the stores; 0: as many as the query heads) are
/// those of the calls to come (a call with others runs every tile on the backend's own kernel). The arrays must stay
/// valid for the plan_attention() call only; the calls' score tables must hold `score_tiles` (the CUDA backend keeps
/// its own copy of the routed tiles' score tiles). (Pointer + count rather than std::span: the header is also compiled
/// as C++17 by nvcc.)
struct HostAttentionPlan {
  const AttentionTile* tiles = nullptr;
  size_t n_tiles = 0;
  const AttentionTile* score_tiles = nullptr;
  size_t n_score_tiles = 0;
  int head_dim = 0;
  float scale = 0.f;
  int kv_heads = 0;
};

/// One tile of a Flash-Verify pass (reference §D.8), stored as kVerifyTileInts = 6 consecutive I32
/// (core/verify_mask.h). Query rows [q_start, q_end) are, in order, T = (q_end − q_start) − 2·n_cand
/// − n_src "kept" rows, n_cand "draft" rows D_0..D_{S−1}, n_cand "mask" rows M_0..M_{S−1} (S = n_cand;
/// D_i and M_i are the same position, filled with its draft token and with [MASK]) and n_src
/// "source" rows R_0..R_{n_src−1} (a shifted-logit model's queries of the positions c_i − 1 in M_i's
/// view, n_src = S; 0 elsewhere). Their keys are the store rows listed in key_rows[k_start, k_end)
/// (a gather list: the slot's cached K/V, minus the positions recomputed in the tile) followed by
/// the tile's own fresh K/V (k_tile/v_tile rows [q_start, q_end)) under the in-tile mask
/// verify_may_attend(). Valid: verify_tile_groups_valid(q_end − q_start, n_cand, n_src).
struct VerifyTile {
  int32_t q_start, q_end, k_start, k_end, n_cand, n_src;
  /// The kept row count T.
  constexpr int32_t n_kept() const noexcept { return q_end - q_start - 2 * n_cand - n_src; }
};
static_assert(sizeof(VerifyTile) == kVerifyTileInts * sizeof(int32_t), "VerifyTile is a table row of I32");

/// RoPE tables for the half-rotation ("rotate_half"/NeoX) layout, reference §A.3:
/// cos/sin F32 [max_positions, head_dim/2]; angle(p, i) = fp32(p) * inv_freq_i with
/// inv_freq_i = 1 / theta^(2i/head_dim) computed in fp32 (as upstream modeling_llada.py).
struct RopeTable {
  Tensor cos;  // F32 [max_positions, head_dim/2]
  Tensor sin;  // F32 [max_positions, head_dim/2]
};

/// The optional parts of Backend::qkv_rope_store's projection, each off when its tensors are empty:
///  * bias: weight dtype [(H + 2·Hkv)·Dh], added to every projected row before anything else
///    (Qwen2 / Dream's q/k/v biases);
///  * q_norm, k_norm: weight dtype [Dh] each (both or neither): per-head QK RMSNorm before RoPE
///    (OLMoE / LLaDA-MoE `qk_layernorm`, upstream `q_norm(q.reshape(-1, head_dim))`): every query head
///    vector u becomes rmsnorm(u)·q_norm and every key head vector rmsnorm(u)·k_norm, with the
///    cast order of Backend::rmsnorm and epsilon norm_eps (the model's rms_norm_eps).
///  * weight_scale: F32 [ceil(W/128), ceil(D/128)], the block scales of a block-FP8 wqkv (F8E4M3):
///    the projection is then matmul_fp8's (its input quantised per token in 1 x 128 groups);
///  * kv_scale: F32 [2·Hkv], static per-head scales of an FP8 K/V cache (K heads, then V heads):
///    every K and V row written (store or verify tile) is rounded as e4m3_round(value, scale of its
///    head) (core/fp8.h), i.e. kept as e4m3 · scale (--kv-cache-dtype fp8).
struct QkvExtras {
  Tensor bias;
  Tensor q_norm;
  Tensor k_norm;
  float norm_eps = 0.0f;
  Tensor weight_scale;
  Tensor kv_scale;

  bool qk_norm() const noexcept { return q_norm.numel() > 0 || k_norm.numel() > 0; }
};

/// What a selected row's confidence is (Dream `alg`): p(x0) (maskgit_plus, and LLaDA's rule); the
/// top-1 − top-2 probability (topk_margin); Σ_v p_v·log(p_v + 1e-10), the negative entropy (entropy).
enum class SelectConfidence { kProbability, kMargin, kNegEntropy };

/// Parameters of the token-selection op (reference §B, LLaDA generate.py).
struct SelectParams {
  /// Gumbel-max temperature; 0 = plain argmax. Noise is float64, drawn from a counter-based
  /// generator keyed by (seed, step, row_key[r], vocabulary id) so that CPU and CUDA agree.
  double temperature = 0.0;
  uint64_t seed = 0;
  uint64_t step = 0;
  /// Token whose logit is set to -inf before argmax and confidence (LLaDA `logits_eos_inf`); -1 = none.
  int32_t suppress_token = -1;
  /// Token that is never chosen (not an argmax candidate) but keeps its probability in the
  /// confidence's softmax: the denoisers pass the mask id, so a committed position never holds
  /// [MASK] whatever the temperature (upstream can sample it); -1 = none.
  int32_t exclude_token = -1;
  /// Tokens whose probability is zeroed (logit -inf) for the confidence only, after x0 was chosen
  /// (LLaDA `confidence_eos_eot_inf` quirk, reference §B); -1 = none.
  int32_t conf_suppress_a = -1;
  int32_t conf_suppress_b = -1;
  /// Softmax precision for the confidence: true = float64 (Fast-dLLM, Flash-dLLM, LLaDA HEAD),
  /// false = float32 (the precision the golden LLaDA trace margins were computed in).
  bool confidence_f64 = true;

  // Dream's sample_tokens (Dream-org generation_utils.py): the row's distribution is
  // p = softmax(filter(logits / T)) (T = temperature when > 0; filter = top_p, then top_k; removed
  // logits get probability 0), x0 its argmax (T = 0) or a draw from it (Gumbel-max over the kept
  // tokens with the noise above), and the confidence is read from p, as `confidence` says. Off (the
  // defaults): LLaDA's rule above (confidence = the unscaled softmax of x0).
  bool dream_rule = false;
  SelectConfidence confidence = SelectConfidence::kProbability;  ///< dream_rule only
  int32_t top_k = 0;   ///< keep logits >= the k-th largest; 0 = all (dream_rule only)
  double top_p = 1.0;  ///< nucleus: keep tokens up to cumulative probability top_p; 1 = all (dream_rule only)
};

/// Where a fill's destination lies in its parent tensor (Backend::fill_normal).
struct FillWindow {
  int64_t offset = 0;       ///< parent element index of dst's first element
  int64_t parent_cols = 0;  ///< parent row length in elements; 0 = dst's own row length
};

/// The parent row length of `w` over dst (w.parent_cols, or dst's row length when 0). Throws
/// Error(kInvalidArgument) for a negative offset or 0 < parent_cols < dst's row length.
inline int64_t fill_parent_cols(const Tensor& dst, const FillWindow& w) {
  const int64_t cols = dst.row_size();
  FDLLM_CHECK_ARG(w.offset >= 0 && (w.parent_cols == 0 || w.parent_cols >= cols),
                  "fill_normal: window offset {} / parent_cols {} invalid for {} (offset >= 0, parent_cols 0 or >= {})",
                  w.offset, w.parent_cols, dst.describe(), cols);
  return w.parent_cols > 0 ? w.parent_cols : cols;
}

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceKind device() const noexcept = 0;
  /// "cpu (16 threads, OpenBLAS)", "cuda (NVIDIA H200, sm_90)" ...
  virtual std::string name() const = 0;
  virtual DType activation_dtype() const noexcept = 0;
  virtual DType weight_dtype() const noexcept = 0;
  /// The native queue the ops run on, for libraries that enqueue work in the backend's order (NCCL):
  /// CUDA: the backend's cudaStream_t; nullptr for the CPU backend.
  virtual void* native_stream() const noexcept { return nullptr; }
  /// The CUDA device ordinal; -1 for the CPU backend.
  virtual int device_index() const noexcept { return -1; }

  // ---------------------------------------------------------------- memory
  /// Allocates `bytes` on the device. Throws Error(kOutOfMemory) naming `what`.
  virtual Buffer alloc(size_t bytes, const char* what) = 0;
  /// Host -> device copy of dst.nbytes() bytes.
  virtual void copy_from_host(Tensor dst, const void* src) = 0;
  /// Device -> host copy of src.nbytes() bytes; waits for all queued work first.
  virtual void copy_to_host(void* dst, Tensor src) = 0;
  /// Sets every byte of `t` to zero.
  virtual void fill_zero(Tensor t) = 0;
  /// Waits for all queued work.
  virtual void synchronize() = 0;
  /// Bytes of device memory still free (host: available physical memory).
  virtual size_t free_memory() const = 0;

  // ---------------------------------------------------------------- recorded op sequences
  /// Runs `ops`, a sequence of this backend's asynchronous ops (the model's layer loop), or replays
  /// a recording of it. `key` must determine every launch of the sequence: its shapes, its scalar
  /// arguments and every device address it reads or writes (the caller lists them; model.cpp's
  /// recording_key), so that a replay does what a new run would do with the data then in memory.
  /// `ops` must not copy between host and device, synchronise or allocate (data uploads belong
  /// before the call), and nothing it touches may be freed while the key can still be replayed
  /// unless the same addresses are never again passed with the same key.
  /// Default (CPU): runs `ops`. CUDA: the first call with a key runs `ops` op by op; the second
  /// (while the key is among the 64 most recent new keys) captures `ops` into a CUDA graph on the
  /// stream and launches it; later calls launch that graph (at most 64 graphs, least recently used
  /// dropped first) (one launch instead of one per op; reference: CUDA Programming Guide, "CUDA
  /// Graphs", stream capture). A capture that fails (an op that synchronises, e.g. the first call of
  /// a GEMM shape under BackendOptions::gemm_tune) falls back to running `ops`; after two failures the
  /// key is never captured again. Off with BackendOptions::cuda_graphs false or sync kEveryOp.
  /// Errors: those of `ops` (a capture is discarded first, and `ops` rerun directly to raise them).
  virtual void run_recorded(const std::vector<int64_t>& key, const std::function<void()>& ops) {
    (void)key;
    ops();
  }
  /// Row counts a forward pads to on this backend (model_forward / model_verify_forward, through
  /// ForwardWorkspace::padding): query rows up to a multiple of `rows` (below it, the next power of
  /// two from 16), logit rows up to a multiple of `logit_rows`. Padding rows compute results that are
  /// discarded; their point is that forwards of nearby sizes share one run_recorded key (the scheduler's
  /// row counts change with every commit), so a recorded graph is replayed instead of launching op by
  /// op. CUDA: {64, 16} (cuBLASLt's row tiles are 64 or 128 rows at these sizes: rounding up to 64
  /// adds no tile), with or without graphs, so that both compute the same shapes; {1, 1} with
  /// BackendOptions::row_padding false (docs/decisions.md). The CPU backend pads the same way only
  /// with row_padding true (it records nothing, so padding only costs there: for tests and
  /// comparisons). The choice: row_padding_for (backend_policy.h). Default: {1, 1} (no padding).
  struct RowPadding {
    int64_t rows = 1;
    int64_t logit_rows = 1;
  };
  virtual RowPadding row_padding() const { return {}; }

  /// What run_recorded did so far (tests, logs). CPU: all zero.
  struct RecordingStats {
    int64_t direct = 0;    ///< calls that ran `ops` op by op (first sightings, graphs off, failures)
    int64_t captures = 0;  ///< graphs captured (each also ran once)
    int64_t replays = 0;   ///< calls served by launching a stored graph
    int64_t failed = 0;    ///< captures that failed (then run directly)
    int64_t cached = 0;    ///< graphs held now
  };
  virtual RecordingStats recording_stats() const { return {}; }

  /// Attention calls so far that ran some of their tiles in a library kernel instead of the
  /// backend's own (CUDA: cuDNN's fused attention for the tiles plan_attention routed to it; see
  /// HostAttentionPlan). Calls made through the backend: a recorded graph's replays run the kernels
  /// again without a call. 0 on backends without such a route.
  virtual int64_t routed_attention_calls() const { return 0; }

  /// Converts `n` host elements of `src_dtype` (F32/F16/BF16) into the weight tensor `dst`
  /// (weight dtype, numel == n).
  virtual void upload_weight(Tensor dst, DType src_dtype, const void* src) = 0;

  /// Seeded normal fill made on the device (dummy weights, `--load-format dummy`; no host data).
  /// Element i of the (parent) tensor: pairs (i, i+1), i even, come from one Box-Muller transform in
  /// double precision:
  ///   u1 = philox_uniform(seed, stream, i >> 32, i),  u2 = philox_uniform(seed ^ 0x9e3779b97f4a7c15,
  ///   stream, i >> 32, i)  (core/philox.h);  r = sqrt(-2·ln u1) · std;  a = 2π·u2;
  ///   dst[i] = fp32(r·cos a + mean),  dst[i+1] = fp32(r·sin a + mean)  (when i + 1 < numel),
  /// with unfused double multiply and add. std == 0 gives exactly `mean`. `stream` separates tensors
  /// of one seed. `window` places dst inside a larger parent tensor whose element indices key the
  /// values (a tensor-parallel rank's slice of a dummy weight gets exactly the parent's values): dst
  /// as [rows, cols] = [dst.rows(), dst.row_size()], element (r, c) takes parent index
  /// window.offset + r·parent_cols + c (parent_cols 0 = cols: a contiguous run). The default window
  /// is the whole tensor. dst: the weight or activation dtype (CPU: F32; CUDA: BF16, the RNE
  /// rounding of that fp32 value, or F32). Values differ across backends only where their libm
  /// cos/sin/log differ by an ulp (tests/kernels/test_cuda_fill.cpp). Throws
  /// Error(kInvalidArgument) for another dtype, a non-finite mean or std, std < 0, a negative
  /// offset or 0 < parent_cols < cols.
  virtual void fill_normal(Tensor dst, uint64_t seed, uint64_t stream, float mean, float std,
                           const FillWindow& window = {}) = 0;

  // ---------------------------------------------------------------- model ops
  /// out[t, :] = table[ids[t], :].  table [V, D] weight dtype; ids I32 [T] (each in [0, V));
  /// out [T, D] activation dtype.
  virtual void embedding(Tensor table, Tensor ids, Tensor out) = 0;

  /// out = RMSNorm(x) * w: fp32 x * rsqrt(mean(x^2) + eps), rounded to the activation dtype,
  /// then multiplied by w (reference §A.3 cast order). x, out [T, D]; w [D]. out may alias x.
  virtual void rmsnorm(Tensor x, Tensor w, float eps, Tensor out) = 0;

  /// out = x · wᵀ (accumulate: out += x · wᵀ).  x [T, K]; w [N, K] (nn.Linear layout); out [T, N].
  /// out dtype: activation dtype or F32 (for logits).
  virtual void matmul(Tensor x, Tensor w, Tensor out, bool accumulate) = 0;

  /// The block-FP8 linear layer (W8A8 with fp32 accumulation; DeepSeek-V3's block FP8, core/fp8.h):
  ///   x'[t, k]  = e4m3(x[t, k] / s_t,g) · s_t,g,  s_t,g = amax(|x[t, g·128 : (g+1)·128]|) / 448
  ///               (per token, per 1 x 128 group g of K: the dynamic activation quantisation)
  ///   w'[n, k]  = e4m3_to_f32(w[n, k]) · w_scale[n / 128, k / 128]
  ///   out = x' · w'ᵀ (accumulate: out += x' · w'ᵀ), products summed in fp32.
  /// x [T, K] activation dtype; w F8E4M3 [N, K]; w_scale F32 [ceil(N/128), ceil(K/128)] (partial edge
  /// blocks allowed); out [T, N] activation dtype or F32. The CPU backend is the oracle the FP8 GEMM
  /// kernels are tested against. Throws Error(kInvalidArgument) for bad shapes or dtypes. Default:
  /// Error(kUnsupported) naming --quantization fp8 (a backend without an FP8 route).
  virtual void matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
    (void)x, (void)w, (void)w_scale, (void)out, (void)accumulate;
    FDLLM_FAIL(ErrorCode::kUnsupported,
               "matmul_fp8: the {} backend has no FP8 GEMM yet (block-FP8 weights: --quantization fp8 or an FP8 "
               "checkpoint); use --quantization none with a BF16 checkpoint, or the cpu device",
               (device() == DeviceKind::kCUDA ? "CUDA" : "CPU"));
  }

  /// out (+)= SwiGLU(gate_up) · w'ᵀ with a block-FP8 weight: the MLP's down projection, its input
  /// quantisation fused into the SwiGLU where the backend can (CUDA: the SwiGLU values are quantised
  /// as they are made and never written in the activation dtype). gate_up [T, 2F] and act [T, F]
  /// activation dtype (act is scratch: unspecified afterwards); w, w_scale, out as matmul_fp8's with
  /// K = F. The values are those of swiglu(gate_up, act) then matmul_fp8(act, w, w_scale, out,
  /// accumulate), which is the default.
  virtual void swiglu_matmul_fp8(Tensor gate_up, Tensor act, Tensor w, Tensor w_scale, Tensor out, bool accumulate) {
    swiglu(gate_up, act);
    matmul_fp8(act, w, w_scale, out, accumulate);
  }

  /// Throws Error(kUnsupported) naming the option (--quantization fp8 / an FP8 checkpoint,
  /// --kv-cache-dtype fp8) when this backend cannot run FP8 weights (`fp8_weights`) or an FP8 K/V
  /// cache (`fp8_kv`); the model loader calls it before loading anything. Default: neither is
  /// supported (the CPU backend supports both).
  virtual void check_precision(bool fp8_weights, bool fp8_kv) const {
    FDLLM_CHECK(!fp8_weights, ErrorCode::kUnsupported,
                "the {} backend does not run block-FP8 weights yet (--quantization fp8 or an FP8 checkpoint with "
                "quantization_config); use --quantization none with a BF16 checkpoint, or --device cpu",
                (device() == DeviceKind::kCUDA ? "CUDA" : "CPU"));
    FDLLM_CHECK(!fp8_kv, ErrorCode::kUnsupported,
                "the {} backend does not have an FP8 K/V cache yet (--kv-cache-dtype fp8); use --kv-cache-dtype "
                "auto, or --device cpu",
                (device() == DeviceKind::kCUDA ? "CUDA" : "CPU"));
  }

  /// Fused-or-not attention input stage (reference §A.3 and Flash-dLLM §D.5 step 2), with H = n_heads
  /// query heads and Hkv K/V heads of Dh = q_out's width / H values (Hkv = k_store's width / Dh,
  /// dividing H; Hkv < H is grouped-query attention):
  ///   [q | k | v] = xn · wqkvᵀ (+ extra.bias)        xn [T, D]; wqkv [(H + 2·Hkv)·Dh, D]
  ///   q_h, k_h     = RMSNorm(q_h)·q_norm, RMSNorm(k_h)·k_norm   per head (when extra.qk_norm())
  ///   q_out[t]         = rope(q_t, positions[t])     q_out [T, H·Dh]
  ///   k_store[rows[t]] = rope(k_t, positions[t])     k_store, v_store [N, Hkv·Dh]
  ///   v_store[rows[t]] = v_t
  /// See QkvExtras for the bias and the QK-norm. positions, rows: I32 [T]; scratch: activation dtype
  /// [T, (H + 2·Hkv)·Dh] (may be unused). A backend without GQA, bias or QK-norm support throws
  /// Error(kUnsupported) naming the op and the feature.
  virtual void qkv_rope_store(Tensor xn, Tensor wqkv, const QkvExtras& extra, Tensor positions, Tensor rows,
                              const RopeTable& rope, int n_heads, Tensor q_out, Tensor k_store, Tensor v_store,
                              Tensor scratch) = 0;

  /// Plans the attention over `table` (I32 [n_tiles, 4], AttentionTile rows) once for the calls that
  /// follow: every attention() / attention_with_importance() call over this table tensor (same data
  /// pointer and tile count) with q_rows query rows, kv_rows store rows and n_heads heads reuses the
  /// plan instead of making its own. The model calls it once per forward, after the table's upload,
  /// so no layer plans again (CUDA: the tensor-core kernel's work list, made on the device; nothing
  /// waits for the host). A call over another table plans for itself as before and drops the plan;
  /// so do a later plan_attention / plan_attention_verify and a write into the table's memory
  /// through this backend (copy_from_host, fill_zero). Default (CPU): nothing to plan.
  /// `host` (optional) is the host copy of what the tables hold; with it the CUDA backend routes
  /// the long plain tiles (admission prefills) to cuDNN's fused attention (HostAttentionPlan).
  /// Throws Error(kInvalidArgument) for a table that is not I32 [n_tiles, 4], negative row counts,
  /// n_heads < 1 or a non-empty host.tiles of another length than the table.
  virtual void plan_attention(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads,
                              const HostAttentionPlan& host = {}) {
    check_plan_args(table, 4, q_rows, kv_rows, n_heads, "plan_attention");
    check_host_plan(table, host, "plan_attention");
  }

  /// plan_attention() for attention_verify() calls over `table` (I32 [n_tiles, 6], VerifyTile rows)
  /// with q_rows query rows and n_keys gathered key rows; the same reuse and invalidation rules.
  virtual void plan_attention_verify(Tensor table, int64_t q_rows, int64_t n_keys) {
    check_plan_args(table, kVerifyTileInts, q_rows, n_keys, 1, "plan_attention_verify");
  }

  /// Bidirectional multi-head attention, softmax(q·kᵀ·scale)·v per head with fp32 online softmax,
  /// over the tiles of `table` (I32 [n_tiles, 4] = AttentionTile rows). q, out [Tq, H·Dh];
  /// k_store, v_store [N, Hkv·Dh] with Hkv dividing H = n_heads: query head h reads K/V head
  /// h / (H / Hkv) (grouped-query attention; Hkv = H is plain multi-head attention; the same rule
  /// holds for attention_verify's stores and tile K/V and attention_importance's keys). Query rows
  /// not covered by a tile are left untouched.
  virtual void attention(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                         Tensor out) = 0;

  /// Flash-Verify attention (reference §D.8, Flash-dLLM `_flash_verify_attention_fwd`), per tile of
  /// `table` (I32 [n_tiles, 6] = VerifyTile rows) and head h, for every query row r of the tile:
  ///   keys = { k_store[key_rows[g]] : g ∈ [k_start, k_end) }  ∪  { k_tile[c] : c ∈ [q_start, q_end),
  ///          verify_may_attend(T, S, r − q_start, c − q_start) }   (values likewise from v_store / v_tile;
  ///          T = VerifyTile::n_kept(), S = n_cand; source columns are seen by no row)
  ///   out[r, h] = softmax(scale · q[r, h] · keysᵀ) · values
  /// with one softmax over both parts (a proper running maximum across them; the released kernel
  /// folds the in-tile block in with the cache part's maximum, §F.8). Every row sees at least its
  /// own column (a source row R_i the column M_i), so an empty gather range is allowed. The tile's
  /// fresh K/V live in k_tile/v_tile (indexed like q), never in the stores: the verify pass does not
  /// write the KV cache (§F.7). q, out [Tq, H·Dh]; k_tile, v_tile [Tq, Hkv·Dh]; k_store, v_store
  /// [N, Hkv·Dh] (activation dtype); key_rows I32 [G], entries in [0, N). Query rows outside every
  /// tile are left untouched. CPU: scores and softmax in double; CUDA: fp32 online softmax. Throws
  /// Error(kInvalidArgument) for bad shapes or dtypes, a tile outside [0, Tq) x [0, G) or whose
  /// groups are not verify_tile_groups_valid, or (CPU; CUDA reports it at the next synchronising
  /// call) a key row outside the store.
  virtual void attention_verify(Tensor q, Tensor k_store, Tensor v_store, Tensor key_rows, Tensor k_tile,
                                Tensor v_tile, Tensor table, int n_heads, float scale, Tensor out) = 0;

  /// Attention importance of keys (Flash-dLLM's a_t, reference §D.6 / §F.2), accumulated:
  ///   scores[t] += weight · Σ_{tiles} Σ_{r ∈ [q_start, q_end)} Σ_{h < n_heads} f(r, h, t)   for t ∈ [k_start, k_end)
  /// with, per (query row r, head h) of a tile and key t of the same tile,
  ///   raw (probability_mass = false; the released code):  f = q[r,h] · k_store[t,h]
  ///        (unscaled dot product of the rotated vectors, before softmax; can be negative);
  ///   probability mass (the paper's "captured attention"): f = softmax over the tile's keys t' of
  ///        scale · q[r,h] · k_store[t',h], evaluated at t (each tile's key range is taken as the whole
  ///        key set of its query rows, as in the Flash-Cache schedules).
  /// q [Tq, H·Dh] and k_store [N, Hkv·Dh] activation dtype (the operands attention() used); table I32
  /// [n_tiles, 4] AttentionTile rows (typically the masked-window tiles of the attention schedule);
  /// scores F32 [N], indexed by store row; keys outside every tile are left untouched. weight: finite.
  /// Dot products and sums at least in fp32 (CPU: double, one rounding per key and call; CUDA: fp32
  /// with float atomics, so the summation order over heads / tiles is not fixed).
  /// A fused attention kernel can produce the raw variant in the same pass (it already forms q·k for
  /// every (row, key) of a tile: reduce the tile's rows and the head in registers, one atomic add per
  /// key); the probability variant needs each row's final log-sum-exp, i.e. a second sweep over the
  /// keys (or the lse written by the attention kernel and a light follow-up kernel).
  /// Throws Error(kInvalidArgument) for bad shapes/dtypes or a tile outside q rows / store rows.
  virtual void attention_importance(Tensor q, Tensor k_store, Tensor table, int n_heads, float scale,
                                    bool probability_mass, float weight, Tensor scores) = 0;

  /// attention() over `table`, then attention_importance(q, k_store, score_table, n_heads, scale,
  /// probability_mass = false, weight, scores): the raw q·k importance of the masked-window rows
  /// (reference §D.6, the released code's a_t) in the same call. score_table: I32 [n_scored, 4]
  /// AttentionTile rows, n_scored <= n_tiles, row i a non-empty sub-range of table row i's query rows
  /// with the same key range (the rows of that tile to score). The default runs the two ops (CPU:
  /// checks the sub-range rule first); the CUDA backend's flash kernel sums the scored rows of its own
  /// q·k tiles instead (one pass over K; float atomics, so the summation order is not fixed) and
  /// reports a score tile outside its tile as kErrAttentionTile at the next synchronising call.
  /// Operands otherwise as for the two ops.
  virtual void attention_with_importance(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads,
                                         float scale, Tensor out, Tensor score_table, float weight, Tensor scores) {
    attention(q, k_store, v_store, table, n_heads, scale, out);
    if (score_table.numel() > 0) attention_importance(q, k_store, score_table, n_heads, scale, false, weight, scores);
  }

  /// out[t, f] = SiLU(gate_up[t, f]) · gate_up[t, F + f].  gate_up [T, 2F]; out [T, F].
  virtual void swiglu(Tensor gate_up, Tensor out) = 0;

  /// out[r, :] = x[rows[r], :].  x [T, D]; rows I32 [R]; out [R, D].
  virtual void gather_rows(Tensor x, Tensor rows, Tensor out) = 0;

  /// out[r] = x[r, cols[r]]: one element per row.  x F32 [R, V]; cols I32 [R]; out F32 [R].
  /// A column outside [0, V) gives NaN (no error): e.g. the argmax select_tokens leaves on a row
  /// without a finite logit. Flash-Verify's p(draft) reads ℓ_draft and ℓ_argmax this way, on the
  /// device, so that they come back in the selection's one copy (denoise/flash_cache.cpp).
  virtual void gather_columns(Tensor x, Tensor cols, Tensor out) = 0;

  // ---------------------------------------------------------------- mixture of experts
  /// Routing of a mixture-of-experts FFN (core/moe_routing.h has the algorithm): per row t of
  /// router_logits (F32 [T, E], E = routing.n_experts), the top_k experts and their weights:
  /// expert_ids I32 [T, k] (descending selection key; ties: the lower expert first), expert_weights
  /// F32 [T, k]. expert_bias: F32 [E] when routing.expert_bias, else empty. A non-finite logit gives
  /// NaN weights (no error: the confidences turn non-finite and the denoiser reports the slot).
  /// CPU: softmax in double, rounded to fp32 (upstream: fp32). Throws Error(kInvalidArgument) for bad
  /// shapes or dtypes, Error(kUnsupported) naming the switch for a routing the backend lacks.
  /// Default: Error(kUnsupported) (a backend without MoE).
  virtual void moe_route(Tensor router_logits, Tensor expert_bias, const MoeRouting& routing, Tensor expert_ids,
                         Tensor expert_weights) {
    (void)router_logits, (void)expert_bias, (void)routing, (void)expert_ids, (void)expert_weights;
    unsupported_op("moe_route", "mixture-of-experts routing");
  }

  /// The routed experts of a mixture-of-experts FFN (SwiGLU experts, OLMoE / Mixtral layout):
  ///   y_t = Σ_{j < k, in ascending expert order} expert_weights[t, j] ·
  ///         (SiLU(x_t·G_eᵀ) ⊙ x_t·U_eᵀ)·W_eᵀ          e = expert_ids[t, j]
  ///   out[t] = y_t (accumulate: out[t] += y_t, the sum y_t formed first, as upstream adds the
  ///   expert sum to the residual)
  /// x [T, D] activation dtype; w_gate_up [E, 2F, D] weight dtype (expert e's gate rows, then its
  /// up rows); w_down [E, D, F]; expert_ids I32 / expert_weights F32 [T, k] (moe_route's output);
  /// out [T, D] activation dtype (must not alias x); scratch activation dtype with at least
  /// moe_scratch_elements(T, k, E, D, F) elements: the rows permuted into per-expert groups and their
  /// gate/up, SwiGLU and down outputs (an expert that receives no row costs nothing).
  /// Throws Error(kInvalidArgument) for bad shapes, dtypes or an expert id outside [0, E).
  /// Default: Error(kUnsupported).
  virtual void moe_experts(Tensor x, Tensor expert_ids, Tensor expert_weights, Tensor w_gate_up, Tensor w_down,
                           Tensor out, bool accumulate, Tensor scratch) {
    (void)x, (void)expert_ids, (void)expert_weights, (void)w_gate_up, (void)w_down, (void)out, (void)accumulate;
    (void)scratch;
    unsupported_op("moe_experts", "mixture-of-experts FFNs");
  }

  /// Elements of moe_experts' scratch for T rows, top_k experts each, E experts, width D and expert
  /// width F: T·k·(2·D + 3·F) (CPU: permuted rows, gate|up, SwiGLU output, expert outputs; CUDA: fp32
  /// expert outputs, gate|up, SwiGLU output) + T·D (CPU: the sums) + 8·(T·k + E) + 32 (CUDA: the
  /// int32 sort and tile list of kernels/cuda/moe.h, 16-byte aligned regions).
  static constexpr int64_t moe_scratch_elements(int64_t T, int64_t top_k, int64_t E, int64_t D, int64_t F) noexcept {
    return T * top_k * (2 * D + 3 * F) + T * D + 8 * (T * top_k + E) + 32;
  }

  // ---------------------------------------------------------------- denoiser ops
  /// Classifier-free guidance (reference §B): out = uncond + (scale + 1)·(cond − uncond). F32 [R, V].
  /// out may alias cond.
  virtual void cfg_combine(Tensor cond, Tensor uncond, float scale, Tensor out) = 0;

  /// Per logits row r (F32 [R, V]): x0[r] = argmax_v(logits[r, v] + Gumbel noise·temperature) over
  /// v other than suppress_token and exclude_token, conf[r] = softmax(logits[r])[x0[r]] (see
  /// SelectParams). A row holding NaN or +Inf gives a NaN confidence (callers treat a non-finite
  /// confidence as a broken model). row_keys I32 [R] key the noise; x0 I32 [R]; conf F64 [R].
  virtual void select_tokens(Tensor logits, Tensor row_keys, const SelectParams& params, Tensor x0, Tensor conf) = 0;

 protected:
  /// Throws Error(kUnsupported): `op` (doing `what`) is not implemented on this backend.
  [[noreturn]] void unsupported_op(const char* op, const char* what) const {
    FDLLM_FAIL(ErrorCode::kUnsupported, "{}: {} not implemented on the {} backend yet", op, what, name());
  }
  /// The argument checks of plan_attention / plan_attention_verify (tile_ints 4 or 5 I32 per tile).
  static void check_plan_args(const Tensor& table, int64_t tile_ints, int64_t q_rows, int64_t kv_rows, int n_heads,
                              const char* op) {
    FDLLM_CHECK_ARG(table.dtype == DType::kI32 && table.numel() % tile_ints == 0,
                    "{}: table must be I32 [n_tiles, {}], got {}", op, tile_ints, table.describe());
    FDLLM_CHECK_ARG(q_rows >= 0 && kv_rows >= 0 && n_heads >= 1,
                    "{}: q_rows {} and key rows {} must be >= 0, n_heads {} >= 1", op, q_rows, kv_rows, n_heads);
  }
  /// plan_attention's host copy: empty, or one AttentionTile per table row and no more score tiles.
  static void check_host_plan(const Tensor& table, const HostAttentionPlan& host, const char* op) {
    const auto n_tiles = static_cast<size_t>(table.numel() / 4);
    FDLLM_CHECK_ARG((host.n_tiles == 0 && host.n_score_tiles == 0) ||
                        (host.n_tiles == n_tiles && host.n_score_tiles <= n_tiles && host.tiles != nullptr &&
                         (host.n_score_tiles == 0 || host.score_tiles != nullptr)),
                    "{}: the host plan has {} tiles and {} score tiles for a table of {} tiles", op, host.n_tiles,
                    host.n_score_tiles, n_tiles);
  }
  /// attention_with_importance's tables: both I32 [n, 4], no more score tiles than tiles.
  static void check_score_table_args(const Tensor& table, const Tensor& score_table, const char* op) {
    FDLLM_CHECK_ARG(table.dtype == DType::kI32 && score_table.dtype == DType::kI32 && table.numel() % 4 == 0 &&
                        score_table.numel() % 4 == 0 && score_table.numel() <= table.numel(),
                    "{}: table ({}) and score_table ({}) must be I32 [n, 4] with no more score tiles than tiles", op,
                    table.describe(), score_table.describe());
  }
};

/// The most worker threads the CPU backend accepts: 4 x the hardware threads
/// (std::thread::hardware_concurrency, at least 1). More only slows every parallel region down
/// (1000 threads on 2 cores: > 180 s instead of 23 s) and far more overflows libgomp (100000).
int max_cpu_threads() noexcept;

/// Throws Error(kInvalidArgument) naming `threads` when it is negative or above max_cpu_threads().
void check_cpu_threads(int threads);

/// Creates the CPU backend with `threads` worker threads (0 = OpenMP's default: OMP_NUM_THREADS, else
/// all hardware threads); of `options` it reads row_padding only. Throws Error(kInvalidArgument)
/// naming `threads` when it is negative or above max_cpu_threads(), or naming OMP_NUM_THREADS when
/// threads = 0 and that asks for more.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0, const BackendOptions& options = {});

/// Creates the CUDA backend on device `device_index` running as `options` say (forced routes are
/// checked against the device: Error(kUnsupported) naming the option for a kernel it cannot run).
/// Throws Error(kUnsupported) when the library was built without CUDA, Error(kDevice) when no usable
/// GPU exists, Error(kInvalidArgument) as validate_backend_options.
std::unique_ptr<Backend> make_cuda_backend(int device_index = 0, const BackendOptions& options = {});

/// The backend of a device string for device rank `rank` of `world` (the engine's every rank of
/// every data-parallel replica; 1 without parallelism): "cpu" is make_cpu_backend with `threads` (0 = all hardware
/// threads) split evenly between the ranks (at least one each); "cuda" or "cuda:N" is GPU N + rank (N = 0 for "cuda";
/// `threads` unused); both with `options`. Throws Error(kInvalidArgument) naming the string for any other device
/// string, naming the GPUs when N + world exceeds cuda_device_count(), or as the factory called.
std::unique_ptr<Backend> make_backend(const std::string& device, int threads, int rank = 0, int world = 1,
                                      const BackendOptions& options = {});

/// True when this build has the CUDA backend and a CUDA device is present.
bool cuda_available() noexcept;

/// CUDA devices present (0 without CUDA or without a device).
int cuda_device_count() noexcept;

}  // namespace flashdllm
