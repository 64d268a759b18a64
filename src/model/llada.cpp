// LLaDA forward pass over the backend interface (reference §A.3; HF modeling_llada.py
// LLaDALlamaBlock). See llada.h for the data flow.
#include "model/llada.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>

#include "backend/comm.h"
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
  /// Moves the end back to `offset` (tensors taken after it overlap those taken before the seek).
  void seek(size_t offset) noexcept { offset_ = offset; }
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

/// The layout of rank shard `s`'s weights in one buffer (tensor data = byte offsets until bound)
/// and its size.
LladaWeights plan_weights(DType wt, DeviceKind dev, const LladaConfig& c, const LladaShard& s) {
  Carver cv(dev);
  LladaWeights w;
  const int64_t D = c.d_model, Hl = s.heads * c.head_dim, Fl = s.mlp, E = c.embedding_size;
  w.wte = cv.take(wt, {E, D});
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (auto& l : w.layers) {
    l.attn_norm = cv.take(wt, {D});
    l.wqkv = cv.take(wt, {3 * Hl, D});
    l.attn_out = cv.take(wt, {D, Hl});
    l.ff_norm = cv.take(wt, {D});
    l.w_gate_up = cv.take(wt, {2 * Fl, D});
    l.ff_out = cv.take(wt, {D, Fl});
  }
  w.ln_f = cv.take(wt, {D});
  w.lm_head = cv.take(wt, {s.vocab, D});
  w.bytes = cv.bytes();
  return w;
}

LladaWeights allocate_weights(Backend& backend, const LladaConfig& c, const LladaShard& s) {
  LladaWeights w = plan_weights(backend.weight_dtype(), backend.device(), c, s);
  w.storage = backend.alloc(w.bytes, "model weights");
  for_each_weight(w, [&](Tensor& t) { Carver::bind(t, w.storage); });
  return w;
}

std::string block(int64_t i, const char* name) { return fmt::format("model.transformer.blocks.{}.{}.weight", i, name); }

}  // namespace

LladaShard llada_shard(const LladaConfig& cfg, const TensorParallel& tp) {
  const int64_t N = tp.world;
  FDLLM_CHECK_ARG(N >= 1 && tp.rank >= 0 && tp.rank < N, "tensor parallel: rank {} outside [0, world size {})",
                  tp.rank, N);
  FDLLM_CHECK_ARG(cfg.n_heads % N == 0,
                  "tensor parallel size {} must divide n_heads = {} (attention heads are split across ranks)", N,
                  cfg.n_heads);
  FDLLM_CHECK_ARG(cfg.mlp_hidden_size % N == 0,
                  "tensor parallel size {} must divide mlp_hidden_size = {} (the MLP columns are split across ranks)",
                  N, cfg.mlp_hidden_size);
  FDLLM_CHECK_ARG(cfg.embedding_size % N == 0,
                  "tensor parallel size {} must divide embedding_size = {} (the LM head's vocabulary rows are split "
                  "across ranks)",
                  N, cfg.embedding_size);
  LladaShard s;
  s.heads = cfg.n_heads / N;
  s.head_begin = tp.rank * s.heads;
  s.mlp = cfg.mlp_hidden_size / N;
  s.mlp_begin = tp.rank * s.mlp;
  s.vocab = cfg.embedding_size / N;
  s.vocab_begin = tp.rank * s.vocab;
  return s;
}

size_t llada_weight_bytes(const Backend& backend, const LladaConfig& cfg, const TensorParallel& tp) {
  return llada_weight_bytes(backend.weight_dtype(), cfg, tp);
}

size_t llada_weight_bytes(DType weight, const LladaConfig& cfg, const TensorParallel& tp) {
  return plan_weights(weight, DeviceKind::kCPU, cfg, llada_shard(cfg, tp)).bytes;
}

LladaWeights load_llada_weights(Backend& backend, const Checkpoint& ckpt, const LladaConfig& cfg,
                                const TensorParallel& tp) {
  validate_llada_checkpoint(ckpt, cfg);
  const LladaShard sh = llada_shard(cfg, tp);
  LladaWeights w = allocate_weights(backend, cfg, sh);
  // Rows [begin, begin + dst.rows()) of a [rows, cols] checkpoint tensor: a contiguous run of the file.
  auto put_rows = [&](Tensor dst, const std::string& name, int64_t begin) {
    const TensorInfo& t = ckpt.get(name);
    const int64_t rows = t.shape.empty() ? 0 : t.shape[0], cols = rows > 0 ? t.numel() / rows : 0;
    FDLLM_CHECK_CKPT(dst.row_size() == cols && begin + dst.rows() <= rows,
                     "{}: tensor '{}' ({} elements) has no rows [{}, {}) of {} columns", t.file, name, t.numel(), begin,
                     begin + dst.rows(), dst.row_size());
    const size_t es = dtype_size(t.dtype);
    backend.upload_weight(dst, t.dtype, static_cast<const char*>(t.data) + static_cast<size_t>(begin * cols) * es);
  };
  // Columns [begin, begin + dst.row_size()) of a [rows, cols] checkpoint tensor: strided, staged on the host.
  std::vector<char> staging;
  auto put_cols = [&](Tensor dst, const std::string& name, int64_t begin) {
    const TensorInfo& t = ckpt.get(name);
    FDLLM_CHECK_CKPT(t.shape.size() == 2 && t.shape[0] == dst.rows() && begin + dst.row_size() <= t.shape[1],
                     "{}: tensor '{}' has no [{}, {}) column slice of {} rows", t.file, name, begin,
                     begin + dst.row_size(), dst.rows());
    if (dst.row_size() == t.shape[1]) return put_rows(dst, name, 0);
    const size_t es = dtype_size(t.dtype), run = static_cast<size_t>(dst.row_size()) * es;
    const size_t pitch = static_cast<size_t>(t.shape[1]) * es;
    staging.resize(run * static_cast<size_t>(dst.rows()));
    const char* src = static_cast<const char*>(t.data) + static_cast<size_t>(begin) * es;
    for (int64_t r = 0; r < dst.rows(); ++r)
      std::memcpy(staging.data() + static_cast<size_t>(r) * run, src + static_cast<size_t>(r) * pitch, run);
    backend.upload_weight(dst, t.dtype, staging.data());
    backend.synchronize();  // the staging buffer is reused by the next slice
  };
  put_rows(w.wte, "model.transformer.wte.weight", 0);
  const int64_t Dh = cfg.head_dim, Hl = sh.heads * Dh, Fl = sh.mlp;
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    auto& l = w.layers[static_cast<size_t>(i)];
    put_rows(l.attn_norm, block(i, "attn_norm"), 0);
    put_rows(l.wqkv.slice_rows(0, Hl), block(i, "q_proj"), sh.head_begin * Dh);
    put_rows(l.wqkv.slice_rows(Hl, 2 * Hl), block(i, "k_proj"), sh.head_begin * Dh);
    put_rows(l.wqkv.slice_rows(2 * Hl, 3 * Hl), block(i, "v_proj"), sh.head_begin * Dh);
    put_cols(l.attn_out, block(i, "attn_out"), sh.head_begin * Dh);
    put_rows(l.ff_norm, block(i, "ff_norm"), 0);
    put_rows(l.w_gate_up.slice_rows(0, Fl), block(i, "ff_proj"), sh.mlp_begin);
    put_rows(l.w_gate_up.slice_rows(Fl, 2 * Fl), block(i, "up_proj"), sh.mlp_begin);
    put_cols(l.ff_out, block(i, "ff_out"), sh.mlp_begin);
  }
  put_rows(w.ln_f, "model.transformer.ln_f.weight", 0);
  put_rows(w.lm_head, "model.transformer.ff_out.weight", sh.vocab_begin);
  backend.synchronize();
  return w;
}

LladaWeights make_dummy_llada_weights(Backend& backend, const LladaConfig& cfg, uint64_t seed,
                                      const TensorParallel& tp) {
  const LladaShard sh = llada_shard(cfg, tp);
  LladaWeights w = allocate_weights(backend, cfg, sh);
  // Made on the device (Backend::fill_normal: Box-Muller on counter-based uniforms, stream = the
  // tensor's index in for_each_weight order, values keyed by the element index in the unsharded
  // tensor): N(0, 0.02²) matrices; norm weights exactly 1 like a fresh model. A rank fills the
  // pieces of each unsharded tensor it holds through FillWindows.
  uint64_t stream = 0;
  auto matrix = [&](std::initializer_list<std::pair<Tensor, FillWindow>> pieces) {
    for (const auto& [t, window] : pieces) backend.fill_normal(t, seed, stream, 0.0f, 0.02f, window);
    ++stream;
  };
  auto norm = [&](Tensor t) { backend.fill_normal(t, seed, stream++, 1.0f, 0.0f); };
  const int64_t D = cfg.d_model, Dh = cfg.head_dim, H = cfg.n_heads * Dh, F = cfg.mlp_hidden_size;
  const int64_t Hl = sh.heads * Dh, h0 = sh.head_begin * Dh, Fl = sh.mlp, f0 = sh.mlp_begin;
  matrix({{w.wte, {}}});
  for (auto& l : w.layers) {
    norm(l.attn_norm);
    matrix({{l.wqkv.slice_rows(0, Hl), {h0 * D, 0}},
            {l.wqkv.slice_rows(Hl, 2 * Hl), {(H + h0) * D, 0}},
            {l.wqkv.slice_rows(2 * Hl, 3 * Hl), {(2 * H + h0) * D, 0}}});
    matrix({{l.attn_out, {h0, H}}});
    norm(l.ff_norm);
    matrix({{l.w_gate_up.slice_rows(0, Fl), {f0 * D, 0}}, {l.w_gate_up.slice_rows(Fl, 2 * Fl), {(F + f0) * D, 0}}});
    matrix({{l.ff_out, {f0, F}}});
  }
  norm(w.ln_f);
  matrix({{w.lm_head, {sh.vocab_begin * D, 0}}});
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

KvStore make_kv_store(Backend& backend, const LladaConfig& cfg, int64_t rows, bool shared_across_layers,
                      const TensorParallel& tp) {
  KvStore kv;
  kv.rows = rows;
  const int64_t HD = llada_shard(cfg, tp).heads * cfg.head_dim;
  const DType at = backend.activation_dtype();
  const size_t one = align_up(static_cast<size_t>(rows * HD) * dtype_size(at));
  kv.bytes = kv_store_bytes(at, cfg, rows, shared_across_layers, tp);
  kv.storage = backend.alloc(kv.bytes, "K/V store");
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const int64_t s = shared_across_layers ? 0 : l;
    char* base = static_cast<char*>(kv.storage.data()) + 2 * one * static_cast<size_t>(s);
    kv.k.emplace_back(base, at, backend.device(), std::initializer_list<int64_t>{rows, HD});
    kv.v.emplace_back(base + one, at, backend.device(), std::initializer_list<int64_t>{rows, HD});
  }
  return kv;
}

size_t kv_store_bytes(DType act, const LladaConfig& cfg, int64_t rows, bool shared_across_layers,
                      const TensorParallel& tp) {
  const int64_t HD = llada_shard(cfg, tp).heads * cfg.head_dim;
  const size_t one = align_up(static_cast<size_t>(rows * HD) * dtype_size(act));
  return 2 * one * static_cast<size_t>(shared_across_layers ? 1 : cfg.n_layers);
}

namespace {

/// The index of the first element of v outside [lo, hi), or v.size() when there is none: a min/max
/// pass the compiler vectorises (plans of thousands of rows are checked every forward), then a
/// search only when that pass finds a bad element.
size_t first_outside(const std::vector<int32_t>& v, int64_t lo, int64_t hi) {
  int32_t mn = INT32_MAX, mx = INT32_MIN;
  for (const int32_t x : v) {
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  if (v.empty() || (mn >= lo && mx < hi)) return v.size();
  return static_cast<size_t>(std::find_if(v.begin(), v.end(), [&](int32_t x) { return x < lo || x >= hi; }) -
                             v.begin());
}

/// The query rows' token ids in [0, vocab_rows) and positions in [0, max_positions) (sizes checked
/// by the caller); `what` names the pass in the error.
void check_query_rows(const char* what, const std::vector<int32_t>& token_ids, const std::vector<int32_t>& positions,
                      int64_t vocab_rows, int64_t max_positions) {
  if (const size_t t = first_outside(token_ids, 0, vocab_rows); t < token_ids.size())
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: token id {} (query row {}) is outside the embedding table [0, {})",
               what, token_ids[t], t, vocab_rows);
  if (const size_t t = first_outside(positions, 0, max_positions); t < positions.size())
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: position {} (query row {}) is beyond the supported context [0, {})",
               what, positions[t], t, max_positions);
}

}  // namespace

void ForwardBatch::validate(int64_t store_rows, int64_t vocab_rows, int64_t max_positions) const {
  const size_t T = token_ids.size();
  FDLLM_CHECK_ARG(T > 0, "forward: empty batch");
  FDLLM_CHECK_ARG(positions.size() == T && kv_rows.size() == T,
                  "forward: {} tokens but {} positions and {} K/V rows", T, positions.size(), kv_rows.size());
  FDLLM_CHECK_ARG(row_keys.size() == logit_rows.size(), "forward: {} logit rows but {} noise keys", logit_rows.size(),
                  row_keys.size());
  check_query_rows("forward", token_ids, positions, vocab_rows, max_positions);
  if (const size_t t = first_outside(kv_rows, 0, store_rows); t < T)
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "forward: K/V row {} outside the store [0, {})", kv_rows[t], store_rows);
  for (const AttentionTile& a : tiles)
    FDLLM_CHECK_ARG(0 <= a.q_start && a.q_start < a.q_end && a.q_end <= static_cast<int32_t>(T) && 0 <= a.k_start &&
                        a.k_start < a.k_end && a.k_end <= store_rows,
                    "forward: attention tile q [{}, {}) k [{}, {}) is outside {} query rows / {} store rows", a.q_start,
                    a.q_end, a.k_start, a.k_end, T, store_rows);
  for (int32_t r : logit_rows)
    FDLLM_CHECK_ARG(r >= 0 && r < static_cast<int32_t>(T), "forward: logit row {} outside [0, {})", r, T);
  if (pad_kv_row >= 0) {  // padding rows write it: no row of the batch may read or write it
    const int32_t p = pad_kv_row;
    auto reads = [p](const AttentionTile& a) { return a.k_start <= p && p < a.k_end; };
    FDLLM_CHECK_ARG(p < store_rows && std::find(kv_rows.begin(), kv_rows.end(), p) == kv_rows.end() &&
                        std::none_of(tiles.begin(), tiles.end(), reads) &&
                        std::none_of(importance.tiles.begin(), importance.tiles.end(), reads),
                    "forward: pad_kv_row {} is outside the {} store rows or a row the batch writes or reads", p,
                    store_rows);
  } else {
    FDLLM_CHECK_ARG(pad_kv_row == -1, "forward: pad_kv_row {} must be a store row or -1", pad_kv_row);
  }
  const ImportanceSpec& imp = importance;
  if (imp.on()) {
    FDLLM_CHECK_ARG(imp.tiles.size() <= tiles.size(),
                    "forward: {} importance tiles for {} attention tiles (score tile i lies inside attention tile i)",
                    imp.tiles.size(), tiles.size());
    for (size_t i = 0; i < imp.tiles.size(); ++i) {
      const AttentionTile &s = imp.tiles[i], &a = tiles[i];
      FDLLM_CHECK_ARG(score_tile_inside(s, a),
                      "forward: importance tile {} (q [{}, {}) k [{}, {})) is not a non-empty sub-range of the query "
                      "rows of attention tile {} (q [{}, {}) k [{}, {})) with its keys",
                      i, s.q_start, s.q_end, s.k_start, s.k_end, i, a.q_start, a.q_end, a.k_start, a.k_end);
    }
    FDLLM_CHECK_ARG(imp.first_layer >= 0, "forward: importance.first_layer {} must be >= 0", imp.first_layer);
    FDLLM_CHECK_ARG(std::isfinite(imp.weight), "forward: importance.weight {} must be finite", imp.weight);
    FDLLM_CHECK_ARG(imp.scores.dtype == DType::kF32 && imp.scores.numel() == store_rows && imp.scores.data != nullptr,
                    "forward: importance.scores must be F32 with one element per K/V store row ({}), got {}",
                    store_rows, imp.scores.describe());
  }
}

void VerifyBatch::validate(int64_t store_rows, int64_t vocab_rows, int64_t max_positions) const {
  const size_t T = token_ids.size();
  FDLLM_CHECK_ARG(T > 0, "verify forward: empty batch");
  FDLLM_CHECK_ARG(positions.size() == T, "verify forward: {} tokens but {} positions", T, positions.size());
  FDLLM_CHECK_ARG(row_keys.size() == logit_rows.size(), "verify forward: {} logit rows but {} noise keys",
                  logit_rows.size(), row_keys.size());
  check_query_rows("verify forward", token_ids, positions, vocab_rows, max_positions);
  if (const size_t g = first_outside(key_rows, 0, store_rows); g < key_rows.size())
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "verify forward: key_rows[{}] = {} is outside the K/V store [0, {})", g,
               key_rows[g], store_rows);
  FDLLM_CHECK_ARG(!tiles.empty(), "verify forward: no tiles");
  const auto G = static_cast<int64_t>(key_rows.size());
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (const VerifyTile& a : tiles) {
    FDLLM_CHECK_ARG(0 <= a.q_start && a.q_start < a.q_end && a.q_end <= static_cast<int32_t>(T) && 0 <= a.k_start &&
                        a.k_start <= a.k_end && a.k_end <= G && a.n_cand >= 0 &&
                        2 * static_cast<int64_t>(a.n_cand) <= a.q_end - a.q_start,
                    "verify forward: tile q [{}, {}) keys [{}, {}) with {} candidates is outside {} query rows / {} key "
                    "rows or has more than (q_end - q_start) / 2 candidates",
                    a.q_start, a.q_end, a.k_start, a.k_end, a.n_cand, T, G);
    ranges.emplace_back(a.q_start, a.q_end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    FDLLM_CHECK_ARG(ranges[i].first >= ranges[i - 1].second,
                    "verify forward: tiles q [{}, {}) and [{}, {}) overlap", ranges[i - 1].first, ranges[i - 1].second,
                    ranges[i].first, ranges[i].second);
  for (int32_t r : logit_rows)
    FDLLM_CHECK_ARG(r >= 0 && r < static_cast<int32_t>(T), "verify forward: logit row {} outside [0, {})", r, T);
}

namespace {

/// The layout of a forward workspace (tensor data = byte offsets until bound), see
/// make_forward_workspace.
ForwardWorkspace plan_forward_workspace(DType at, DeviceKind dev, const LladaConfig& c, int64_t max_tokens,
                                        int64_t max_logit_rows, int64_t max_tiles, int64_t max_verify_keys,
                                        const TensorParallel& tp) {
  FDLLM_CHECK_ARG(max_tokens > 0 && max_logit_rows > 0 && max_tiles > 0 && max_verify_keys >= 0,
                  "forward workspace: sizes must be positive (tokens {}, logit rows {}, tiles {}; verify keys {} >= 0)",
                  max_tokens, max_logit_rows, max_tiles, max_verify_keys);
  const LladaShard sh = llada_shard(c, tp);
  const int64_t T = max_tokens, D = c.d_model, HD = sh.heads * c.head_dim, F = sh.mlp;
  const int64_t R = max_logit_rows;
  Carver cv(dev);
  ForwardWorkspace ws;
  ws.max_tokens = T;
  ws.max_logit_rows = R;
  ws.max_tiles = max_tiles;
  ws.max_verify_keys = max_verify_keys;
  ws.x = cv.take(at, {T, D});
  ws.xn = cv.take(at, {T, D});
  // One region for the attention stage's buffers and the MLP's (never live at the same time).
  const size_t stage = cv.bytes();
  ws.q = cv.take(at, {T, HD});
  ws.attn = cv.take(at, {T, HD});
  ws.scratch = cv.take(at, {T, 3 * HD});
  if (max_verify_keys > 0) {
    ws.k_tile = cv.take(at, {T, HD});
    ws.v_tile = cv.take(at, {T, HD});
  }
  const size_t attention_end = cv.bytes();
  cv.seek(stage);
  ws.gate_up = cv.take(at, {T, 2 * F});
  ws.act = cv.take(at, {T, F});
  cv.seek(std::max(attention_end, cv.bytes()));
  ws.sel = cv.take(at, {R, D});
  ws.logits = cv.take(DType::kF32, {R, c.embedding_size});
  if (tp.comm != nullptr) ws.gather = cv.take(DType::kF32, {tp.world * R * sh.vocab});
  ws.ids = cv.take(DType::kI32, {T});
  ws.positions = cv.take(DType::kI32, {T});
  ws.kv_rows = cv.take(DType::kI32, {T});
  ws.tiles = cv.take(DType::kI32, {max_tiles, 4});
  ws.logit_rows = cv.take(DType::kI32, {R});
  ws.row_keys = cv.take(DType::kI32, {R});
  if (max_verify_keys > 0) {
    ws.key_rows = cv.take(DType::kI32, {max_verify_keys});
    ws.verify_tiles = cv.take(DType::kI32, {max_tiles, 5});
  }
  ws.bytes = cv.bytes();
  return ws;
}

}  // namespace

ForwardWorkspace make_forward_workspace(Backend& backend, const LladaConfig& c, int64_t max_tokens,
                                        int64_t max_logit_rows, int64_t max_tiles, int64_t max_verify_keys,
                                        const TensorParallel& tp, const Buffer* shared) {
  ForwardWorkspace ws = plan_forward_workspace(backend.activation_dtype(), backend.device(), c, max_tokens,
                                               max_logit_rows, max_tiles, max_verify_keys, tp);
  if (shared != nullptr)
    FDLLM_CHECK_ARG(shared->bytes() >= ws.bytes && shared->data() != nullptr,
                    "forward workspace: the shared buffer holds {} bytes, the workspace needs {}", shared->bytes(),
                    ws.bytes);
  else
    ws.storage = backend.alloc(ws.bytes, "forward workspace");
  // No padding under tensor parallelism: its layer loop runs op by op (run_layer_loop), where the
  // padding rows would only cost.
  ws.padding = tp.comm == nullptr ? backend.row_padding() : Backend::RowPadding{};
  const Buffer& storage = shared != nullptr ? *shared : ws.storage;
  for (Tensor* t : {&ws.x, &ws.xn, &ws.q, &ws.attn, &ws.gate_up, &ws.act, &ws.sel, &ws.scratch, &ws.logits, &ws.ids,
                    &ws.positions, &ws.kv_rows, &ws.tiles, &ws.logit_rows, &ws.row_keys})
    Carver::bind(*t, storage);
  if (tp.comm != nullptr) Carver::bind(ws.gather, storage);
  if (max_verify_keys > 0)
    for (Tensor* t : {&ws.k_tile, &ws.v_tile, &ws.key_rows, &ws.verify_tiles}) Carver::bind(*t, storage);
  return ws;
}

size_t forward_workspace_bytes(DType act, const LladaConfig& cfg, int64_t max_tokens, int64_t max_logit_rows,
                               int64_t max_tiles, int64_t max_verify_keys, const TensorParallel& tp) {
  return plan_forward_workspace(act, DeviceKind::kCPU, cfg, max_tokens, max_logit_rows, max_tiles, max_verify_keys, tp)
      .bytes;
}

namespace {

/// The attention stage of one layer: given the normalised input xn [T, D], writes q and the
/// attention output attn [T, H·Dh] (and whatever K/V the mode keeps).
using AttentionStage = std::function<void(int64_t layer, const LladaLayerWeights& lw, Tensor xn, Tensor q, Tensor attn)>;

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
/// address the loop's launches use. `kind` tells llada_forward (0) from llada_verify_forward (1);
/// `shape` holds the call's sizes and scalars (rows, logit rows, tiles, keys, importance settings).
std::vector<int64_t> recording_key(int64_t kind, const LladaModel& model, const ForwardWorkspace& ws, const KvStore& kv,
                                   std::initializer_list<int64_t> shape) {
  const LladaConfig& c = model.config;
  auto addr = [](const void* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); };
  std::vector<int64_t> key{kind, c.n_layers, c.d_model, c.n_heads, c.head_dim, c.mlp_hidden_size, c.embedding_size};
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
  key.push_back(kv.rows);
  for (size_t l = 0; l < kv.k.size(); ++l) {  // per layer: stores may be shared across layers or not
    key.push_back(addr(kv.k[l].data));
    key.push_back(addr(kv.v[l].data));
  }
  return key;
}

/// The layer loop shared by llada_forward and llada_verify_forward: embedding of the uploaded ids,
/// per layer attn_norm -> attention stage -> attn_out (+residual) -> ff_norm -> SwiGLU MLP
/// (+residual), then ln_f and the LM head over the R uploaded logit rows only (the largest GEMM).
/// After the last layer's attention stage (which still writes every row's K/V) only the R logit
/// rows continue: they are gathered first and attn_out, the MLP and ln_f run on R rows instead of
/// T (none when R = 0, an admission prefill) - the same per-row arithmetic on fewer rows.
/// Only asynchronous device ops (no upload, no synchronisation): Backend::run_recorded can record it.
void run_layers(Backend& be, const LladaModel& model, ForwardWorkspace& ws, int64_t T, Tensor ids, int64_t R,
                const AttentionStage& attention) {
  const LladaConfig& c = model.config;
  const LladaWeights& w = model.weights;
  Communicator* comm = model.tp.comm;
  // Row-parallel products (attn_out, ff_out) give each rank a partial sum of h's update: rank 0
  // accumulates it onto the residual, the others overwrite h with theirs, and the all-reduce adds
  // them (the residual counted once). Without a communicator this is the unsharded h += ... .
  const bool residual = model.tp.rank == 0;
  Tensor x = ws.x.slice_rows(0, T), xn = ws.xn.slice_rows(0, T), q = ws.q.slice_rows(0, T);
  Tensor attn = ws.attn.slice_rows(0, T), gate_up = ws.gate_up.slice_rows(0, T), act = ws.act.slice_rows(0, T);
  Tensor sel = ws.sel.slice_rows(0, R), logit_rows = ws.logit_rows.slice_rows(0, R);
  // h += attn_out(a); h += ff_out(SwiGLU(gate_up(ff_norm(h)))) over n rows.
  auto finish_layer = [&](const LladaLayerWeights& lw, int64_t n, Tensor a, Tensor h, Tensor hn) {
    be.matmul(a, lw.attn_out, h, /*accumulate=*/residual);
    if (comm != nullptr) comm->all_reduce_sum(h);
    be.rmsnorm(h, lw.ff_norm, c.rms_norm_eps, hn);
    be.matmul(hn, lw.w_gate_up, gate_up.slice_rows(0, n), false);
    be.swiglu(gate_up.slice_rows(0, n), act.slice_rows(0, n));
    be.matmul(act.slice_rows(0, n), lw.ff_out, h, /*accumulate=*/residual);
    if (comm != nullptr) comm->all_reduce_sum(h);
  };
  const bool trim = R < T;  // the last layer continues on the logit rows only
  be.embedding(w.wte, ids, x);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LladaLayerWeights& lw = w.layers[static_cast<size_t>(l)];
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
    be.matmul(sel, w.lm_head, logits, false);
    return;
  }
  // Vocabulary-parallel LM head: this rank's [R, Vl] block of the logits, computed into its chunk
  // of the gather staging (an in-place NCCL all-gather), then every rank gets all column blocks.
  const int64_t Vl = w.lm_head.rows(), N = model.tp.world;
  Tensor staged = ws.gather.slice_rows(0, N * R * Vl).reshape({N * R, Vl});
  Tensor local = staged.slice_rows(model.tp.rank * R, (model.tp.rank + 1) * R);
  be.matmul(sel, w.lm_head, local, false);
  comm->all_gather_columns(local, logits, ws.gather);
}

/// Runs the layer loop `layers` through Backend::run_recorded under `key`; with a communicator
/// (collectives inside the loop) op by op.
void run_layer_loop(Backend& be, const LladaModel& model, const std::vector<int64_t>& key,
                    const std::function<void()>& layers) {
  if (model.tp.comm != nullptr)
    layers();
  else
    be.run_recorded(key, layers);
}

/// Checks that the model's rank context, its weights and the K/V store / workspace agree (a store
/// or workspace made for another rank shape would fail deep inside an op). Returns the local heads.
int local_heads(const LladaModel& model, const Tensor& kv_k, const ForwardWorkspace& ws, const char* what) {
  const LladaConfig& c = model.config;
  const TensorParallel& tp = model.tp;
  const LladaShard sh = llada_shard(c, tp);
  FDLLM_CHECK_ARG(tp.world == 1 || tp.comm != nullptr, "{}: tensor parallel world {} without a communicator", what,
                  tp.world);
  FDLLM_CHECK_ARG(tp.comm == nullptr || (tp.comm->rank() == tp.rank && tp.comm->world_size() == tp.world),
                  "{}: the communicator is rank {} of {}, the model rank {} of {}", what, tp.comm->rank(),
                  tp.comm->world_size(), tp.rank, tp.world);
  const int64_t Hl = sh.heads * c.head_dim;
  FDLLM_CHECK_ARG(model.weights.lm_head.rows() == sh.vocab && !model.weights.layers.empty() &&
                      model.weights.layers[0].wqkv.rows() == 3 * Hl,
                  "{}: the weights are not rank {} of {}'s shard", what, tp.rank, tp.world);
  FDLLM_CHECK_ARG(kv_k.row_size() == Hl && ws.q.row_size() == Hl && (tp.comm == nullptr || !ws.gather.empty()),
                  "{}: K/V store ({}) or workspace (q {}) not made for rank {} of {} ({} columns{})", what,
                  kv_k.describe(), ws.q.describe(), tp.rank, tp.world, Hl,
                  tp.comm != nullptr && ws.gather.empty() ? ", with the gather staging" : "");
  return static_cast<int>(sh.heads);
}

float attention_scale(const LladaConfig& c) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim))); }

}  // namespace

Tensor llada_forward(Backend& be, const LladaModel& model, const ForwardBatch& batch, KvStore& kv,
                     ForwardWorkspace& ws) {
  const LladaConfig& c = model.config;
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
  be.plan_attention(tiles, Tp, kv.rows, n_heads,
                    HostAttentionPlan{batch.tiles.data(), batch.tiles.size(), imp.tiles.data(), imp.tiles.size(),
                                      static_cast<int>(c.head_dim), scale});
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
               [&](int64_t l, const LladaLayerWeights& lw, Tensor xn, Tensor q, Tensor attn) {
                 Tensor k = kv.k[static_cast<size_t>(l)], v = kv.v[static_cast<size_t>(l)];
                 be.qkv_rope_store(xn, lw.wqkv, pos, rows, model.rope.table, n_heads, q, k, v, ws.scratch);
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

Tensor llada_verify_forward(Backend& be, const LladaModel& model, const VerifyBatch& batch, const KvStore& kv,
                            ForwardWorkspace& ws) {
  const LladaConfig& c = model.config;
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
    tiles_p.resize(static_cast<size_t>(n_tiles_p), VerifyTile{end, end, 0, 0, 0});
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
    run_layers(be, model, ws, Tp, ids, Rp,
               [&](int64_t l, const LladaLayerWeights& lw, Tensor xn, Tensor q, Tensor attn) {
                 be.qkv_rope_store(xn, lw.wqkv, pos, rows, model.rope.table, n_heads, q, k_tile, v_tile, ws.scratch);
                 be.attention_verify(q, kv.k[static_cast<size_t>(l)], kv.v[static_cast<size_t>(l)], keys, k_tile,
                                     v_tile, tiles, n_heads, scale, attn);
               });
  });
  return ws.logits.slice_rows(0, R);
}

}  // namespace flashdllm
