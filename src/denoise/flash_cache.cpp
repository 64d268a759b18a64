// Flash-Cache denoiser; see flash_cache.h for the algorithm, the layout and the deviations.
#include "denoise/flash_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "denoise/flash_verify.h"

namespace flashdllm {
namespace {

/// full_pos[a : b] with Python slice clipping (a, b clamped to [0, size]; a >= b gives nothing),
/// appended to `out`.
void append_slice(const std::vector<int32_t>& v, int64_t a, int64_t b, std::vector<int32_t>& out) {
  const int64_t n = static_cast<int64_t>(v.size());
  a = std::clamp<int64_t>(a, 0, n);
  b = std::clamp<int64_t>(b, 0, n);
  if (a < b) out.insert(out.end(), v.begin() + a, v.begin() + b);
}

}  // namespace

FlashCacheOptions flash_cache_preset(std::string_view task) {
  FlashCacheOptions o;
  o.gen_length = 512;
  o.block_length = 16;
  o.threshold = 0.9;
  o.mask_num = 4;
  if (task == "gsm8k" || task == "math" || task == "humaneval") {
    o.track_num = 4;
    o.gamma = task == "gsm8k" ? 0.8 : 0.85;
  } else if (task == "mbpp") {
    o.track_num = 3;
    o.gamma = 0.8;
  } else {
    FDLLM_FAIL(ErrorCode::kInvalidArgument,
               "flash-cache preset '{}' is unknown (presets of the paper's Table 3: gsm8k, math, humaneval, mbpp)",
               task);
  }
  return o;
}

void validate_flash_cache_options(const FlashCacheOptions& o, const LladaConfig& cfg) {
  FDLLM_CHECK_ARG(o.gen_length > 0, "flash-cache: gen_length must be positive, got {}", o.gen_length);
  FDLLM_CHECK_ARG(o.gen_length < cfg.max_sequence_length,
                  "flash-cache: gen_length {} does not fit the model's max_sequence_length {}", o.gen_length,
                  cfg.max_sequence_length);
  FDLLM_CHECK_ARG(o.block_length > 0, "flash-cache: block_length (masked window) must be positive, got {}",
                  o.block_length);
  FDLLM_CHECK_ARG(o.threshold > 0.0 && o.threshold <= 1.0, "flash-cache: threshold must be in (0, 1], got {}",
                  o.threshold);
  FDLLM_CHECK_ARG(o.mask_num >= 1,
                  "flash-cache: mask_num must be >= 1 (β_m = mask_num·block_length includes the window), got {}",
                  o.mask_num);
  FDLLM_CHECK_ARG(o.key_tile > 0, "flash-cache: key_tile must be positive, got {}", o.key_tile);
  FDLLM_CHECK_ARG(o.n_slots > 0, "flash-cache: n_slots must be positive, got {}", o.n_slots);
  FDLLM_CHECK_ARG(o.tokens_per_step >= 1, "flash-cache: tokens_per_step must be >= 1, got {}", o.tokens_per_step);
  for (size_t i = 0; i < o.forced_schedule.size(); ++i)
    FDLLM_CHECK_ARG(o.forced_schedule[i] >= 1, "flash-cache: forced_schedule[{}] = {} must be >= 1", i,
                    o.forced_schedule[i]);
  FDLLM_CHECK_ARG(o.importance_first_layer >= 0, "flash-cache: importance_first_layer must be >= 0, got {}",
                  o.importance_first_layer);
  FDLLM_CHECK_ARG(o.query_tile_rows >= 0, "flash-cache: query_tile_rows must be >= 0, got {}", o.query_tile_rows);
  FDLLM_CHECK_ARG(o.max_forward_rows >= 0, "flash-cache: max_forward_rows must be >= 0 (0 = no bound), got {}",
                  o.max_forward_rows);
  FDLLM_CHECK_ARG(o.gamma > 0.0 && o.gamma <= 1.0, "flash-cache: verify gamma must be in (0, 1], got {}", o.gamma);
  FDLLM_CHECK_ARG(o.max_candidates >= 0 && o.max_candidates <= o.block_length,
                  "flash-cache: verify max_candidates must be in [0, block_length = {}] (0 = block_length / 2), got {}",
                  o.block_length, o.max_candidates);
  FDLLM_CHECK_ARG(o.forced_acceptance >= 0, "flash-cache: verify forced_acceptance must be >= 0, got {}",
                  o.forced_acceptance);
  FDLLM_CHECK_ARG(o.verify_rule == FlashVerifyRule::kProduct || o.verify_rule == FlashVerifyRule::kPaper,
                  "flash-cache: unknown verify_rule {}", static_cast<int>(o.verify_rule));
  FDLLM_CHECK_ARG(std::abs(o.track_num) <= (int64_t{1} << 24) && o.mask_num <= (int64_t{1} << 24) &&
                      o.block_length <= (int64_t{1} << 20),
                  "flash-cache: track_num {} / mask_num {} / block_length {} are implausibly large", o.track_num,
                  o.mask_num, o.block_length);
}

int64_t flash_max_length(int64_t max_prompt_len, int64_t gen_length, int64_t block_length, int64_t key_tile) {
  FDLLM_CHECK_ARG(max_prompt_len > 0 && gen_length > 0 && block_length > 0 && key_tile > 0,
                  "flash_max_length: sizes must be positive (prompt {}, gen_length {}, block_length {}, key_tile {})",
                  max_prompt_len, gen_length, block_length, key_tile);
  const int64_t m = max_prompt_len + gen_length + block_length;
  return (m / key_tile + 1) * key_tile;
}

int64_t flash_slot_length(int64_t max_prompt_len, int64_t gen_length, int64_t block_length, int64_t key_tile) {
  FDLLM_CHECK_ARG(block_length > 0, "flash_slot_length: block_length must be positive, got {}", block_length);
  return std::max(flash_seqlen_k(max_prompt_len, gen_length, key_tile), max_prompt_len + gen_length + block_length);
}

int64_t flash_seqlen_k(int64_t prompt_len, int64_t gen_length, int64_t key_tile) {
  FDLLM_CHECK_ARG(prompt_len > 0 && gen_length > 0 && key_tile > 0,
                  "flash_seqlen_k: sizes must be positive (prompt {}, gen_length {}, key_tile {})", prompt_len,
                  gen_length, key_tile);
  return (prompt_len + gen_length) / key_tile * key_tile + key_tile;
}

size_t flash_kv_cache_bytes(const LladaConfig& cfg, DType act, int64_t n_slots, int64_t max_length) {
  return 2 * static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(n_slots) * static_cast<size_t>(max_length) *
         static_cast<size_t>(cfg.n_heads * cfg.head_dim) * dtype_size(act);
}

int64_t flash_max_slots(const LladaConfig& cfg, DType act, int64_t max_length, size_t budget_bytes) {
  const size_t per_slot = flash_kv_cache_bytes(cfg, act, 1, max_length);
  return per_slot == 0 ? 0 : static_cast<int64_t>(budget_bytes / per_slot);
}

// ---------------------------------------------------------------------------------- slot state

FlashSlot flash_init_slot(int64_t request, std::span<const int32_t> prompt, int64_t max_length,
                          const FlashCacheOptions& o, int32_t mask_id, int32_t eos_id) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  FDLLM_CHECK_ARG(P > 0, "flash-cache: request {} has an empty prompt", request);
  FDLLM_CHECK_ARG(P + o.gen_length + o.block_length <= max_length,
                  "flash-cache: request {}: prompt {} + gen_length {} + block_length {} exceeds the slot length {}",
                  request, P, o.gen_length, o.block_length, max_length);
  for (int64_t i = 0; i < P; ++i)
    FDLLM_CHECK_ARG(prompt[i] != mask_id, "flash-cache: request {}: prompt position {} holds the mask token id {}",
                    request, i, mask_id);
  FlashSlot s;
  s.request = request;
  s.prompt_len = P;
  s.seqlen_k = flash_seqlen_k(P, o.gen_length, o.key_tile);
  FDLLM_CHECK_ARG(s.seqlen_k <= max_length,
                  "flash-cache: request {}: key length seqlen_k {} exceeds the slot length {} (use flash_max_length)",
                  request, s.seqlen_k, max_length);
  s.num_decoded = P;
  s.stop = P + o.gen_length;
  s.x.assign(static_cast<size_t>(max_length), eos_id);
  std::copy(prompt.begin(), prompt.end(), s.x.begin());
  std::fill(s.x.begin() + P, s.x.begin() + P + o.gen_length, mask_id);
  s.full_pos.resize(static_cast<size_t>(max_length));
  std::iota(s.full_pos.begin(), s.full_pos.end(), 0);
  // First query set = full prefill of [0, seqlen_k): window [P, P + bm), tracked the rest.
  append_slice(s.full_pos, P, P + o.block_length, s.window);
  append_slice(s.full_pos, 0, P, s.tracked);
  append_slice(s.full_pos, P + o.block_length, s.seqlen_k, s.tracked);
  return s;
}

void flash_prepare_queries(FlashSlot& s, const FlashCacheOptions& o) {
  const int64_t nd = s.num_decoded, bm = o.block_length;
  s.window.clear();
  s.tracked.clear();
  append_slice(s.full_pos, nd, nd + bm, s.window);
  if (o.track_num < 0) {
    append_slice(s.full_pos, 0, nd, s.tracked);
    append_slice(s.full_pos, nd + bm, s.seqlen_k, s.tracked);
  } else {
    append_slice(s.full_pos, std::max<int64_t>(0, nd - o.track_num * bm), nd, s.tracked);
    append_slice(s.full_pos, nd + bm, std::min(s.seqlen_k, nd + o.mask_num * bm), s.tracked);
  }
}

int64_t flash_query_rows(const FlashSlot& s) {
  return s.active() ? static_cast<int64_t>(s.window.size() + s.tracked.size()) : 0;
}

std::vector<std::pair<size_t, size_t>> flash_forward_groups(const std::vector<FlashSlot>& slots, int64_t max_rows) {
  std::vector<std::pair<size_t, size_t>> groups;
  size_t first = 0;
  int64_t rows = 0;
  bool any_active = false;
  for (size_t j = 0; j < slots.size(); ++j) {
    const int64_t r = flash_query_rows(slots[j]);
    if (max_rows > 0 && any_active && r > 0 && rows + r > max_rows) {
      groups.emplace_back(first, j);
      first = j;
      rows = 0;
      any_active = false;
    }
    rows += r;
    any_active = any_active || r > 0;
  }
  if (any_active) groups.emplace_back(first, slots.size());
  return groups;
}

ForwardBatch flash_plan(const std::vector<FlashSlot>& slots, int64_t store_stride, const FlashCacheOptions& o,
                        int64_t n_heads, size_t first, size_t last) {
  last = std::min(last, slots.size());
  FDLLM_CHECK_ARG(store_stride > 0 && static_cast<int64_t>(slots.size()) * store_stride < (int64_t{1} << 31),
                  "flash_plan: {} slots × store stride {} must be positive and below 2^31 store rows", slots.size(),
                  store_stride);
  ForwardBatch fb;
  const int64_t tile_rows = o.query_tile_rows > 0 ? o.query_tile_rows : o.block_length;
  auto add_rows = [&](const FlashSlot& s, int64_t j, const std::vector<int32_t>& pos) {
    for (int32_t t : pos) {
      FDLLM_CHECK_ARG(t >= 0 && t < store_stride, "flash_plan: slot {} queries position {} outside its {} store rows", j,
                      t, store_stride);
      fb.token_ids.push_back(s.x[static_cast<size_t>(t)]);
      fb.positions.push_back(t);
      fb.kv_rows.push_back(static_cast<int32_t>(j * store_stride + t));
    }
  };
  int32_t q = 0;
  int64_t n_windows = 0;
  for (size_t j = first; j < last; ++j) {
    const FlashSlot& s = slots[j];
    if (!s.active()) continue;
    FDLLM_CHECK_ARG(!s.window.empty(), "flash_plan: active slot {} has an empty masked window", j);
    const auto k0 = static_cast<int32_t>(static_cast<int64_t>(j) * store_stride);
    add_rows(s, static_cast<int64_t>(j), s.window);
    const auto n = static_cast<int32_t>(s.window.size());
    fb.tiles.push_back({q, q + n, k0, k0 + static_cast<int32_t>(s.seqlen_k)});
    for (int32_t r = 0; r < n; ++r) {
      fb.logit_rows.push_back(q + r);
      fb.row_keys.push_back(0);  // greedy: no noise
    }
    q += n;
    ++n_windows;
  }
  FDLLM_CHECK_ARG(n_windows > 0, "flash_plan: no active slot in slots [{}, {})", first, last);
  for (size_t j = first; j < last; ++j) {
    const FlashSlot& s = slots[j];
    if (!s.active() || s.tracked.empty()) continue;
    const auto k0 = static_cast<int32_t>(static_cast<int64_t>(j) * store_stride);
    add_rows(s, static_cast<int64_t>(j), s.tracked);
    const auto n = static_cast<int32_t>(s.tracked.size());
    for (int32_t r = 0; r < n; r += static_cast<int32_t>(tile_rows)) {
      const int32_t e = std::min<int32_t>(n, r + static_cast<int32_t>(tile_rows));
      fb.tiles.push_back({q + r, q + e, k0, k0 + static_cast<int32_t>(s.seqlen_k)});
    }
    q += n;
  }
  fb.importance.tiles = n_windows;
  fb.importance.first_layer = o.importance_first_layer;
  fb.importance.weight = static_cast<float>(1.0 / (static_cast<double>(o.block_length) * static_cast<double>(n_heads)));
  fb.importance.probability_mass = o.importance_probability_mass;
  return fb;
}

// ---------------------------------------------------------------------------------- decisions

FlashDecision flash_decide(const FlashSlot& s, std::span<const double> conf, std::span<const int32_t> tokens,
                           const FlashCacheOptions& o) {
  const size_t w = s.window.size();
  FDLLM_CHECK_ARG(conf.size() == w && tokens.size() == w,
                  "flash_decide: {} confidences and {} tokens for a window of {} positions", conf.size(), tokens.size(),
                  w);
  FDLLM_CHECK_ARG(w > 0, "flash_decide: empty window");
  FlashDecision d;
  d.window = s.window;
  d.tokens.assign(tokens.begin(), tokens.end());
  d.confidence.assign(conf.begin(), conf.end());
  d.eligible.assign(w, 1);
  int64_t n_eligible = static_cast<int64_t>(w);
  for (size_t r = 0; r < w; ++r) {
    if (d.window[r] < s.stop) continue;
    if (o.reference_quirks) {
      // Released code: zeroed only once an EOS set the stop; the entry can still be the top-1.
      if (s.eos_pos >= 0) d.confidence[r] = 0.0;
    } else {
      // Fixed: EOS padding / positions past the stop are never candidates.
      d.confidence[r] = 0.0;
      d.eligible[r] = 0;
      --n_eligible;
    }
  }
  FDLLM_CHECK_ARG(n_eligible > 0, "flash_decide: no window position of the slot is below its stop {}", s.stop);
  d.order.resize(w);
  std::iota(d.order.begin(), d.order.end(), 0);
  // Eligible entries first (their confidence is > 0, ineligible ones are 0), then by confidence.
  std::stable_sort(d.order.begin(), d.order.end(), [&](int64_t a, int64_t b) {
    if (d.eligible[a] != d.eligible[b]) return d.eligible[a] > d.eligible[b];
    return d.confidence[a] > d.confidence[b];
  });
  int64_t k;
  if (!o.forced_schedule.empty()) {
    const size_t i = std::min<size_t>(static_cast<size_t>(s.iterations), o.forced_schedule.size() - 1);
    k = o.forced_schedule[i];
  } else if (o.rule == FlashDecodeRule::kFixedCount) {
    k = o.tokens_per_step;
  } else {
    k = 0;
    for (size_t r = 0; r < w; ++r) k += d.eligible[r] && d.confidence[r] >= o.threshold;
  }
  d.count = std::clamp<int64_t>(k, 1, n_eligible);
  return d;
}

void flash_force(FlashDecision& d, std::span<const int32_t> positions, std::span<const int32_t> tokens) {
  FDLLM_CHECK_ARG(!positions.empty(), "flash_force: a forced commit needs at least one position");
  FDLLM_CHECK_ARG(positions.size() == tokens.size(), "flash_force: {} positions but {} tokens", positions.size(),
                  tokens.size());
  std::vector<int64_t> order;
  std::vector<uint8_t> used(d.window.size(), 0);
  for (size_t i = 0; i < positions.size(); ++i) {
    const auto it = std::find(d.window.begin(), d.window.end(), positions[i]);
    FDLLM_CHECK_ARG(it != d.window.end(), "flash_force: position {} is not in the masked window", positions[i]);
    const auto idx = static_cast<size_t>(it - d.window.begin());
    FDLLM_CHECK_ARG(!used[idx], "flash_force: position {} is forced twice", positions[i]);
    used[idx] = 1;
    order.push_back(static_cast<int64_t>(idx));
    d.tokens[idx] = tokens[i];
  }
  for (int64_t idx : d.order)
    if (!used[static_cast<size_t>(idx)]) order.push_back(idx);
  d.order = std::move(order);
  d.count = static_cast<int64_t>(positions.size());
}

bool flash_commit(FlashSlot& s, const FlashDecision& d, int32_t eos_id) {
  FDLLM_CHECK_ARG(d.window == s.window, "flash_commit: the decision is for another window");
  FDLLM_CHECK_ARG(d.count >= 1 && d.count <= static_cast<int64_t>(d.window.size()) &&
                      d.order.size() == d.window.size(),
                  "flash_commit: decision commits {} of {} window positions", d.count, d.window.size());
  const int64_t nd = s.num_decoded;
  for (size_t i = 0; i < d.order.size(); ++i)
    s.full_pos[static_cast<size_t>(nd) + i] = d.window[static_cast<size_t>(d.order[i])];
  int64_t new_eos = -1;
  for (int64_t i = 0; i < d.count; ++i) {
    const auto idx = static_cast<size_t>(d.order[static_cast<size_t>(i)]);
    const int32_t t = d.window[idx];
    s.x[static_cast<size_t>(t)] = d.tokens[idx];
    if (d.tokens[idx] == eos_id) new_eos = std::max<int64_t>(new_eos, t);
  }
  s.num_decoded = nd + d.count;
  s.last_committed = d.count;
  s.iterations += 1;
  // EOS rule (§D.7, §F.9): the first iteration that commits any EOS fixes the stop at its largest
  // EOS position + 1.
  if (s.eos_pos < 0 && new_eos >= 0) {
    s.eos_pos = new_eos;
    s.stop = new_eos + 1;
  }
  return flash_has_work(s);
}

bool flash_has_work(const FlashSlot& s) {
  for (size_t i = static_cast<size_t>(s.num_decoded); i < s.full_pos.size(); ++i)
    if (s.full_pos[i] < s.stop) return true;
  return false;
}

void flash_rerank(FlashSlot& s, std::span<const float> scores, const FlashCacheOptions& o) {
  FDLLM_CHECK_ARG(scores.size() == s.full_pos.size(), "flash_rerank: {} scores for a slot of {} positions",
                  scores.size(), s.full_pos.size());
  const auto n_old = static_cast<size_t>(s.num_decoded - s.last_committed);
  std::stable_sort(s.full_pos.begin(), s.full_pos.begin() + static_cast<std::ptrdiff_t>(n_old),
                   [&](int32_t a, int32_t b) { return scores[static_cast<size_t>(a)] < scores[static_cast<size_t>(b)]; });
  flash_prepare_queries(s, o);
}

// ---------------------------------------------------------------------------------- run

FlashCacheDenoiser::FlashCacheDenoiser(Backend& backend, const LladaModel& model, FlashCacheOptions options)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  validate_flash_cache_options(opt_, model_.config);
}

void FlashCacheDenoiser::ensure_verify_workspace(int64_t tokens, int64_t logit_rows, int64_t tiles, int64_t keys) {
  logit_rows = std::max<int64_t>(logit_rows, 1);
  keys = std::max<int64_t>(keys, 1);
  if (vws_.max_tokens >= tokens && vws_.max_logit_rows >= logit_rows && vws_.max_tiles >= tiles &&
      vws_.max_verify_keys >= keys)
    return;
  vws_ = make_forward_workspace(backend_, model_.config, std::max(tokens, vws_.max_tokens),
                                std::max(logit_rows, vws_.max_logit_rows), std::max(tiles, vws_.max_tiles),
                                std::max(keys, vws_.max_verify_keys));
  // Selection outputs of the mask rows and the gather of two logits per row (p(draft)).
  const int64_t R = vws_.max_logit_rows;
  auto pad = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t b_x0 = pad(static_cast<size_t>(R) * 4), b_conf = pad(static_cast<size_t>(R) * 8);
  const size_t b_idx = pad(static_cast<size_t>(2 * R) * 4), b_val = static_cast<size_t>(2 * R) * 4;
  vsel_buf_ = backend_.alloc(b_x0 + b_conf + b_idx + b_val, "flash-verify selection outputs");
  char* base = static_cast<char*>(vsel_buf_.data());
  vx0_ = Tensor(base, DType::kI32, backend_.device(), {R});
  vconf_ = Tensor(base + b_x0, DType::kF64, backend_.device(), {R});
  vidx_ = Tensor(base + b_x0 + b_conf, DType::kI32, backend_.device(), {2 * R});
  vval_ = Tensor(base + b_x0 + b_conf + b_idx, DType::kF32, backend_.device(), {2 * R, 1});
}

void FlashCacheDenoiser::ensure_workspace(int64_t tokens, int64_t logit_rows, int64_t tiles) {
  if (ws_.max_tokens >= tokens && ws_.max_logit_rows >= logit_rows && ws_.max_tiles >= tiles) return;
  ws_ = make_forward_workspace(backend_, model_.config, std::max(tokens, ws_.max_tokens),
                               std::max(logit_rows, ws_.max_logit_rows), std::max(tiles, ws_.max_tiles));
  const int64_t R = ws_.max_logit_rows;
  const size_t bytes_x0 = static_cast<size_t>(R) * 4, pad = (bytes_x0 + 255) / 256 * 256;
  sel_buf_ = backend_.alloc(pad + static_cast<size_t>(R) * 8, "flash-cache token selection outputs");
  x0_ = Tensor(sel_buf_.data(), DType::kI32, backend_.device(), {R});
  conf_ = Tensor(static_cast<char*>(sel_buf_.data()) + pad, DType::kF64, backend_.device(), {R});
}

FlashCacheResult FlashCacheDenoiser::generate(const std::vector<std::vector<int32_t>>& prompts,
                                              const FlashStepObserver& observer) {
  const LladaConfig& c = model_.config;
  FDLLM_CHECK_ARG(!prompts.empty(), "flash-cache: no prompts");
  int64_t max_p = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    FDLLM_CHECK_ARG(!prompts[i].empty(), "flash-cache: prompt {} is empty", i);
    for (size_t p = 0; p < prompts[i].size(); ++p)
      FDLLM_CHECK_ARG(prompts[i][p] >= 0 && prompts[i][p] < c.embedding_size,
                      "flash-cache: prompt {} token {} at position {} is outside the vocabulary [0, {})", i,
                      prompts[i][p], p, c.embedding_size);
    max_p = std::max<int64_t>(max_p, static_cast<int64_t>(prompts[i].size()));
    FDLLM_CHECK_ARG(static_cast<int64_t>(prompts[i].size()) + opt_.gen_length <= c.max_sequence_length,
                    "flash-cache: prompt {} of {} tokens + gen_length {} = {} exceeds the model's max_sequence_length {}",
                    i, prompts[i].size(), opt_.gen_length, static_cast<int64_t>(prompts[i].size()) + opt_.gen_length,
                    c.max_sequence_length);
  }
  const int64_t L = flash_max_length(max_p, opt_.gen_length, opt_.block_length, opt_.key_tile);
  FDLLM_CHECK_ARG(L <= model_.rope.table.cos.rows(),
                  "flash-cache: slot length L_max = {} (longest prompt {} + gen_length {} + block_length {}, rounded "
                  "up to the {}-key tile) exceeds the model's RoPE table of {} positions",
                  L, max_p, opt_.gen_length, opt_.block_length, opt_.key_tile, model_.rope.table.cos.rows());
  const int64_t n_slots = std::min<int64_t>(opt_.n_slots, static_cast<int64_t>(prompts.size()));
  // Host slot rows have L_max entries (they shape the windows near the end); the K/V store needs
  // only the rows a slot can query (flash_slot_length), Ls per slot. With reference_quirks the
  // released code's decoded EOS padding moves windows past that, so the store keeps L_max rows.
  const int64_t Ls = opt_.reference_quirks ? L : flash_slot_length(max_p, opt_.gen_length, opt_.block_length, opt_.key_tile);
  FDLLM_CHECK_ARG(n_slots * Ls < (int64_t{1} << 31), "flash-cache: {} slots × {} store rows exceed 2^31 store rows",
                  n_slots, Ls);

  // Flat K/V cache: per layer [n_slots·Ls, n_heads·head_dim]; refuse what cannot fit.
  const size_t kv_bytes = flash_kv_cache_bytes(c, backend_.activation_dtype(), n_slots, Ls);
  const size_t free_bytes = backend_.free_memory();
  if (kv_bytes > free_bytes) {
    const int64_t fit = flash_max_slots(c, backend_.activation_dtype(), Ls, free_bytes);
    FDLLM_FAIL(ErrorCode::kOutOfMemory,
               "flash-cache: the K/V cache for {} slots × {} rows needs {:.2f} GiB but only {:.2f} GiB are free on {}; "
               "at most {} slot(s) fit (pass fewer slots or a shorter gen_length)",
               n_slots, Ls, static_cast<double>(kv_bytes) / (1 << 30), static_cast<double>(free_bytes) / (1 << 30),
               backend_.name(), fit);
  }
  KvStore kv = make_kv_store(backend_, c, n_slots * Ls, /*shared_across_layers=*/false);
  Buffer score_buf = backend_.alloc(static_cast<size_t>(n_slots * Ls) * sizeof(float), "flash-cache importance");
  Tensor scores_dev(score_buf.data(), DType::kF32, backend_.device(), {n_slots * Ls});
  backend_.fill_zero(scores_dev);
  std::vector<float> store_scores(static_cast<size_t>(n_slots * Ls));
  std::vector<float> scores(static_cast<size_t>(n_slots * L), 0.f);  // per slot [0, L_max); past Ls always 0

  FlashCacheResult res;
  res.requests.resize(prompts.size());
  res.stats.n_slots = n_slots;
  res.stats.max_length = L;
  res.stats.store_stride = Ls;
  res.stats.kv_bytes = kv_bytes;
  std::vector<FlashSlot> slots(static_cast<size_t>(n_slots));
  size_t next = 0;
  auto admit = [&](size_t j) {
    const size_t r = next++;
    slots[j] = flash_init_slot(static_cast<int64_t>(r), prompts[r], L, opt_, c.mask_token_id, c.eos_token_id);
    FlashRequestResult& rr = res.requests[r];
    rr.request = static_cast<int64_t>(r);
    rr.slot = static_cast<int64_t>(j);
    rr.prompt_len = slots[j].prompt_len;
    rr.seqlen_k = slots[j].seqlen_k;
  };
  for (size_t j = 0; j < slots.size(); ++j) admit(j);

  SelectParams sp;  // greedy argmax, float64 confidence (reference §D.7)
  sp.confidence_f64 = true;
  while (std::any_of(slots.begin(), slots.end(), [](const FlashSlot& s) { return s.active(); })) {
    // The main pass: one forward call per slot group (several only when the rows exceed
    // max_forward_rows, i.e. admission prefills); window predictions come back in slot order.
    std::vector<int32_t> x0;
    std::vector<double> conf;
    int64_t T = 0;
    for (const auto& [first, last] : flash_forward_groups(slots, opt_.max_forward_rows)) {
      ForwardBatch fb = flash_plan(slots, Ls, opt_, c.n_heads, first, last);
      fb.importance.scores = scores_dev;
      const int64_t Tg = fb.n_tokens(), R = static_cast<int64_t>(fb.logit_rows.size());
      ensure_workspace(Tg, R, static_cast<int64_t>(fb.tiles.size()));
      Tensor logits = llada_forward(backend_, model_, fb, kv, ws_);
      Tensor x0_dev = x0_.slice_rows(0, R), conf_dev = conf_.slice_rows(0, R);
      backend_.select_tokens(logits, ws_.row_keys.slice_rows(0, R), sp, x0_dev, conf_dev);
      x0.resize(x0.size() + static_cast<size_t>(R));
      conf.resize(conf.size() + static_cast<size_t>(R));
      backend_.copy_to_host(x0.data() + x0.size() - R, x0_dev);
      backend_.copy_to_host(conf.data() + conf.size() - R, conf_dev);
      T += Tg;
    }
    backend_.copy_to_host(store_scores.data(), scores_dev);
    for (int64_t j = 0; j < n_slots; ++j)
      std::copy_n(store_scores.begin() + j * Ls, Ls, scores.begin() + j * L);
    backend_.fill_zero(scores_dev);
    const int64_t forward = res.stats.forwards++;
    res.stats.query_rows += T;

    // Phase 1 (every mode): the main-pass decision of every active slot, committed.
    struct SlotStep {
      bool active = false, work = false;
      int64_t k1 = 0;
      FlashDecision decision;
      std::vector<int32_t> committed;  // this iteration's commits (slot-relative)
      std::vector<int32_t> verified;   // the verified subset
    };
    std::vector<SlotStep> steps(slots.size());
    std::vector<FlashVerifyTile> tiles;
    size_t r0 = 0;
    for (size_t j = 0; j < slots.size(); ++j) {
      FlashSlot& s = slots[j];
      if (!s.active()) continue;
      const size_t w = s.window.size();
      std::span<const float> slot_scores(scores.data() + j * static_cast<size_t>(L), static_cast<size_t>(L));
      SlotStep& st = steps[j];
      st.active = true;
      st.decision = flash_decide(s, std::span<const double>(conf.data() + r0, w),
                                 std::span<const int32_t>(x0.data() + r0, w), opt_);
      FlashDecision& d = st.decision;
      r0 += w;  // only the window's own rows, also when it is shorter than block_length
      if (observer) {
        FlashStep step;
        step.forward = forward;
        step.slot = static_cast<int64_t>(j);
        step.state = &s;
        step.decision = &d;
        step.importance = slot_scores;
        observer(step);
        if (!step.forced_positions.empty() || !step.forced_tokens.empty())
          flash_force(d, step.forced_positions, step.forced_tokens);
      }
      for (int64_t i = 0; i < d.count; ++i)
        st.committed.push_back(d.window[static_cast<size_t>(d.order[static_cast<size_t>(i)])]);
      const int64_t n_valid = opt_.verify ? flash_verify_valid_count(s, d, opt_) : 0;
      st.k1 = d.count;
      st.work = flash_commit(s, d, c.eos_token_id);
      if (!opt_.verify) continue;
      FlashVerifyTile tile = flash_verify_plan_slot(s, static_cast<int64_t>(j), d, n_valid, opt_);
      // Released code: a tile for every active slot; default: only where candidates can be accepted.
      if (opt_.reference_quirks || (!tile.candidates.empty() && st.work)) tiles.push_back(std::move(tile));
    }

    // Phase 2 (verify): one verify pass over every tile, acceptance, commit.
    if (!tiles.empty()) {
      VerifyBatch vb = flash_verify_batch(slots, tiles, Ls);
      const int64_t VT = vb.n_tokens(), VR = static_cast<int64_t>(vb.logit_rows.size());
      ensure_verify_workspace(VT, VR, static_cast<int64_t>(vb.tiles.size()), static_cast<int64_t>(vb.key_rows.size()));
      Tensor vlogits = llada_verify_forward(backend_, model_, vb, kv, vws_);
      res.stats.verify_forwards += 1;
      res.stats.verify_query_rows += VT;
      // Mask-view argmax / max probability (select_tokens), then p(draft) = p_max · exp(ℓ_draft − ℓ_argmax)
      // from the two gathered logits (the same float64 softmax, without copying whole logit rows).
      std::vector<int32_t> vx0(static_cast<size_t>(VR));
      std::vector<double> vconf(static_cast<size_t>(VR));
      std::vector<float> vval(static_cast<size_t>(2 * VR));
      std::vector<int32_t> drafts;
      for (const FlashVerifyTile& v : tiles) drafts.insert(drafts.end(), v.drafts.begin(), v.drafts.end());
      if (VR > 0) {
        Tensor x0_dev = vx0_.slice_rows(0, VR), conf_dev = vconf_.slice_rows(0, VR);
        backend_.select_tokens(vlogits, vws_.row_keys.slice_rows(0, VR), sp, x0_dev, conf_dev);
        backend_.copy_to_host(vx0.data(), x0_dev);
        backend_.copy_to_host(vconf.data(), conf_dev);
        const int64_t V = vlogits.row_size();
        FDLLM_CHECK_ARG(VR * V < (int64_t{1} << 31), "flash-verify: {} mask rows × vocabulary {} exceed 2^31 logits",
                        VR, V);
        std::vector<int32_t> idx(static_cast<size_t>(2 * VR));
        for (int64_t r = 0; r < VR; ++r) {
          idx[static_cast<size_t>(r)] = static_cast<int32_t>(r * V + drafts[static_cast<size_t>(r)]);
          idx[static_cast<size_t>(VR + r)] = static_cast<int32_t>(r * V + vx0[static_cast<size_t>(r)]);
        }
        Tensor idx_dev = vidx_.slice_rows(0, 2 * VR), val_dev = vval_.slice_rows(0, 2 * VR);
        backend_.copy_from_host(idx_dev, idx.data());
        backend_.gather_rows(vlogits.reshape({VR * V, 1}), idx_dev, val_dev);
        backend_.copy_to_host(vval.data(), val_dev);
      }
      size_t m0 = 0;
      for (const FlashVerifyTile& v : tiles) {
        const auto j = static_cast<size_t>(v.slot);
        FlashSlot& s = slots[j];
        SlotStep& st = steps[j];
        const size_t S = v.candidates.size();
        FlashVerification ver;
        ver.tile = &v;
        for (size_t i = 0; i < S; ++i) {
          const size_t r = m0 + i;
          ver.argmax.push_back(vx0[r]);
          ver.p_max.push_back(vconf[r]);
          ver.p_draft.push_back(v.drafts[i] == vx0[r] ? vconf[r]
                                                      : vconf[r] * std::exp(static_cast<double>(vval[r]) -
                                                                            static_cast<double>(vval[static_cast<size_t>(VR) + r])));
        }
        m0 += S;
        ver.blocked = flash_verify_blocked(s, v, opt_);
        ver.count = flash_verify_accept(ver.p_draft, ver.p_max, ver.argmax, v.drafts, ver.blocked, opt_.verify_rule,
                                        opt_.gamma, opt_.forced_acceptance);
        std::vector<int32_t> accepted(v.candidates.begin(), v.candidates.begin() + ver.count);
        std::vector<int32_t> tokens(v.drafts.begin(), v.drafts.begin() + ver.count);
        if (observer) {
          FlashStep step;
          step.forward = forward;
          step.slot = static_cast<int64_t>(j);
          step.phase = 2;
          step.state = &s;
          step.decision = &st.decision;
          step.verification = &ver;
          step.importance = std::span<const float>(scores.data() + j * static_cast<size_t>(L), static_cast<size_t>(L));
          observer(step);
          if (step.override_acceptance || !step.forced_positions.empty()) {
            accepted = step.forced_positions;
            tokens = step.forced_tokens;
          }
        }
        s.verify_passes += 1;
        s.candidates += static_cast<int64_t>(S);
        st.work = flash_verify_commit(s, v, accepted, tokens, st.k1, c.eos_token_id, !opt_.reference_quirks);
        st.verified = accepted;
        st.committed.insert(st.committed.end(), accepted.begin(), accepted.end());
      }
    }

    // Continue (re-rank, next queries) or finish and refill.
    for (size_t j = 0; j < slots.size(); ++j) {
      FlashSlot& s = slots[j];
      SlotStep& st = steps[j];
      if (!st.active) continue;
      std::span<const float> slot_scores(scores.data() + j * static_cast<size_t>(L), static_cast<size_t>(L));
      FlashRequestResult& rr = res.requests[static_cast<size_t>(s.request)];
      const auto rel = [&](std::vector<int32_t> v) {
        for (int32_t& t : v) t -= static_cast<int32_t>(s.prompt_len);
        std::sort(v.begin(), v.end());
        return v;
      };
      rr.iterations.push_back(rel(st.committed));
      if (opt_.verify) rr.verified.push_back(rel(st.verified));
      if (st.work) {
        flash_rerank(s, slot_scores, opt_);
        continue;
      }
      // Finished (§D.9): record, then refill from the queue in this same iteration.
      const auto P = static_cast<size_t>(s.prompt_len);
      const size_t end = opt_.reference_quirks ? static_cast<size_t>(s.num_decoded) : static_cast<size_t>(s.stop);
      rr.output_ids.assign(s.x.begin() + static_cast<std::ptrdiff_t>(P), s.x.begin() + static_cast<std::ptrdiff_t>(end));
      rr.canvas.assign(s.x.begin() + static_cast<std::ptrdiff_t>(P),
                       s.x.begin() + static_cast<std::ptrdiff_t>(s.seqlen_k));
      rr.nfe = s.iterations;
      rr.forward_passes = s.iterations + s.verify_passes;
      rr.candidates = s.candidates;
      rr.accepted = s.accepted;
      rr.num_tokens = s.stop - s.prompt_len;
      rr.num_tokens_reference = s.num_decoded - s.prompt_len;
      rr.stop_rel = s.stop - s.prompt_len;
      rr.eos_rel = s.eos_pos >= 0 ? s.eos_pos - s.prompt_len : -1;
      res.stats.nfe += rr.nfe;
      res.stats.num_tokens += rr.num_tokens;
      res.stats.num_tokens_reference += rr.num_tokens_reference;
      res.stats.max_num_tokens += opt_.gen_length;
      res.stats.candidates += rr.candidates;
      res.stats.accepted += rr.accepted;
      if (next < prompts.size()) {
        admit(j);
      } else {
        s = FlashSlot{};
      }
    }
  }
  res.stats.free_bytes_at_end = backend_.free_memory();
  return res;
}

}  // namespace flashdllm
