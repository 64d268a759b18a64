// The model: config + weights + one forward function for every family, written once over
// backend.h (LLaDA reference §A.3; Dream = the same block with GQA and q/k/v biases).
//
//   h = embed[x]
//   for each layer:  a = RMSNorm(h); q = a·Wqᵀ (+bq); k = a·Wkᵀ (+bk); v = a·Wvᵀ (+bv)
//                    q,k = per-head RMSNorm(q,k) (ModelConfig::qk_norm: LLaDA-MoE)
//                    q,k = RoPE(q,k); K/V -> store rows (n_kv_heads heads each)
//                    h += Attn(q, K, V)·Woᵀ   (query head j reads K/V head j / (n_heads / n_kv_heads))
//                    f = RMSNorm(h);  h += (SiLU(f·Wgateᵀ) ⊙ f·Wupᵀ)·Wdownᵀ
//                      MoE (ModelConfig::moe): experts, weights = route(f·Wrouterᵀ) (Backend::moe_route);
//                      h += Σ_experts weight · SwiGLU_e(f) (Backend::moe_experts)
//   logits = RMSNorm(h)[logit rows] · Wheadᵀ  (row t = the model's output at row t; a family with
//                                             ModelConfig::logit_shift predicts position p from row p-1,
//                                             which the denoiser applies, never the forward)
//
// The caller (a denoiser) describes one forward with a ForwardBatch: the query rows (token id,
// RoPE position, K/V store row), an attention schedule (tiles of query rows x store rows) and the
// rows whose logits it needs. Full recompute = every position is a query row and its own store row;
// cached modes (Fast-dLLM, Flash-Cache) query a subset and read the rest from a persistent KvCache.
//
// Tensor parallelism (Megatron-LM layout, Shoeybi et al. 2019 §3; SPMD ranks): rank r of N holds the
// q rows of query heads [r·H/N, (r+1)·H/N) and the k/v rows (and biases) of K/V heads
// [r·Hkv/N, (r+1)·Hkv/N) (column-parallel; a query head's K/V head is on the same rank because
// H/N is a multiple of H/Hkv), attn_out's input columns of its query heads (row-parallel), the
// gate/up rows of mlp columns [r·F/N, (r+1)·F/N) and ff_out's matching columns, the LM-head rows of
// vocabulary [r·V/N, (r+1)·V/N); embedding and norms are replicated.
// Its K/V stores hold the local K/V heads only. The forward all-reduces h after attn_out and after
// ff_out (rank 0 adds the residual, the others contribute their partial product alone), all-gathers
// the logits' column blocks, and all-reduces Flash-Cache's attention importance once per forward.
// With no communicator (Model::tp default) the forward is the unsharded one, op for op.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "flashdllm/precision.h"
#include "io/safetensors.h"
#include "model/model_config.h"

namespace flashdllm {

class Communicator;

/// A rank's place in a tensor-parallel group (SPMD: every rank runs the same forward on its shard).
struct TensorParallel {
  int rank = 0;                  ///< in [0, world)
  int world = 1;                 ///< ranks sharing the model
  /// The collectives (backend/comm.h). nullptr (world 1 only): the unsharded forward, op for op.
  /// Set with world 1 too, the forward runs its collective path (a TP = 1 test of a transport).
  Communicator* comm = nullptr;
};

/// The slice of the model a rank holds (see the file comment): local query heads [head_begin,
/// head_begin + heads), K/V heads [kv_head_begin, kv_head_begin + kv_heads), mlp columns [mlp_begin,
/// mlp_begin + mlp), LM-head rows [vocab_begin, vocab_begin + vocab). World 1: everything.
struct ModelShard {
  int64_t heads = 0, head_begin = 0;
  int64_t kv_heads = 0, kv_head_begin = 0;
  int64_t mlp = 0, mlp_begin = 0;
  int64_t vocab = 0, vocab_begin = 0;
};
/// The shard of `tp.rank` of `tp.world`. Throws Error(kInvalidArgument) naming the size when
/// n_kv_heads (hence n_heads), mlp_hidden_size or embedding_size is not divisible by the world
/// size (a MoE model: every expert's width too, each rank holding every expert's slice of columns), or
/// for a rank outside [0, world).
ModelShard model_shard(const ModelConfig& cfg, const TensorParallel& tp);

/// One rank's weights (the whole model at world 1); Hl = local query heads · head_dim, Kl = local
/// K/V heads · head_dim, Fl = local mlp columns, Vl = local LM-head rows (model_shard).
/// MoE (ModelConfig::moe, world 1 only): w_gate_up and ff_out hold every expert, e first.
struct LayerWeights {
  Tensor attn_norm;  // [d_model]
  Tensor wqkv;       // [Hl + 2·Kl, d_model]: rows q_proj | k_proj | v_proj of the local heads
  Tensor bqkv;       // [Hl + 2·Kl]: their biases q | k | v (ModelConfig::qkv_bias), else empty
  Tensor q_norm;     // [head_dim]: per-head q RMSNorm weight (ModelConfig::qk_norm), else empty
  Tensor k_norm;     // [head_dim]: per-head k RMSNorm weight (ModelConfig::qk_norm), else empty
  Tensor attn_out;   // [d_model, Hl]: the local heads' input columns
  Tensor ff_norm;    // [d_model]
  Tensor router;     // MoE: [n_experts, d_model] (mlp.gate); dense: empty
  Tensor w_gate_up;  // dense: [2·Fl, d_model]: rows ff_proj (gate) | up_proj of the local mlp columns;
                     // MoE: [n_experts, 2·F, d_model]: expert e's gate rows | up rows
  Tensor ff_out;     // dense: [d_model, Fl] (down projection, the local input columns); MoE: [n_experts, d_model, F]
  // Block-FP8 weights (ModelWeights::fp8_layers; world 1, dense): wqkv, attn_out, w_gate_up and
  // ff_out are F8E4M3 and these their F32 block scales [ceil(rows/128), ceil(cols/128)] (core/fp8.h;
  // the forward's linear() then runs Backend::matmul_fp8). Empty otherwise.
  Tensor wqkv_scale, attn_out_scale, w_gate_up_scale, ff_out_scale;
  /// FP8 K/V cache (KvCacheDtype::kFp8): F32 [2·local K/V heads], the static per-head scales of the
  /// K rows then the V rows (QkvExtras::kv_scale; 1.0 each, docs/decisions.md); empty otherwise.
  Tensor kv_scale;
};

/// All weights on the backend's device, in its weight dtype, in one allocation.
struct ModelWeights {
  Tensor wte;      // [embedding_size, d_model] (replicated)
  std::vector<LayerWeights> layers;
  Tensor ln_f;     // [d_model]
  Tensor lm_head;  // [Vl, d_model]  (the LM head's rows of the local vocabulary; the embedding's when tied)
  Tensor lm_head_scale;     // F32 block scales when lm_head is F8E4M3 (an FP8 checkpoint's FP8 head), else empty
  bool fp8_layers = false;  ///< the layers' linear weights are block-FP8 (LayerWeights)
  bool fp8_kv = false;      ///< the K/V rows are stored as e4m3 (LayerWeights::kv_scale)
  Buffer storage;
  size_t bytes = 0;
};

/// Bytes of device memory the weights of `cfg` (rank `tp`'s shard of them) take on `backend` (its
/// weight dtype, packed and aligned as load_model_weights lays them out; block-FP8 layers when
/// cfg.fp8_checkpoint or `precision` says so, the LM head unquantised), without allocating
/// anything. Throws as model_shard.
size_t model_weight_bytes(const Backend& backend, const ModelConfig& cfg, const TensorParallel& tp = {},
                          const ModelPrecision& precision = {});
/// The same for weights of dtype `weight` (e.g. bf16 on a machine without the device).
size_t model_weight_bytes(DType weight, const ModelConfig& cfg, const TensorParallel& tp = {},
                          const ModelPrecision& precision = {});

/// Copies (and converts to the backend's weight dtype) the tensors of a validated checkpoint, or the
/// slices of them rank `tp` holds: row slices (q/k/v, gate/up, LM head) straight from the mapped
/// file, column slices (attn_out, ff_out) through a host staging copy of the strided rows.
/// Block FP8 (core/fp8.h): an FP8 checkpoint (cfg.fp8_checkpoint) keeps its e4m3 weights and
/// scales (an F8_E4M3 LM head too); precision.quantization kFp8 quantises the linear layers of a
/// BF16 / F16 / F32 checkpoint in 128 x 128 blocks while loading (quantize_fp8_blocks; the LM head
/// stays unquantised). precision.kv_cache_dtype kFp8 adds the K/V scales (LayerWeights::kv_scale).
/// Throws as validate_model_checkpoint and model_shard, Error(kUnsupported) for FP8 weights with
/// tensor parallelism or a mixture-of-experts model, or with n_heads·head_dim, n_kv_heads·head_dim
/// or mlp_hidden_size not a multiple of 128 (fused q|k|v and gate|up share one block grid), or where
/// the backend lacks the route (Backend::check_precision); Error(kOutOfMemory) when the device
/// cannot hold them.
ModelWeights load_model_weights(Backend& backend, const Checkpoint& ckpt, const ModelConfig& cfg,
                                const TensorParallel& tp = {}, const ModelPrecision& precision = {});

/// Seeded random weights of the config's shapes (N(0, 0.02) matrices, norm weights 1), for
/// benchmarks without a checkpoint (`--load-format dummy`). Each tensor's values are keyed by its
/// element index in the unsharded tensor (Backend::fill_normal with a FillWindow), so rank `tp`
/// gets exactly its slice of the unsharded dummy model. An FP8 K/V cache (precision) gets scales 1.0;
/// block-FP8 weights (precision.quantization kFp8) are the same values made in fp32 on the host and
/// quantised in 128 x 128 blocks (quantize_fp8_blocks), as a BF16 checkpoint is at load; refused as
/// load_model_weights refuses them. Throws as model_shard.
ModelWeights make_dummy_weights(Backend& backend, const ModelConfig& cfg, uint64_t seed, const TensorParallel& tp = {},
                                const ModelPrecision& precision = {});

/// RoPE cos/sin tables for positions [0, max_positions) on the backend's device.
struct RopeTables {
  RopeTable table;
  Buffer storage;
};

/// Builds the tables as upstream modeling_llada.py does: inv_freq_i = 1 / theta^(2i/Dh) in fp32,
/// angle = fp32(p) · inv_freq_i (fp32 product), cos/sin of that fp32 angle.
RopeTables make_rope_tables(Backend& backend, const ModelConfig& cfg, int64_t max_positions);

/// Persistent per-layer K/V stores of `rows` rows x (local K/V heads·head_dim), activation dtype
/// (Dream-7B: 4 heads · 128 = 512 values per row and layer, 1/7 of its query width).
/// Full recompute uses one shared scratch store for all layers (`shared_across_layers`).
struct KvStore {
  std::vector<Tensor> k, v;  // per layer, [rows, Kl]
  int64_t rows = 0;
  Buffer storage;
  size_t bytes = 0;
};
/// The stores of rank `tp` (its local heads). Throws as model_shard, Error(kOutOfMemory).
KvStore make_kv_store(Backend& backend, const ModelConfig& cfg, int64_t rows, bool shared_across_layers,
                      const TensorParallel& tp = {});
/// KvStore::bytes of make_kv_store with activation dtype `act`, without allocating anything.
size_t kv_store_bytes(DType act, const ModelConfig& cfg, int64_t rows, bool shared_across_layers,
                      const TensorParallel& tp = {});

/// Optional attention-importance output of a forward (Flash-Cache a_t, reference §D.6): after the
/// attention of every layer l >= first_layer, Backend::attention_importance over the score tiles
/// `tiles` (by convention each slot's masked-window rows), accumulated into `scores`. Score tile i
/// lies inside ForwardBatch::tiles[i]: a sub-range of its query rows, the same key range (so a fused
/// attention kernel scores those rows of its own q·k tiles; Flash-Cache puts a slot's window rows first
/// in its attention tile, one tile per slot, docs/decisions.md).
/// The released Flash-dLLM code is first_layer 2, weight 1 / (block_length · n_heads) (a mean over the
/// window rows and heads), raw q·k; probability_mass = true is the paper's attention-mass variant.
struct ImportanceSpec {
  std::vector<AttentionTile> tiles;  ///< scored rows × keys, tile i inside ForwardBatch::tiles[i]; empty = off
  int64_t first_layer = 2;           ///< first layer counted (0-based)
  float weight = 1.0f;               ///< multiplier of every layer's contribution
  bool probability_mass = false;     ///< false: raw q·k; true: softmax probabilities
  Tensor scores;                     ///< F32 [store rows] on the backend's device; += per layer (caller zeroes)

  bool on() const noexcept { return !tiles.empty(); }
};

/// Host-side description of one forward pass (built by a denoiser once per step).
struct ForwardBatch {
  std::vector<int32_t> token_ids;   // [T] token of each query row
  std::vector<int32_t> positions;   // [T] RoPE position of each query row
  std::vector<int32_t> kv_rows;     // [T] K/V store row each query row writes
  std::vector<AttentionTile> tiles; // attention schedule over query rows x store rows
  std::vector<int32_t> logit_rows;  // [R] query rows whose logits are returned, in order
  std::vector<int32_t> row_keys;    // [R] Gumbel-noise keys of those rows (stable per position)
  ImportanceSpec importance;        // optional attention-importance output (off by default)
  /// A K/V store row that no tile reads and no query row writes, where model_forward may write the
  /// K/V of its padding rows (ForwardWorkspace::padding); -1 (default): the batch's query rows are
  /// not padded. Flash-Cache keeps such a row after its slots' rows.
  int32_t pad_kv_row = -1;

  int64_t n_tokens() const noexcept { return static_cast<int64_t>(token_ids.size()); }
  /// Throws Error(kInvalidArgument) when the vectors are inconsistent (pad_kv_row included: outside
  /// the store, written by a query row or inside a tile's or score tile's keys).
  void validate(int64_t store_rows, int64_t vocab_rows, int64_t max_positions) const;
};

/// Host-side description of one Flash-Verify pass (reference §D.8; built by the Flash-Verify
/// denoiser once per iteration). Per slot one VerifyTile of query rows [kept T | drafts S | masks S
/// | sources n_src] (tokens: the kept rows' tokens, the candidates' draft tokens, [MASK], the source
/// positions' tokens in the mask rows' views; positions: the kept and candidate positions, the
/// candidates' twice, the positions c_i − 1 of a shifted-logit model) whose keys are the listed
/// cache rows plus the tile's own fresh K/V under the isolation mask. The pass reads the K/V cache and never writes it
/// (§F.7).
struct VerifyBatch {
  std::vector<int32_t> token_ids;   // [T] token of each query row
  std::vector<int32_t> positions;   // [T] RoPE position of each query row
  std::vector<int32_t> key_rows;    // [G] gather list of K/V store rows (VerifyTile::k_start/k_end index it)
  std::vector<VerifyTile> tiles;    // one per slot; query ranges disjoint
  std::vector<int32_t> logit_rows;  // [R] query rows whose logits are returned, in order
  std::vector<int32_t> row_keys;    // [R] noise keys of those rows (0 for greedy use)

  int64_t n_tokens() const noexcept { return static_cast<int64_t>(token_ids.size()); }
  /// Throws Error(kInvalidArgument) when the vectors are inconsistent: sizes, token ids outside
  /// [0, vocab_rows), positions outside [0, max_positions), key rows outside [0, store_rows), a tile
  /// outside the query rows / key list or whose groups do not fit (verify_tile_groups_valid),
  /// overlapping tiles, logit rows outside [0, T).
  void validate(int64_t store_rows, int64_t vocab_rows, int64_t max_positions) const;
};

/// Preallocated activations for forwards of up to `max_tokens` query rows and `max_logit_rows`
/// logits rows, plus the device copy of the current ForwardBatch (the "plan"). A workspace made
/// with max_verify_keys > 0 can also run model_verify_forward (tile K/V and the key gather list).
struct ForwardWorkspace {
  int64_t max_tokens = 0, max_logit_rows = 0, max_tiles = 0, max_verify_keys = 0;
  /// How forwards on this workspace pad their row counts (Backend::row_padding of the backend it was
  /// made on; {1, 1}: none). Query rows are padded only where the batch allows it (model_forward:
  /// ForwardBatch::pad_kv_row; model_verify_forward: always), never beyond the capacities above,
  /// and not under tensor parallelism (its layer loop is not recorded).
  Backend::RowPadding padding;
  Tensor x, xn, q, attn, gate_up, act, sel;  // activations (gate_up, act: dense FFN only)
  /// MoE FFN (ModelConfig::moe), in the MLP stage's region: router logits F32 [max_tokens, E], the
  /// routing I32 / F32 [max_tokens, top_k], Backend::moe_experts' scratch. Empty for a dense model.
  Tensor router_logits, expert_ids, expert_weights, moe_scratch;
  Tensor scratch;                            // qkv_rope_store scratch
  Tensor logits;                             // F32 [max_logit_rows, embedding_size] (all-gathered)
  Tensor gather;                             // with a communicator: F32 [world · max_logit_rows · Vl], rank r's LM-head output is chunk r
  Tensor ids, positions, kv_rows, logit_rows, row_keys;  // plan, I32
  Tensor tiles;  // plan, I32 [max_tiles, 4]: the attention tiles, then the importance score tiles
  Tensor k_tile, v_tile;                     // verify: fresh K/V of the query rows [max_tokens, Kl]
  Tensor key_rows, verify_tiles;             // verify plan: I32 [max_verify_keys], I32 [max_tiles, 6]
  Buffer storage;
  size_t bytes = 0;
};
/// Sized for rank `tp` (local heads and mlp columns; the gather staging when tp.comm is set).
/// The attention stage's buffers (q, attn, scratch, k_tile, v_tile) and the MLP's (gate_up, act)
/// share one region: within a layer the attention stage is done (attn_out has read attn) before the
/// MLP writes gate_up, and the MLP (ff_out has read act) before the next layer's attention stage, so
/// a token row costs x + xn + max(the two stages) = 88 KiB instead of 128 KiB at LLaDA-8B's bf16 shape.
/// Their contents are therefore only meaningful inside a forward.
/// shared: carve the workspace from this buffer (at least forward_workspace_bytes of the same sizes;
/// it stays the caller's, ForwardWorkspace::storage is left empty) instead of allocating one, e.g.
/// two workspaces that are never in use at the same time (Flash-Cache's main and verify passes).
/// Throws Error(kInvalidArgument) for non-positive sizes or a too small shared buffer, as
/// model_shard, Error(kOutOfMemory).
ForwardWorkspace make_forward_workspace(Backend& backend, const ModelConfig& cfg, int64_t max_tokens,
                                        int64_t max_logit_rows, int64_t max_tiles, int64_t max_verify_keys = 0,
                                        const TensorParallel& tp = {}, const Buffer* shared = nullptr);
/// ForwardWorkspace::bytes of make_forward_workspace with activation dtype `act`, without allocating.
size_t forward_workspace_bytes(DType act, const ModelConfig& cfg, int64_t max_tokens, int64_t max_logit_rows,
                               int64_t max_tiles, int64_t max_verify_keys = 0, const TensorParallel& tp = {});

/// Loaded model (one rank's shard of it under tensor parallelism): config (always the whole
/// model's), device weights, RoPE tables and the rank's place.
struct Model {
  ModelConfig config;
  ModelWeights weights;
  RopeTables rope;
  TensorParallel tp;
};

/// Runs the forward described by `batch` and returns the logits of batch.logit_rows:
/// a view of ws.logits, F32 [R, embedding_size], valid until the next call. Uploads the plan
/// once, then runs every layer from it; no host synchronisation except the plan upload.
/// Under tensor parallelism every rank of model.tp calls it with the same batch (their logits and
/// importance scores come out identical). Throws Error(kInvalidArgument) if the batch exceeds the
/// workspace or is inconsistent, or kv / ws were made for another rank shape; collectives' errors.
Tensor model_forward(Backend& backend, const Model& model, const ForwardBatch& batch, KvStore& kv,
                     ForwardWorkspace& ws);

/// Runs a Flash-Verify pass (reference §D.8) and returns the logits of batch.logit_rows (a view of
/// ws.logits, F32 [R, embedding_size], valid until the next call; the denoiser asks for the mask
/// rows, tests for any row). Same layer stack as model_forward (one shared layer loop), except the
/// attention stage: q/k/v + RoPE of the query rows go to the workspace's k_tile/v_tile (not to the
/// K/V cache `kv`, which is only read) and Backend::attention_verify applies the tiles.
/// Throws Error(kInvalidArgument) if the batch is inconsistent or exceeds the workspace (which must
/// have been made with max_verify_keys >= batch.key_rows.size()).
Tensor model_verify_forward(Backend& backend, const Model& model, const VerifyBatch& batch, const KvStore& kv,
                            ForwardWorkspace& ws);

}  // namespace flashdllm
