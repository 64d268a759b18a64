// The forward pass of every family over the backend interface (LLaDA: reference §A.3, HF
// modeling_llada.py LLaDALlamaBlock; Dream: modeling_dream.py DreamDecoderLayer, the same block with
// GQA and q/k/v biases). See model.h for the data flow.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>

#include "backend/comm.h"
#include "core/check.h"
#include "core/log.h"
#include "core/philox.h"
#include "model/model_carver.h"
#include "model/model_checkpoint.h"

namespace flashdllm {
using model_detail::align_up;
using model_detail::Carver;

namespace {

/// The attention stage of one layer: given the normalised input xn [T, D], writes q and the
/// attention output attn [T, H·Dh] (and whatever K/V the mode keeps).
using AttentionStage = std::function<void(int64_t layer, const LayerWeights& lw, Tensor xn, Tensor q, Tensor attn)>;

/// n rows padded as Backend::RowPadding describes for `multiple` (1: n), at most `cap` (and at
/// least n): the next multiple of `multiple`, below it the next power of two from 16.
int64_t padded_rows(int64_t n, int64_t multiple, int64_t cap) {
  if (multiple <= 1 || n <= 0) return n;
  int64_t p = n >= multiple ? (n + multiple - 1) / multiple * multiple : 16;
  while (p < n) p *= 2;
  return std::max(n, std::min(p, cap));
}

/// `v` with `pad` appended until it holds n entries (a copy only when it is shorter).
const std::vector<int32_t>& padded(const std::vector<int32_t>& v, int64_t n, int32_t pad, std::vector<int32_t>& out) {
  if (static_cast<int64_t>(v.size()) >= n) return v;
  out.assign(v.begin(), v.end());
  out.resize(static_cast<size_t>(n), pad);
  return out;
}

/// Uploads the logit rows and their noise keys (part of the plan: before the recorded layer loop),
/// padded to Rp rows with query row 0 (their logits are computed and never returned).
void upload_logit_rows(Backend& be, ForwardWorkspace& ws, const std::vector<int32_t>& logit_rows,
                       const std::vector<int32_t>& row_keys, int64_t Rp) {
  if (Rp == 0) return;
  std::vector<int32_t> rows_p, keys_p;
  be.copy_from_host(ws.logit_rows.slice_rows(0, Rp), padded(logit_rows, Rp, 0, rows_p).data());
  be.copy_from_host(ws.row_keys.slice_rows(0, Rp), padded(row_keys, Rp, 0, keys_p).data());
}

/// The key of a forward's layer loop for Backend::run_recorded: every shape, scalar and device
/// address the loop's launches use. `kind` tells model_forward (0) from model_verify_forward (1);
/// `shape` holds the call's sizes and scalars (rows, logit rows, tiles, keys, importance settings).
std::vector<int64_t> recording_key(int64_t kind, const Model& model, const ForwardWorkspace& ws, const KvStore& kv,
                                   std::initializer_list<int64_t> shape) {
  const ModelConfig& c = model.config;
  auto addr = [](const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); };
  std::vector<int64_t> key{kind,        c.n_layers,        c.d_model,        c.n_heads,          c.n_kv_heads,
                           c.head_dim,  c.mlp_hidden_size, c.embedding_size, c.qkv_bias ? 1 : 0};
  key.insert(key.end(), shape);
  float eps = static_cast<float>(c.rms_norm_eps);
  int32_t eps_bits = 0;
  std::memcpy(&eps_bits, &eps, sizeof(eps));
  key.push_back(eps_bits);
  key.push_back(model.tp.rank);
  key.push_back(model.tp.world);
  // Weights: one buffer in a fixed layout (plan_weights), so its base and size place every tensor.
  key.push_back(addr(model.weights.wte.data));
  key.push_back(static_cast<int64_t>(model.weights.bytes));
  key.push_back(addr(model.rope.table.cos.data));
  key.push_back(addr(model.rope.table.sin.data));
  key.push_back(model.rope.table.cos.rows());
  for (const Tensor* t :
       {&ws.x,          &ws.xn,       &ws.q,      &ws.attn,   &ws.gate_up,   &ws.act,         &ws.sel,
        &ws.scratch,    &ws.logits,   &ws.gather, &ws.ids,    &ws.positions, &ws.kv_rows,     &ws.tiles,
        &ws.logit_rows, &ws.row_keys, &ws.k_tile, &ws.v_tile, &ws.key_rows,  &ws.verify_tiles})
    key.push_back(addr(t->data));
  // Architecture switches the loop reads (QK-norm; the MoE routing) and the MoE buffers.
  key.insert(key.end(), {c.qk_norm ? 1 : 0, c.moe.n_experts, c.moe.top_k, static_cast<int64_t>(c.moe.score),
                         c.moe.renormalize ? 1 : 0, addr(ws.router_logits.data), addr(ws.moe_scratch.data)});
  key.push_back(kv.rows);
  for (size_t l = 0; l < kv.k.size(); ++l) {  // per layer: stores may be shared across layers or not
    key.push_back(addr(kv.k[l].data));
    key.push_back(addr(kv.v[l].data));
  }
  return key;
}

/// out (+)= x · wᵀ in the weight's own format: Backend::matmul, or Backend::matmul_fp8 with its block
/// scales for a block-FP8 weight (F8E4M3; LayerWeights). Precision is a property of the weights, so
/// every family's forward is this one.
void linear(Backend& be, Tensor x, const Tensor& w, const Tensor& w_scale, Tensor out, bool accumulate) {
  if (w.dtype == DType::kF8E4M3)
    be.matmul_fp8(x, w, w_scale, out, accumulate);
  else
    be.matmul(x, w, out, accumulate);
}

/// out (+)= SwiGLU(gate_up) · wᵀ, the MLP's down projection in the weight's own format: swiglu into
/// act then Backend::matmul, or Backend::swiglu_matmul_fp8 (the FP8 input quantisation fused into the
/// SwiGLU where the backend can) for a block-FP8 weight.
void swiglu_linear(Backend& be, Tensor gate_up, Tensor act, const Tensor& w, const Tensor& w_scale, Tensor out,
                   bool accumulate) {
  if (w.dtype == DType::kF8E4M3) {
    be.swiglu_matmul_fp8(gate_up, act, w, w_scale, out, accumulate);
    return;
  }
  be.swiglu(gate_up, act);
  be.matmul(act, w, out, accumulate);
}

/// The layer loop shared by model_forward and model_verify_forward: embedding of the uploaded ids,
/// per layer attn_norm -> attention stage -> attn_out (+residual) -> ff_norm -> SwiGLU MLP
/// (+residual), then ln_f and the LM head over the R uploaded logit rows only (the largest GEMM).
/// After the last layer's attention stage (which still writes every row's K/V) only the R logit
/// rows continue: they are gathered first and attn_out, the MLP and ln_f run on R rows instead of
/// T (none when R = 0, an admission prefill) - the same per-row arithmetic on fewer rows.
/// Only asynchronous device ops (no upload, no synchronisation): Backend::run_recorded can record it.
void run_layers(Backend& be, const Model& model, ForwardWorkspace& ws, int64_t T, Tensor ids, int64_t R,
                const AttentionStage& attention) {
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  Communicator* comm = model.tp.comm;
  // Row-parallel products (attn_out, ff_out) give each rank a partial sum of h's update: rank 0
  // accumulates it onto the residual, the others overwrite h with theirs, and the all-reduce adds
  // them (the residual counted once). Without a communicator this is the unsharded h += ... .
  const bool residual = model.tp.rank == 0;
  Tensor x = ws.x.slice_rows(0, T), xn = ws.xn.slice_rows(0, T), q = ws.q.slice_rows(0, T);
  Tensor attn = ws.attn.slice_rows(0, T), gate_up = ws.gate_up, act = ws.act;  // dense FFN: [>= T, ·]
  Tensor sel = ws.sel.slice_rows(0, R), logit_rows = ws.logit_rows.slice_rows(0, R);
  // h += attn_out(a); h += ff_out(SwiGLU(gate_up(ff_norm(h)))) over n rows; a MoE model's FFN is
  // its routed experts instead (the router replicated, so every rank routes alike; each rank holds
  // every expert's slice of columns, so its expert sum is a partial sum like the dense ff_out's).
  auto finish_layer = [&](const LayerWeights& lw, int64_t n, Tensor a, Tensor h, Tensor hn) {
    linear(be, a, lw.attn_out, lw.attn_out_scale, h, /*accumulate=*/residual);
    if (comm != nullptr) comm->all_reduce_sum(h);
    be.rmsnorm(h, lw.ff_norm, c.rms_norm_eps, hn);
    if (c.moe.on()) {
      Tensor logits = ws.router_logits.slice_rows(0, n), ids = ws.expert_ids.slice_rows(0, n);
      Tensor weights = ws.expert_weights.slice_rows(0, n);
      be.matmul(hn, lw.router, logits, false);  // F32 router logits
      be.moe_route(logits, Tensor{}, c.moe, ids, weights);
      be.moe_experts(hn, ids, weights, lw.w_gate_up, lw.ff_out, h, /*accumulate=*/residual, ws.moe_scratch);
      if (comm != nullptr) comm->all_reduce_sum(h);
      return;
    }
    linear(be, hn, lw.w_gate_up, lw.w_gate_up_scale, gate_up.slice_rows(0, n), false);
    swiglu_linear(be, gate_up.slice_rows(0, n), act.slice_rows(0, n), lw.ff_out, lw.ff_out_scale, h,
                  /*accumulate=*/residual);
    if (comm != nullptr) comm->all_reduce_sum(h);
  };
  const bool trim = R < T;  // the last layer continues on the logit rows only
  be.embedding(w.wte, ids, x);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    be.rmsnorm(x, lw.attn_norm, c.rms_norm_eps, xn);
    attention(l, lw, xn, q, attn);
    if (l + 1 < c.n_layers || !trim) {
      finish_layer(lw, T, attn, x, xn);
    } else if (R > 0) {
      // q and xn are free once the attention stage has run (q has attn's width, xn h's).
      Tensor attn_sel = q.slice_rows(0, R);
      be.gather_rows(x, logit_rows, sel);
      be.gather_rows(attn, logit_rows, attn_sel);
      finish_layer(lw, R, attn_sel, sel, xn.slice_rows(0, R));
    }
  }
  Tensor logits = ws.logits.slice_rows(0, R);
  if (R == 0) return;
  if (!trim) be.gather_rows(x, logit_rows, sel);
  be.rmsnorm(sel, w.ln_f, c.rms_norm_eps, sel);
  if (comm == nullptr) {
    linear(be, sel, w.lm_head, w.lm_head_scale, logits, false);
    return;
  }
  // Vocabulary-parallel LM head: this rank's [R, Vl] block of the logits, computed into its chunk
  // of the gather staging (an in-place NCCL all-gather), then every rank gets all column blocks.
  const int64_t Vl = w.lm_head.rows(), N = model.tp.world;
  Tensor staged = ws.gather.slice_rows(0, N * R * Vl).reshape({N * R, Vl});
  Tensor local = staged.slice_rows(model.tp.rank * R, (model.tp.rank + 1) * R);
  linear(be, sel, w.lm_head, w.lm_head_scale, local, false);
  comm->all_gather_columns(local, logits, ws.gather);
}

/// Runs the layer loop `layers` through Backend::run_recorded under `key`; with a communicator
/// (collectives inside the loop) op by op.
void run_layer_loop(Backend& be, const Model& model, const std::vector<int64_t>& key,
                    const std::function<void()>& layers) {
  if (model.tp.comm != nullptr)
    layers();
  else
    be.run_recorded(key, layers);
}

/// Checks that the model's rank context, its weights and the K/V store / workspace agree (a store
/// or workspace made for another rank shape would fail deep inside an op). Returns the local query
/// heads (the K/V heads follow from the store's width).
int local_heads(const Model& model, const Tensor& kv_k, const ForwardWorkspace& ws, const char* what) {
  const ModelConfig& c = model.config;
  const TensorParallel& tp = model.tp;
  const ModelShard sh = model_shard(c, tp);
  FDLLM_CHECK_ARG(tp.world == 1 || tp.comm != nullptr, "{}: tensor parallel world {} without a communicator", what,
                  tp.world);
  FDLLM_CHECK_ARG(tp.comm == nullptr || (tp.comm->rank() == tp.rank && tp.comm->world_size() == tp.world),
                  "{}: the communicator is rank {} of {}, the model rank {} of {}", what, tp.comm->rank(),
                  tp.comm->world_size(), tp.rank, tp.world);
  const int64_t Hl = sh.heads * c.head_dim, Kl = sh.kv_heads * c.head_dim;
  const auto& layers = model.weights.layers;
  FDLLM_CHECK_ARG(model.weights.lm_head.rows() == sh.vocab && !layers.empty() &&
                      layers[0].wqkv.rows() == Hl + 2 * Kl && layers[0].bqkv.empty() == !c.qkv_bias,
                  "{}: the weights are not rank {} of {}'s shard", what, tp.rank, tp.world);
  FDLLM_CHECK_ARG(kv_k.row_size() == Kl && ws.q.row_size() == Hl && (tp.comm == nullptr || !ws.gather.empty()),
                  "{}: K/V store ({}) or workspace (q {}) not made for rank {} of {} ({} K/V and {} query "
                  "columns{})",
                  what, kv_k.describe(), ws.q.describe(), tp.rank, tp.world, Kl, Hl,
                  tp.comm != nullptr && ws.gather.empty() ? ", with the gather staging" : "");
  return static_cast<int>(sh.heads);
}

/// The optional parts of a layer's q/k/v stage: biases, QK-norm weights (empty when off).
QkvExtras qkv_extras(const ModelConfig& c, const LayerWeights& lw) {
  return QkvExtras{lw.bqkv, lw.q_norm, lw.k_norm, c.rms_norm_eps, lw.wqkv_scale, lw.kv_scale};
}

float attention_scale(const ModelConfig& c) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))); }

}  // namespace

Tensor model_forward(Backend& be, const Model& model, const ForwardBatch& batch, KvStore& kv,
                     ForwardWorkspace& ws) {
  const ModelConfig& c = model.config;
  const int64_t T = batch.n_tokens();
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  const int64_t n_tiles = static_cast<int64_t>(batch.tiles.size());
  const ImportanceSpec& imp = batch.importance;
  const auto n_scored = static_cast<int64_t>(imp.tiles.size());
  FDLLM_CHECK_ARG(T <= ws.max_tokens && R <= ws.max_logit_rows && n_tiles + n_scored <= ws.max_tiles,
                  "forward: batch of {} rows / {} logit rows / {} attention + {} importance tiles exceeds the "
                  "workspace ({} / {} / {} tiles)",
                  T, R, n_tiles, n_scored, ws.max_tokens, ws.max_logit_rows, ws.max_tiles);
  batch.validate(kv.rows, c.embedding_size, model.rope.table.cos.rows());

  // Padding (ForwardWorkspace::padding): Tp query rows, the ones past T of token 0 at position 0
  // writing their K/V to batch.pad_kv_row and read by no tile; Rp logit rows (<= Tp), the ones past
  // R of query row 0. The recording key has the padded counts.
  const Backend::RowPadding& padding = ws.padding;
  const int64_t Tp = batch.pad_kv_row >= 0 ? padded_rows(T, padding.rows, ws.max_tokens) : T;
  const int64_t Rp = std::min(padded_rows(R, padding.logit_rows, ws.max_logit_rows), Tp);

  // Plan upload (once per forward; every layer reuses it): the attention tiles, then the
  // importance's score tiles, in one copy.
  Tensor ids = ws.ids.slice_rows(0, Tp), pos = ws.positions.slice_rows(0, Tp), rows = ws.kv_rows.slice_rows(0, Tp);
  Tensor tiles = ws.tiles.slice_rows(0, n_tiles), scored = ws.tiles.slice_rows(n_tiles, n_tiles + n_scored);
  std::vector<int32_t> ids_p, pos_p, rows_p;
  be.copy_from_host(ids, padded(batch.token_ids, Tp, 0, ids_p).data());
  be.copy_from_host(pos, padded(batch.positions, Tp, 0, pos_p).data());
  be.copy_from_host(rows, padded(batch.kv_rows, Tp, batch.pad_kv_row, rows_p).data());
  if (n_scored == 0) {
    be.copy_from_host(tiles, batch.tiles.data());
  } else {
    std::vector<AttentionTile> both(batch.tiles);
    both.insert(both.end(), imp.tiles.begin(), imp.tiles.end());
    be.copy_from_host(ws.tiles.slice_rows(0, n_tiles + n_scored), both.data());
  }

  FDLLM_CHECK_ARG(!kv.k.empty() && static_cast<int64_t>(kv.k.size()) == c.n_layers,
                  "forward: the K/V store has {} layers, the model {}", kv.k.size(), c.n_layers);
  upload_logit_rows(be, ws, batch.logit_rows, batch.row_keys, Rp);
  const int n_heads = local_heads(model, kv.k[0], ws, "forward");
  const float scale = attention_scale(c);
  // Every layer's attention reuses this plan; the host copy lets the backend route tiles (prefills
  // to cuDNN on the CUDA backend) without reading the device table back.
  be.plan_attention(
      tiles, Tp, kv.rows, n_heads,
      HostAttentionPlan{batch.tiles.data(), batch.tiles.size(), imp.tiles.data(), imp.tiles.size(),
                        static_cast<int>(c.head_dim), scale, static_cast<int>(kv.k[0].row_size() / c.head_dim)});
  // Importance sums over heads, i.e. over ranks: rank 0 keeps what scores held before this forward,
  // the others start from zero, and one all-reduce after the layers adds the ranks' head sums.
  Communicator* comm = model.tp.comm;
  if (comm != nullptr && imp.on() && model.tp.rank != 0) be.fill_zero(imp.scores);
  int32_t weight_bits = 0;
  std::memcpy(&weight_bits, &imp.weight, sizeof(weight_bits));
  const std::vector<int64_t> key =
      recording_key(0, model, ws, kv,
                    {Tp, Rp, n_tiles, n_scored, imp.first_layer, weight_bits, imp.probability_mass ? 1 : 0,
                     static_cast<int64_t>(reinterpret_cast<uintptr_t>(imp.scores.data))});
  run_layer_loop(be, model, key, [&] {
    run_layers(be, model, ws, Tp, ids, Rp,
               [&](int64_t l, const LayerWeights& lw, Tensor xn, Tensor q, Tensor attn) {
                 Tensor k = kv.k[static_cast<size_t>(l)], v = kv.v[static_cast<size_t>(l)];
                 be.qkv_rope_store(xn, lw.wqkv, qkv_extras(c, lw), pos, rows, model.rope.table, n_heads, q, k, v,
                                   ws.scratch);
                 const bool score = imp.on() && l >= imp.first_layer;
                 if (score && !imp.probability_mass) {  // raw q·k: fused into the attention pass
                   be.attention_with_importance(q, k, v, tiles, n_heads, scale, attn, scored, imp.weight, imp.scores);
                   return;
                 }
                 be.attention(q, k, v, tiles, n_heads, scale, attn);
                 if (score)
                   be.attention_importance(q, k, scored, n_heads, scale, imp.probability_mass, imp.weight, imp.scores);
               });
  });
  if (comm != nullptr && imp.on()) comm->all_reduce_sum(imp.scores);
  return ws.logits.slice_rows(0, R);
}

Tensor model_verify_forward(Backend& be, const Model& model, const VerifyBatch& batch, const KvStore& kv,
                            ForwardWorkspace& ws) {
  const ModelConfig& c = model.config;
  const int64_t T = batch.n_tokens();
  const auto R = static_cast<int64_t>(batch.logit_rows.size());
  const auto n_tiles = static_cast<int64_t>(batch.tiles.size());
  const auto G = static_cast<int64_t>(batch.key_rows.size());
  FDLLM_CHECK_ARG(ws.max_verify_keys > 0,
                  "verify forward: the workspace was made without verify buffers (max_verify_keys = 0)");
  FDLLM_CHECK_ARG(T <= ws.max_tokens && R <= ws.max_logit_rows && n_tiles <= ws.max_tiles && G <= ws.max_verify_keys,
                  "verify forward: batch of {} rows / {} logit rows / {} tiles / {} keys exceeds the workspace "
                  "({} / {} / {} / {})",
                  T, R, n_tiles, G, ws.max_tokens, ws.max_logit_rows, ws.max_tiles, ws.max_verify_keys);
  FDLLM_CHECK_ARG(!kv.k.empty() && static_cast<int64_t>(kv.k.size()) == c.n_layers,
                  "verify forward: the K/V store has {} layers, the model {}", kv.k.size(), c.n_layers);
  batch.validate(kv.rows, c.embedding_size, model.rope.table.cos.rows());

  // Padding (ForwardWorkspace::padding), so that passes of nearby sizes share a recording: Tp query
  // rows (token 0 at position 0 past T, their K/V in their own scratch rows), Rp logit rows (query
  // row 0 past R), tiles up to a multiple of 8 (empty ones: no work), and the key list as the whole
  // workspace capacity (the tiles index only its first G entries; the rest are store row 0).
  const Backend::RowPadding& padding = ws.padding;
  const bool pad = padding.rows > 1;
  const int64_t Tp = padded_rows(T, padding.rows, ws.max_tokens);
  const int64_t Rp = std::min(padded_rows(R, padding.logit_rows, ws.max_logit_rows), Tp);
  const int64_t n_tiles_p = pad ? std::max(n_tiles, std::min((n_tiles + 7) / 8 * 8, ws.max_tiles)) : n_tiles;
  const int64_t Gp = pad ? ws.max_verify_keys : G;

  // Plan upload. The tile K/V scratch is indexed like the query rows: store row t for query row t.
  Tensor ids = ws.ids.slice_rows(0, Tp), pos = ws.positions.slice_rows(0, Tp), rows = ws.kv_rows.slice_rows(0, Tp);
  Tensor keys = ws.key_rows.slice_rows(0, Gp), tiles = ws.verify_tiles.slice_rows(0, n_tiles_p);
  std::vector<int32_t> iota(static_cast<size_t>(Tp)), ids_p, pos_p;
  for (int64_t t = 0; t < Tp; ++t) iota[static_cast<size_t>(t)] = static_cast<int32_t>(t);
  be.copy_from_host(ids, padded(batch.token_ids, Tp, 0, ids_p).data());
  be.copy_from_host(pos, padded(batch.positions, Tp, 0, pos_p).data());
  be.copy_from_host(rows, iota.data());
  if (G > 0) be.copy_from_host(keys.slice_rows(0, G), batch.key_rows.data());
  if (Gp > G) be.fill_zero(keys.slice_rows(G, Gp));  // store row 0: in range, read by no tile
  if (n_tiles_p > n_tiles) {
    std::vector<VerifyTile> tiles_p(batch.tiles);
    const auto end = static_cast<int32_t>(Tp);
    tiles_p.resize(static_cast<size_t>(n_tiles_p), VerifyTile{end, end, 0, 0, 0, 0});
    be.copy_from_host(tiles, tiles_p.data());
  } else {
    be.copy_from_host(tiles, batch.tiles.data());
  }
  upload_logit_rows(be, ws, batch.logit_rows, batch.row_keys, Rp);
  Tensor k_tile = ws.k_tile.slice_rows(0, Tp), v_tile = ws.v_tile.slice_rows(0, Tp);

  const int n_heads = local_heads(model, kv.k[0], ws, "verify forward");
  be.plan_attention_verify(tiles, Tp, Gp);  // every layer's verify attention reuses this plan
  const float scale = attention_scale(c);
  run_layer_loop(be, model, recording_key(1, model, ws, kv, {Tp, Rp, n_tiles_p, Gp}), [&] {
    run_layers(be, model, ws, Tp, ids, Rp, [&](int64_t l, const LayerWeights& lw, Tensor xn, Tensor q, Tensor attn) {
      be.qkv_rope_store(xn, lw.wqkv, qkv_extras(c, lw), pos, rows, model.rope.table, n_heads, q, k_tile, v_tile,
                        ws.scratch);
      be.attention_verify(q, kv.k[static_cast<size_t>(l)], kv.v[static_cast<size_t>(l)], keys, k_tile, v_tile, tiles,
                          n_heads, scale, attn);
    });
  });
  return ws.logits.slice_rows(0, R);
}

}  // namespace flashdllm
