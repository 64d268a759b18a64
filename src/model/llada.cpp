// LLaDA forward pass over the backend interface (reference §A.3; HF modeling_llada.py
// LLaDALlamaBlock). See llada.h for the data flow.
#include "model/llada.h"

#include <cmath>
#include <cstring>
#include <functional>

#include "core/check.h"
#include "core/log.h"
#include "core/philox.h"
#include "model/llada_checkpoint.h"

namespace flashdllm {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Carves consecutive, aligned tensors out of one Buffer (two passes: measure, then bind).
class Carver {
 public:
  explicit Carver(DeviceKind dev) : dev_(dev) {}
  Tensor take(DType t, std::initializer_list<int64_t> dims) {
    Tensor v(nullptr, t, dev_, dims);
    v.data = reinterpret_cast<void*>(offset_);  // offset until bind()
    offset_ += align_up(v.nbytes());
    return v;
  }
  size_t bytes() const noexcept { return offset_; }
  static void bind(Tensor& t, const Buffer& b) {
    t.data = static_cast<char*>(b.data()) + reinterpret_cast<uintptr_t>(t.data);
  }

 private:
  DeviceKind dev_;
  size_t offset_ = 0;
};

void for_each_weight(LladaWeights& w, const std::function<void(Tensor&)>& f) {
  f(w.wte);
  for (auto& l : w.layers) {
    f(l.attn_norm);
    f(l.wqkv);
    f(l.attn_out);
    f(l.ff_norm);
    f(l.w_gate_up);
    f(l.ff_out);
  }
  f(w.ln_f);
  f(w.lm_head);
}

LladaWeights allocate_weights(Backend& backend, const LladaConfig& c) {
  const DType wt = backend.weight_dtype();
  Carver cv(backend.device());
  LladaWeights w;
  const int64_t D = c.d_model, F = c.mlp_hidden_size, E = c.embedding_size;
  w.wte = cv.take(wt, {E, D});
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (auto& l : w.layers) {
    l.attn_norm = cv.take(wt, {D});
    l.wqkv = cv.take(wt, {3 * D, D});
    l.attn_out = cv.take(wt, {D, D});
    l.ff_norm = cv.take(wt, {D});
    l.w_gate_up = cv.take(wt, {2 * F, D});
    l.ff_out = cv.take(wt, {D, F});
  }
  w.ln_f = cv.take(wt, {D});
  w.lm_head = cv.take(wt, {E, D});
  w.bytes = cv.bytes();
  w.storage = backend.alloc(w.bytes, "model weights");
  for_each_weight(w, [&](Tensor& t) { Carver::bind(t, w.storage); });
  return w;
}

std::string block(int64_t i, const char* name) { return fmt::format("model.transformer.blocks.{}.{}.weight", i, name); }

}  // namespace

LladaWeights load_llada_weights(Backend& backend, const Checkpoint& ckpt, const LladaConfig& cfg) {
  validate_llada_checkpoint(ckpt, cfg);
  LladaWeights w = allocate_weights(backend, cfg);
  auto put = [&](Tensor dst, const std::string& name) {
    const TensorInfo& t = ckpt.get(name);
    FDLLM_CHECK_CKPT(t.numel() == dst.numel(), "{}: tensor '{}' has {} elements, expected {}", t.file, name,
                     t.numel(), dst.numel());
    backend.upload_weight(dst, t.dtype, t.data);
  };
  auto put_rows = [&](Tensor dst, int64_t row_begin, const std::string& name) {
    const TensorInfo& t = ckpt.get(name);
    const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
    put(dst.slice_rows(row_begin, row_begin + rows), name);
  };
  put(w.wte, "model.transformer.wte.weight");
  const int64_t D = cfg.d_model, F = cfg.mlp_hidden_size;
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    auto& l = w.layers[static_cast<size_t>(i)];
    put(l.attn_norm, block(i, "attn_norm"));
    put_rows(l.wqkv, 0, block(i, "q_proj"));
    put_rows(l.wqkv, D, block(i, "k_proj"));
    put_rows(l.wqkv, 2 * D, block(i, "v_proj"));
    put(l.attn_out, block(i, "attn_out"));
    put(l.ff_norm, block(i, "ff_norm"));
    put_rows(l.w_gate_up, 0, block(i, "ff_proj"));
    put_rows(l.w_gate_up, F, block(i, "up_proj"));
    put(l.ff_out, block(i, "ff_out"));
  }
  put(w.ln_f, "model.transformer.ln_f.weight");
  put(w.lm_head, "model.transformer.ff_out.weight");
  backend.synchronize();
  return w;
}

LladaWeights make_dummy_llada_weights(Backend& backend, const LladaConfig& cfg, uint64_t seed) {
  LladaWeights w = allocate_weights(backend, cfg);
  // Made on the device (Backend::fill_normal: Box-Muller on counter-based uniforms, stream = the
  // tensor's index in for_each_weight order): N(0, 0.02²) matrices; norm weights exactly 1 like a
  // fresh model.
  uint64_t tensor_index = 0;
  for_each_weight(w, [&](Tensor& t) {
    const bool is_norm = t.ndim == 1;
    backend.fill_normal(t, seed, tensor_index++, is_norm ? 1.0f : 0.0f, is_norm ? 0.0f : 0.02f);
  });
  backend.synchronize();
  return w;
}

RopeTables make_rope_tables(Backend& backend, const LladaConfig& cfg, int64_t max_positions) {
  const int64_t half = cfg.head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const float theta = static_cast<float>(cfg.rope_theta);
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(cfg.head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, expo);
  }
  std::vector<float> c(static_cast<size_t>(max_positions * half)), s(c.size());
  for (int64_t p = 0; p < max_positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      c[p * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      s[p * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  RopeTables r;
  const size_t bytes = c.size() * sizeof(float);
  r.storage = backend.alloc(2 * align_up(bytes), "RoPE tables");
  r.table.cos = Tensor(r.storage.data(), DType::kF32, backend.device(), {max_positions, half});
  r.table.sin = Tensor(static_cast<char*>(r.storage.data()) + align_up(bytes), DType::kF32, backend.device(),
                       {max_positions, half});
  backend.copy_from_host(r.table.cos, c.data());
  backend.copy_from_host(r.table.sin, s.data());
  backend.synchronize();
  return r;
}

KvStore make_kv_store(Backend& backend, const LladaConfig& cfg, int64_t rows, bool shared_across_layers) {
  KvStore kv;
  kv.rows = rows;
  const int64_t HD = cfg.n_heads * cfg.head_dim;
  const DType at = backend.activation_dtype();
  const size_t one = align_up(static_cast<size_t>(rows * HD) * dtype_size(at));
  const int64_t n_stores = shared_across_layers ? 1 : cfg.n_layers;
  kv.bytes = 2 * one * static_cast<size_t>(n_stores);
  kv.storage = backend.alloc(kv.bytes, "K/V store");
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const int64_t s = shared_across_layers ? 0 : l;
    char* base = static_cast<char*>(kv.storage.data()) + 2 * one * static_cast<size_t>(s);
    kv.k.emplace_back(base, at, backend.device(), std::initializer_list<int64_t>{rows, HD});
    kv.v.emplace_back(base + one, at, backend.device(), std::initializer_list<int64_t>{rows, HD});
  }
  return kv;
}

void ForwardBatch::validate(int64_t store_rows, int64_t vocab_rows, int64_t max_positions) const {
  const size_t T = token_ids.size();
  FDLLM_CHECK_ARG(T > 0, "forward: empty batch");
  FDLLM_CHECK_ARG(positions.size() == T && kv_rows.size() == T,
                  "forward: {} tokens but {} positions and {} K/V rows", T, positions.size(), kv_rows.size());
  FDLLM_CHECK_ARG(row_keys.size() == logit_rows.size(), "forward: {} logit rows but {} noise keys", logit_rows.size(),
                  row_keys.size());
  for (size_t t = 0; t < T; ++t) {
    FDLLM_CHECK_ARG(token_ids[t] >= 0 && token_ids[t] < vocab_rows,
                    "forward: token id {} (query row {}) is outside the embedding table [0, {})", token_ids[t], t,
                    vocab_rows);
    FDLLM_CHECK_ARG(positions[t] >= 0 && positions[t] < max_positions,
                    "forward: position {} (query row {}) is beyond the supported context [0, {})", positions[t], t,
                    max_positions);
    FDLLM_CHECK_ARG(kv_rows[t] >= 0 && kv_rows[t] < store_rows, "forward: K/V row {} outside the store [0, {})",
                    kv_rows[t], store_rows);
  }
  for (const AttentionTile& a : tiles)
    FDLLM_CHECK_ARG(0 <= a.q_start && a.q_start < a.q_end && a.q_end <= static_cast<int32_t>(T) && 0 <= a.k_start &&
                        a.k_start < a.k_end && a.k_end <= store_rows,
                    "forward: attention tile q [{}, {}) k [{}, {}) is outside {} query rows / {} store rows", a.q_start,
                    a.q_end, a.k_start, a.k_end, T, store_rows);
  for (int32_t r : logit_rows)
    FDLLM_CHECK_ARG(r >= 0 && r < static_cast<int32_t>(T), "forward: logit row {} outside [0, {})", r, T);
  const ImportanceSpec& imp = importance;
  if (imp.tiles != 0) {
    FDLLM_CHECK_ARG(imp.tiles > 0 && imp.tiles <= static_cast<int64_t>(tiles.size()),
                    "forward: importance.tiles {} must be in [0, {}] (the number of attention tiles)", imp.tiles,
                    tiles.size());
    FDLLM_CHECK_ARG(imp.first_layer >= 0, "forward: importance.first_layer {} must be >= 0", imp.first_layer);
    FDLLM_CHECK_ARG(std::isfinite(imp.weight), "forward: importance.weight {} must be finite", imp.weight);
    FDLLM_CHECK_ARG(imp.scores.dtype == DType::kF32 && imp.scores.numel() == store_rows && imp.scores.data != nullptr,
                    "forward: importance.scores must be F32 with one element per K/V store row ({}), got {}",
                    store_rows, imp.scores.describe());
  }
}

ForwardWorkspace make_forward_workspace(Backend& backend, const LladaConfig& c, int64_t max_tokens,
                                        int64_t max_logit_rows, int64_t max_tiles) {
  FDLLM_CHECK_ARG(max_tokens > 0 && max_logit_rows > 0 && max_tiles > 0,
                  "forward workspace: sizes must be positive (tokens {}, logit rows {}, tiles {})", max_tokens,
                  max_logit_rows, max_tiles);
  const DType at = backend.activation_dtype();
  const int64_t T = max_tokens, D = c.d_model, HD = c.n_heads * c.head_dim, F = c.mlp_hidden_size;
  const int64_t R = max_logit_rows;
  Carver cv(backend.device());
  ForwardWorkspace ws;
  ws.max_tokens = T;
  ws.max_logit_rows = R;
  ws.max_tiles = max_tiles;
  ws.x = cv.take(at, {T, D});
  ws.xn = cv.take(at, {T, D});
  ws.q = cv.take(at, {T, HD});
  ws.attn = cv.take(at, {T, HD});
  ws.gate_up = cv.take(at, {T, 2 * F});
  ws.act = cv.take(at, {T, F});
  ws.sel = cv.take(at, {R, D});
  ws.scratch = cv.take(at, {T, 3 * HD});
  ws.logits = cv.take(DType::kF32, {R, c.embedding_size});
  ws.ids = cv.take(DType::kI32, {T});
  ws.positions = cv.take(DType::kI32, {T});
  ws.kv_rows = cv.take(DType::kI32, {T});
  ws.tiles = cv.take(DType::kI32, {max_tiles, 4});
  ws.logit_rows = cv.take(DType::kI32, {R});
  ws.row_keys = cv.take(DType::kI32, {R});
  ws.bytes = cv.bytes();
  ws.storage = backend.alloc(ws.bytes, "forward workspace");
  for (Tensor* t : {&ws.x, &ws.xn, &ws.q, &ws.attn, &ws.gate_up, &ws.act, &ws.sel, &ws.scratch, &ws.logits, &ws.ids,
                    &ws.positions, &ws.kv_rows, &ws.tiles, &ws.logit_rows, &ws.row_keys})
    Carver::bind(*t, ws.storage);
  return ws;
}

Tensor llada_forward(Backend& be, const LladaModel& model, const ForwardBatch& batch, KvStore& kv,
                     ForwardWorkspace& ws) {
  const LladaConfig& c = model.config;
  const LladaWeights& w = model.weights;
  const int64_t T = batch.n_tokens();
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  const int64_t n_tiles = static_cast<int64_t>(batch.tiles.size());
  FDLLM_CHECK_ARG(T <= ws.max_tokens && R <= ws.max_logit_rows && n_tiles <= ws.max_tiles,
                  "forward: batch of {} rows / {} logit rows / {} tiles exceeds the workspace ({} / {} / {})", T, R,
                  n_tiles, ws.max_tokens, ws.max_logit_rows, ws.max_tiles);
  batch.validate(kv.rows, c.embedding_size, model.rope.table.cos.rows());

  // Plan upload (once per forward; every layer reuses it).
  Tensor ids = ws.ids.slice_rows(0, T), pos = ws.positions.slice_rows(0, T), rows = ws.kv_rows.slice_rows(0, T);
  Tensor tiles = ws.tiles.slice_rows(0, n_tiles);
  be.copy_from_host(ids, batch.token_ids.data());
  be.copy_from_host(pos, batch.positions.data());
  be.copy_from_host(rows, batch.kv_rows.data());
  be.copy_from_host(tiles, batch.tiles.data());

  Tensor x = ws.x.slice_rows(0, T), xn = ws.xn.slice_rows(0, T), q = ws.q.slice_rows(0, T);
  Tensor attn = ws.attn.slice_rows(0, T), gate_up = ws.gate_up.slice_rows(0, T), act = ws.act.slice_rows(0, T);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  const int n_heads = static_cast<int>(c.n_heads);

  be.embedding(w.wte, ids, x);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LladaLayerWeights& lw = w.layers[static_cast<size_t>(l)];
    be.rmsnorm(x, lw.attn_norm, c.rms_norm_eps, xn);
    be.qkv_rope_store(xn, lw.wqkv, pos, rows, model.rope.table, n_heads, q, kv.k[static_cast<size_t>(l)],
                      kv.v[static_cast<size_t>(l)], ws.scratch);
    be.attention(q, kv.k[static_cast<size_t>(l)], kv.v[static_cast<size_t>(l)], tiles, n_heads, scale, attn);
    if (batch.importance.tiles > 0 && l >= batch.importance.first_layer)
      be.attention_importance(q, kv.k[static_cast<size_t>(l)], tiles.slice_rows(0, batch.importance.tiles), n_heads,
                              scale, batch.importance.probability_mass, batch.importance.weight,
                              batch.importance.scores);
    be.matmul(attn, lw.attn_out, x, /*accumulate=*/true);
    be.rmsnorm(x, lw.ff_norm, c.rms_norm_eps, xn);
    be.matmul(xn, lw.w_gate_up, gate_up, false);
    be.swiglu(gate_up, act);
    be.matmul(act, lw.ff_out, x, /*accumulate=*/true);
  }
  // Only the requested rows go through the final norm and the LM head (the largest GEMM).
  Tensor logits = ws.logits.slice_rows(0, R);
  if (R == 0) return logits;
  Tensor lrows = ws.logit_rows.slice_rows(0, R);
  be.copy_from_host(lrows, batch.logit_rows.data());
  be.copy_from_host(ws.row_keys.slice_rows(0, R), batch.row_keys.data());
  Tensor sel = ws.sel.slice_rows(0, R);
  be.gather_rows(x, lrows, sel);
  be.rmsnorm(sel, w.ln_f, c.rms_norm_eps, sel);
  be.matmul(sel, w.lm_head, logits, false);
  return logits;
}

}  // namespace flashdllm
