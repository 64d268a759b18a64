// Model weights (checkpoint or seeded dummy values, tensor-parallel shards), RoPE tables and K/V
// stores: the model's buffers, made once. See model.h.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "backend/comm.h"
#include "core/check.h"
#include "core/fp8.h"
#include "core/log.h"
#include "core/philox.h"
#include "model/model_carver.h"
#include "model/model_checkpoint.h"

namespace flashdllm {
using model_detail::align_up;
using model_detail::Carver;
namespace {

void for_each_weight(ModelWeights& w, const std::function<void(Tensor&)>& f) {
  auto optional = [&](Tensor& t) {
    if (!t.empty()) f(t);
  };
  f(w.wte);
  for (auto& l : w.layers) {
    f(l.attn_norm);
    f(l.wqkv);
    optional(l.bqkv);
    optional(l.q_norm);
    optional(l.k_norm);
    f(l.attn_out);
    f(l.ff_norm);
    optional(l.router);
    f(l.w_gate_up);
    f(l.ff_out);
    for (Tensor* t : {&l.wqkv_scale, &l.attn_out_scale, &l.w_gate_up_scale, &l.ff_out_scale, &l.kv_scale}) optional(*t);
  }
  f(w.ln_f);
  f(w.lm_head);
  optional(w.lm_head_scale);
}

/// How the weights are stored: block-FP8 layers / LM head, FP8 K/V scales (ModelWeights' flags).
struct WeightFormat {
  bool fp8_layers = false, fp8_head = false, fp8_kv = false;
};

/// The format of cfg's weights under `p` (fp8_head: the checkpoint's LM head is F8_E4M3), after the
/// checks FP8 weights need. Throws Error(kUnsupported) as load_model_weights says.
WeightFormat weight_format(const ModelConfig& c, const ModelShard& s, int world, const ModelPrecision& p,
                           bool fp8_head) {
  WeightFormat f;
  f.fp8_layers = c.fp8_checkpoint || p.quantization == WeightQuantization::kFp8;
  f.fp8_head = fp8_head;
  f.fp8_kv = p.kv_cache_dtype == KvCacheDtype::kFp8;
  if (!f.fp8_layers) return f;
  FDLLM_CHECK(!c.moe.on(), ErrorCode::kUnsupported,
              "block-FP8 weights (--quantization fp8 / an FP8 checkpoint): mixture-of-experts models are not supported "
              "yet");
  FDLLM_CHECK(world == 1, ErrorCode::kUnsupported,
              "block-FP8 weights (--quantization fp8 / an FP8 checkpoint) with tensor parallel size {}: not supported "
              "yet (one rank only)",
              world);
  const int64_t Hl = s.heads * c.head_dim, Kl = s.kv_heads * c.head_dim;
  FDLLM_CHECK(Hl % kFp8Block == 0 && Kl % kFp8Block == 0 && s.mlp % kFp8Block == 0, ErrorCode::kUnsupported,
              "block-FP8 weights (--quantization fp8 / an FP8 checkpoint) need n_heads·head_dim = {}, "
              "n_kv_heads·head_dim = {} and mlp_hidden_size = {} to be multiples of {} (q|k|v and gate|up are fused "
              "matrices sharing one grid of 128 x 128 blocks)",
              Hl, Kl, s.mlp, kFp8Block);
  return f;
}

/// A linear weight [rows, cols]: `wt` with no scales, or F8E4M3 with its F32 block scales.
Tensor take_linear(Carver& cv, DType wt, bool fp8, int64_t rows, int64_t cols, Tensor& scale) {
  if (!fp8) return cv.take(wt, {rows, cols});
  scale = cv.take(DType::kF32, {fp8_blocks(rows), fp8_blocks(cols)});
  return cv.take(DType::kF8E4M3, {rows, cols});
}

/// The layout of rank shard `s`'s weights in one buffer (tensor data = byte offsets until bound)
/// and its size.
ModelWeights plan_weights(DType wt, DeviceKind dev, const ModelConfig& c, const ModelShard& s, const WeightFormat& f) {
  Carver cv(dev);
  ModelWeights w;
  w.fp8_layers = f.fp8_layers;
  w.fp8_kv = f.fp8_kv;
  const int64_t D = c.d_model, Hl = s.heads * c.head_dim, Kl = s.kv_heads * c.head_dim, Fl = s.mlp;
  const bool q8 = f.fp8_layers;
  w.wte = cv.take(wt, {c.embedding_size, D});
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (auto& l : w.layers) {
    l.attn_norm = cv.take(wt, {D});
    l.wqkv = take_linear(cv, wt, q8, Hl + 2 * Kl, D, l.wqkv_scale);
    if (f.fp8_kv) l.kv_scale = cv.take(DType::kF32, {2 * s.kv_heads});
    if (c.qkv_bias) l.bqkv = cv.take(wt, {Hl + 2 * Kl});
    if (c.qk_norm) {
      l.q_norm = cv.take(wt, {c.head_dim});
      l.k_norm = cv.take(wt, {c.head_dim});
    }
    l.attn_out = take_linear(cv, wt, q8, D, Hl, l.attn_out_scale);
    l.ff_norm = cv.take(wt, {D});
    if (c.moe.on()) {  // every expert's columns [mlp_begin, mlp_begin + Fl) on this rank (model_shard)
      const int64_t E = c.moe.n_experts;
      l.router = cv.take(wt, {E, D});
      l.w_gate_up = cv.take(wt, {E, 2 * Fl, D});
      l.ff_out = cv.take(wt, {E, D, Fl});
    } else {
      l.w_gate_up = take_linear(cv, wt, q8, 2 * Fl, D, l.w_gate_up_scale);
      l.ff_out = take_linear(cv, wt, q8, D, Fl, l.ff_out_scale);
    }
  }
  w.ln_f = cv.take(wt, {D});
  w.lm_head = take_linear(cv, wt, f.fp8_head, s.vocab, D, w.lm_head_scale);
  w.bytes = cv.bytes();
  return w;
}

ModelWeights allocate_weights(Backend& backend, const ModelConfig& c, const ModelShard& s, const WeightFormat& f) {
  backend.check_precision(f.fp8_layers || f.fp8_head, f.fp8_kv);
  ModelWeights w = plan_weights(backend.weight_dtype(), backend.device(), c, s, f);
  w.storage = backend.alloc(w.bytes, "model weights");
  for_each_weight(w, [&](Tensor& t) { Carver::bind(t, w.storage); });
  return w;
}

}  // namespace

ModelShard model_shard(const ModelConfig& cfg, const TensorParallel& tp) {
  const int64_t N = tp.world;
  FDLLM_CHECK_ARG(N >= 1 && tp.rank >= 0 && tp.rank < N, "tensor parallel: rank {} outside [0, world size {})", tp.rank,
                  N);
  FDLLM_CHECK_ARG(cfg.n_heads % N == 0,
                  "tensor parallel size {} must divide n_heads = {} (attention heads are split across ranks)", N,
                  cfg.n_heads);
  FDLLM_CHECK_ARG(cfg.n_kv_heads % N == 0,
                  "tensor parallel size {} must divide n_kv_heads = {} (the K/V heads, each with its group of "
                  "query heads, are split across ranks)",
                  N, cfg.n_kv_heads);
  FDLLM_CHECK_ARG(cfg.mlp_hidden_size % N == 0,
                  "tensor parallel size {} must divide {} = {} (the MLP columns{} are split across ranks)", N,
                  cfg.moe.on() ? "the expert width" : "mlp_hidden_size", cfg.mlp_hidden_size,
                  cfg.moe.on() ? " of every expert" : "");
  FDLLM_CHECK_ARG(cfg.embedding_size % N == 0,
                  "tensor parallel size {} must divide embedding_size = {} (the LM head's vocabulary rows are split "
                  "across ranks)",
                  N, cfg.embedding_size);
  ModelShard s;
  s.heads = cfg.n_heads / N;
  s.head_begin = tp.rank * s.heads;
  s.kv_heads = cfg.n_kv_heads / N;
  s.kv_head_begin = tp.rank * s.kv_heads;
  s.mlp = cfg.mlp_hidden_size / N;
  s.mlp_begin = tp.rank * s.mlp;
  s.vocab = cfg.embedding_size / N;
  s.vocab_begin = tp.rank * s.vocab;
  return s;
}

size_t model_weight_bytes(const Backend& backend, const ModelConfig& cfg, const TensorParallel& tp,
                          const ModelPrecision& precision) {
  return model_weight_bytes(backend.weight_dtype(), cfg, tp, precision);
}

size_t model_weight_bytes(DType weight, const ModelConfig& cfg, const TensorParallel& tp,
                          const ModelPrecision& precision) {
  const ModelShard sh = model_shard(cfg, tp);
  return plan_weights(weight, DeviceKind::kCPU, cfg, sh, weight_format(cfg, sh, tp.world, precision, false)).bytes;
}

namespace {

/// Uploads the rows [begin, begin + dst.rows()) of checkpoint tensor `t` ([rows, K]) into the block-FP8
/// weight dst (F8E4M3 [n, K]) and its scales dst_scale (F32 [ceil(n/128), ceil(K/128)]); begin is a
/// multiple of 128. An F8_E4M3 tensor gives its bytes and the matching rows of its scale tensor `ts`;
/// any other dtype is widened to fp32 and quantised here (quantize_fp8_blocks).
void upload_fp8_rows(Backend& backend, Tensor dst, Tensor dst_scale, const TensorInfo& t, const TensorInfo* ts,
                     int64_t begin) {
  const int64_t n = dst.rows(), K = dst.row_size(), kb = fp8_blocks(K);
  FDLLM_CHECK_CKPT(t.shape.size() == 2 && t.shape[1] == K && begin % kFp8Block == 0 && begin + n <= t.shape[0],
                   "{}: tensor '{}' has no rows [{}, {}) of {} columns", t.file, t.name, begin, begin + n, K);
  const auto* src = static_cast<const char*>(t.data);
  if (t.dtype == DType::kF8E4M3) {
    FDLLM_ASSERT(ts != nullptr);  // validate_model_checkpoint found it
    backend.upload_weight(dst, DType::kF8E4M3, src + static_cast<size_t>(begin * K));
    const size_t es = dtype_size(ts->dtype);
    backend.upload_weight(dst_scale, ts->dtype,
                          static_cast<const char*>(ts->data) + static_cast<size_t>(begin / kFp8Block * kb) * es);
    backend.synchronize();
    return;
  }
  std::vector<float> wide(static_cast<size_t>(n * K)), scale(static_cast<size_t>(fp8_blocks(n) * kb));
  std::vector<uint8_t> q(wide.size());
  convert_to_f32(t.dtype, src + static_cast<size_t>(begin * K) * dtype_size(t.dtype), wide.data(), wide.size());
  quantize_fp8_blocks(wide.data(), n, K, q.data(), scale.data());
  backend.upload_weight(dst, DType::kF8E4M3, q.data());
  backend.upload_weight(dst_scale, DType::kF32, scale.data());
  backend.synchronize();  // the host vectors end here
}

}  // namespace

ModelWeights load_model_weights(Backend& backend, const Checkpoint& ckpt, const ModelConfig& cfg,
                                const TensorParallel& tp, const ModelPrecision& precision) {
  validate_model_checkpoint(ckpt, cfg);
  const ModelShard sh = model_shard(cfg, tp);
  const bool fp8_head = ckpt.get(weight_name(cfg, WeightRole::kLmHead)).dtype == DType::kF8E4M3;
  ModelWeights w = allocate_weights(backend, cfg, sh, weight_format(cfg, sh, tp.world, precision, fp8_head));
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
  // A linear layer's part: block-FP8 (its scales' rows [r0 / 128, ...) of `scale`, r0 = the part's
  // first row in dst's parent) or put_rows / put_cols.
  auto put_linear = [&](Tensor dst, Tensor scale, int64_t r0, const std::string& name, int64_t begin, bool cols) {
    if (dst.dtype != DType::kF8E4M3) return cols ? put_cols(dst, name, begin) : put_rows(dst, name, begin);
    const Tensor s = scale.slice_rows(r0 / kFp8Block, r0 / kFp8Block + fp8_blocks(dst.rows()));
    upload_fp8_rows(backend, dst, s, ckpt.get(name), ckpt.find(fp8_scale_name(name)), cols ? 0 : begin);
  };
  using R = WeightRole;
  auto name = [&](WeightRole role, int64_t i) { return weight_name(cfg, role, i); };
  put_rows(w.wte, name(R::kEmbedding, 0), 0);
  const int64_t Dh = cfg.head_dim, Hl = sh.heads * Dh, Kl = sh.kv_heads * Dh, Fl = sh.mlp;
  const int64_t q0 = sh.head_begin * Dh, k0 = sh.kv_head_begin * Dh;
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    auto& l = w.layers[static_cast<size_t>(i)];
    put_rows(l.attn_norm, name(R::kAttnNorm, i), 0);
    put_linear(l.wqkv.slice_rows(0, Hl), l.wqkv_scale, 0, name(R::kQ, i), q0, false);
    put_linear(l.wqkv.slice_rows(Hl, Hl + Kl), l.wqkv_scale, Hl, name(R::kK, i), k0, false);
    put_linear(l.wqkv.slice_rows(Hl + Kl, Hl + 2 * Kl), l.wqkv_scale, Hl + Kl, name(R::kV, i), k0, false);
    if (!l.kv_scale.empty()) backend.fill_normal(l.kv_scale, 0, 0, 1.0f, 0.0f);  // static scales 1.0
    if (cfg.qkv_bias) {
      put_rows(l.bqkv.slice_rows(0, Hl), name(R::kQBias, i), q0);
      put_rows(l.bqkv.slice_rows(Hl, Hl + Kl), name(R::kKBias, i), k0);
      put_rows(l.bqkv.slice_rows(Hl + Kl, Hl + 2 * Kl), name(R::kVBias, i), k0);
    }
    if (cfg.qk_norm) {
      put_rows(l.q_norm, name(R::kQNorm, i), 0);
      put_rows(l.k_norm, name(R::kKNorm, i), 0);
    }
    put_linear(l.attn_out, l.attn_out_scale, 0, name(R::kAttnOut, i), q0, true);
    put_rows(l.ff_norm, name(R::kFfNorm, i), 0);
    if (cfg.moe.on()) {  // the router whole; each expert's column slice into its part of the stacked tensors
      put_rows(l.router, name(R::kRouter, i), 0);
      for (int64_t e = 0; e < cfg.moe.n_experts; ++e) {
        const Tensor gu = l.w_gate_up.slice_rows(e, e + 1).reshape({2 * Fl, cfg.d_model});
        put_rows(gu.slice_rows(0, Fl), weight_name(cfg, R::kExpertGate, i, e), sh.mlp_begin);
        put_rows(gu.slice_rows(Fl, 2 * Fl), weight_name(cfg, R::kExpertUp, i, e), sh.mlp_begin);
        put_cols(l.ff_out.slice_rows(e, e + 1).reshape({cfg.d_model, Fl}), weight_name(cfg, R::kExpertDown, i, e),
                 sh.mlp_begin);
      }
      continue;
    }
    put_linear(l.w_gate_up.slice_rows(0, Fl), l.w_gate_up_scale, 0, name(R::kGate, i), sh.mlp_begin, false);
    put_linear(l.w_gate_up.slice_rows(Fl, 2 * Fl), l.w_gate_up_scale, Fl, name(R::kUp, i), sh.mlp_begin, false);
    put_linear(l.ff_out, l.ff_out_scale, 0, name(R::kDown, i), sh.mlp_begin, true);
  }
  put_rows(w.ln_f, name(R::kFinalNorm, 0), 0);
  // The embedding's name when tied; an FP8 checkpoint's F8_E4M3 head as it is.
  put_linear(w.lm_head, w.lm_head_scale, 0, name(R::kLmHead, 0), sh.vocab_begin, false);
  backend.synchronize();
  return w;
}

ModelWeights make_dummy_weights(Backend& backend, const ModelConfig& cfg, uint64_t seed, const TensorParallel& tp,
                                const ModelPrecision& precision) {
  const ModelShard sh = model_shard(cfg, tp);
  const WeightFormat f = weight_format(cfg, sh, tp.world, precision, false);
  ModelWeights w = allocate_weights(backend, cfg, sh, f);
  // Made on the device (Backend::fill_normal: Box-Muller on counter-based uniforms, stream = the
  // tensor's index in for_each_weight order, values keyed by the element index in the unsharded
  // tensor): N(0, 0.02²) matrices; norm weights exactly 1 like a fresh model. A rank fills the
  // pieces of each unsharded tensor it holds through FillWindows.
  uint64_t stream = 0;
  // Block-FP8 weights (--quantization fp8): the same values made in fp32 on the host (the CPU
  // backend's fill_normal is this one's definition), quantised in 128 x 128 blocks as a loaded BF16
  // checkpoint is (quantize_fp8_blocks), then uploaded; `scale` is the weight's block scales.
  std::unique_ptr<Backend> host_fill;
  std::vector<float> wide;
  std::vector<uint8_t> q;
  std::vector<float> qs;
  auto matrix = [&](const std::vector<std::pair<Tensor, FillWindow>>& pieces, Tensor parent = {}, Tensor scale = {}) {
    if (parent.dtype != DType::kF8E4M3) {
      for (const auto& [t, window] : pieces) backend.fill_normal(t, seed, stream, 0.0f, 0.02f, window);
      ++stream;
      return;
    }
    if (!host_fill) host_fill = make_cpu_backend(0);
    const int64_t rows = parent.rows(), cols = parent.row_size();
    wide.resize(static_cast<size_t>(rows * cols));
    for (const auto& [t, window] : pieces) {  // each piece: rows of parent (F8E4M3: one byte per element)
      const int64_t r0 = (static_cast<const char*>(t.data) - static_cast<const char*>(parent.data)) / cols;
      host_fill->fill_normal(Tensor(wide.data() + r0 * cols, DType::kF32, DeviceKind::kCPU, {t.rows(), cols}), seed,
                             stream, 0.0f, 0.02f, window);
    }
    ++stream;
    q.resize(wide.size());
    qs.resize(static_cast<size_t>(scale.numel()));
    quantize_fp8_blocks(wide.data(), rows, cols, q.data(), qs.data());
    backend.upload_weight(parent, DType::kF8E4M3, q.data());
    backend.upload_weight(scale, DType::kF32, qs.data());
    backend.synchronize();  // the host vectors are reused by the next matrix
  };
  auto norm = [&](Tensor t) { backend.fill_normal(t, seed, stream++, 1.0f, 0.0f); };
  for (auto& l : w.layers)  // FP8 K/V scales 1.0 (no stream: the matrices' values stay those without them)
    if (!l.kv_scale.empty()) backend.fill_normal(l.kv_scale, 0, 0, 1.0f, 0.0f);
  // The unsharded q|k|v matrix is [H + 2·K, D] (and its bias [H + 2·K]): rank pieces are keyed
  // by their offsets in it, so at K = H (LLaDA) the values are those of the [3H, D] layout.
  const int64_t D = cfg.d_model, Dh = cfg.head_dim, H = cfg.n_heads * Dh, K = cfg.kv_width(), F = cfg.mlp_hidden_size;
  const int64_t Hl = sh.heads * Dh, h0 = sh.head_begin * Dh, Kl = sh.kv_heads * Dh, k0 = sh.kv_head_begin * Dh;
  const int64_t Fl = sh.mlp, f0 = sh.mlp_begin;
  matrix({{w.wte, {}}});
  for (auto& l : w.layers) {
    norm(l.attn_norm);
    matrix({{l.wqkv.slice_rows(0, Hl), {h0 * D, 0}},
            {l.wqkv.slice_rows(Hl, Hl + Kl), {(H + k0) * D, 0}},
            {l.wqkv.slice_rows(Hl + Kl, Hl + 2 * Kl), {(H + K + k0) * D, 0}}},
           l.wqkv, l.wqkv_scale);
    if (!l.bqkv.empty())  // N(0, 0.02²) like the matrices, its own stream after the q|k|v matrix's
      matrix({{l.bqkv.slice_rows(0, Hl), {h0, 0}},
              {l.bqkv.slice_rows(Hl, Hl + Kl), {H + k0, 0}},
              {l.bqkv.slice_rows(Hl + Kl, Hl + 2 * Kl), {H + K + k0, 0}}});
    if (!l.q_norm.empty()) {  // QK-norm weights 1, like the other norms
      norm(l.q_norm);
      norm(l.k_norm);
    }
    matrix({{l.attn_out, {h0, H}}}, l.attn_out, l.attn_out_scale);
    norm(l.ff_norm);
    if (!l.router.empty()) {  // MoE: the router whole, each expert's columns of the stacked [E, 2F, D] / [E, D, F]
      matrix({{l.router, {}}});
      std::vector<std::pair<Tensor, FillWindow>> gu, dn;
      for (int64_t e = 0; e < cfg.moe.n_experts; ++e) {
        const Tensor g = l.w_gate_up.slice_rows(e, e + 1).reshape({2 * Fl, D});
        gu.push_back({g.slice_rows(0, Fl), {(e * 2 * F + f0) * D, 0}});
        gu.push_back({g.slice_rows(Fl, 2 * Fl), {(e * 2 * F + F + f0) * D, 0}});
        dn.push_back({l.ff_out.slice_rows(e, e + 1).reshape({D, Fl}), {e * D * F + f0, F}});
      }
      matrix(gu);
      matrix(dn);
      continue;
    }
    matrix({{l.w_gate_up.slice_rows(0, Fl), {f0 * D, 0}}, {l.w_gate_up.slice_rows(Fl, 2 * Fl), {(F + f0) * D, 0}}},
           l.w_gate_up, l.w_gate_up_scale);
    matrix({{l.ff_out, {f0, F}}}, l.ff_out, l.ff_out_scale);
  }
  norm(w.ln_f);
  matrix({{w.lm_head, {sh.vocab_begin * D, 0}}}, w.lm_head, w.lm_head_scale);
  backend.synchronize();
  return w;
}

RopeTables make_rope_tables(Backend& backend, const ModelConfig& cfg, int64_t max_positions) {
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

KvStore make_kv_store(Backend& backend, const ModelConfig& cfg, int64_t rows, bool shared_across_layers,
                      const TensorParallel& tp) {
  KvStore kv;
  kv.rows = rows;
  const int64_t HD = model_shard(cfg, tp).kv_heads * cfg.head_dim;
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

size_t kv_store_bytes(DType act, const ModelConfig& cfg, int64_t rows, bool shared_across_layers,
                      const TensorParallel& tp) {
  const int64_t HD = model_shard(cfg, tp).kv_heads * cfg.head_dim;
  const size_t one = align_up(static_cast<size_t>(rows * HD) * dtype_size(act));
  return 2 * one * static_cast<size_t>(shared_across_layers ? 1 : cfg.n_layers);
}

}  // namespace flashdllm
