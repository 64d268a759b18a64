// Forward batches' validation and the forward workspace (sized once, carved from one buffer).
// See model.h.
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
#include "core/verify_mask.h"
#include "model/model_carver.h"
#include "model/model_checkpoint.h"

namespace flashdllm {
using model_detail::align_up;
using model_detail::Carver;

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
  FDLLM_CHECK_ARG(positions.size() == T && kv_rows.size() == T, "forward: {} tokens but {} positions and {} K/V rows",
                  T, positions.size(), kv_rows.size());
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
                        a.k_start <= a.k_end && a.k_end <= G &&
                        verify_tile_groups_valid(a.q_end - a.q_start, a.n_cand, a.n_src),
                    "verify forward: tile q [{}, {}) keys [{}, {}) with {} candidates and {} source rows is outside {} "
                    "query rows / {} key rows or its groups do not fit (0 <= n_src <= n_cand, 2·n_cand + n_src <= "
                    "rows)",
                    a.q_start, a.q_end, a.k_start, a.k_end, a.n_cand, a.n_src, T, G);
    ranges.emplace_back(a.q_start, a.q_end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    FDLLM_CHECK_ARG(ranges[i].first >= ranges[i - 1].second, "verify forward: tiles q [{}, {}) and [{}, {}) overlap",
                    ranges[i - 1].first, ranges[i - 1].second, ranges[i].first, ranges[i].second);
  for (int32_t r : logit_rows)
    FDLLM_CHECK_ARG(r >= 0 && r < static_cast<int32_t>(T), "verify forward: logit row {} outside [0, {})", r, T);
}

namespace {

/// The layout of a forward workspace (tensor data = byte offsets until bound), see
/// make_forward_workspace.
ForwardWorkspace plan_forward_workspace(DType at, DeviceKind dev, const ModelConfig& c, int64_t max_tokens,
                                        int64_t max_logit_rows, int64_t max_tiles, int64_t max_verify_keys,
                                        const TensorParallel& tp) {
  FDLLM_CHECK_ARG(max_tokens > 0 && max_logit_rows > 0 && max_tiles > 0 && max_verify_keys >= 0,
                  "forward workspace: sizes must be positive (tokens {}, logit rows {}, tiles {}; verify keys {} >= 0)",
                  max_tokens, max_logit_rows, max_tiles, max_verify_keys);
  const ModelShard sh = model_shard(c, tp);
  const int64_t T = max_tokens, D = c.d_model, HD = sh.heads * c.head_dim, KD = sh.kv_heads * c.head_dim;
  const int64_t F = sh.mlp;
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
  ws.scratch = cv.take(at, {T, HD + 2 * KD});
  if (max_verify_keys > 0) {
    ws.k_tile = cv.take(at, {T, KD});
    ws.v_tile = cv.take(at, {T, KD});
  }
  const size_t attention_end = cv.bytes();
  cv.seek(stage);
  if (c.moe.on()) {  // the MoE FFN's buffers take the dense MLP's place
    const int64_t E = c.moe.n_experts, k = c.moe.top_k;
    ws.router_logits = cv.take(DType::kF32, {T, E});
    ws.expert_ids = cv.take(DType::kI32, {T, k});
    ws.expert_weights = cv.take(DType::kF32, {T, k});
    ws.moe_scratch = cv.take(at, {Backend::moe_scratch_elements(T, k, E, D, F)});
  } else {
    ws.gate_up = cv.take(at, {T, 2 * F});
    ws.act = cv.take(at, {T, F});
  }
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
    ws.verify_tiles = cv.take(DType::kI32, {max_tiles, kVerifyTileInts});
  }
  ws.bytes = cv.bytes();
  return ws;
}

}  // namespace

ForwardWorkspace make_forward_workspace(Backend& backend, const ModelConfig& c, int64_t max_tokens,
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
  for (Tensor* t : {&ws.x, &ws.xn, &ws.q, &ws.attn, &ws.sel, &ws.scratch, &ws.logits, &ws.ids, &ws.positions,
                    &ws.kv_rows, &ws.tiles, &ws.logit_rows, &ws.row_keys})
    Carver::bind(*t, storage);
  for (Tensor* t : {&ws.gate_up, &ws.act, &ws.router_logits, &ws.expert_ids, &ws.expert_weights, &ws.moe_scratch})
    if (t->ndim > 0) Carver::bind(*t, storage);  // the dense MLP's or the MoE FFN's
  if (tp.comm != nullptr) Carver::bind(ws.gather, storage);
  if (max_verify_keys > 0)
    for (Tensor* t : {&ws.k_tile, &ws.v_tile, &ws.key_rows, &ws.verify_tiles}) Carver::bind(*t, storage);
  return ws;
}

size_t forward_workspace_bytes(DType act, const ModelConfig& cfg, int64_t max_tokens, int64_t max_logit_rows,
                               int64_t max_tiles, int64_t max_verify_keys, const TensorParallel& tp) {
  return plan_forward_workspace(act, DeviceKind::kCPU, cfg, max_tokens, max_logit_rows, max_tiles, max_verify_keys, tp)
      .bytes;
}

}  // namespace flashdllm
