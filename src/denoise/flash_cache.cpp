// Flash-Cache denoiser; see flash_cache.h for the algorithm, the layout and the deviations.
#include "denoise/flash_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "denoise/block_decoding.h"  // noise_key
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

/// Laps of a step's host phases: lap(p) adds the time since the previous lap (or construction) to
/// phase p's seconds.
class PhaseClock {
 public:
  explicit PhaseClock(std::array<double, kFlashPhases>& seconds) : seconds_(seconds) {}
  void lap(FlashPhase p) {
    const auto now = std::chrono::steady_clock::now();
    seconds_[static_cast<size_t>(p)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  std::array<double, kFlashPhases>& seconds_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

/// Sorts `values` by `keys` (same length), stably (equal keys keep their order): an LSD radix sort,
/// 8 bits per pass, skipping the passes in which every key has the same digit. Branch-free and
/// linear: at 32 slots x ~600 decoded positions the comparison sorts it replaces took 0.7-1.1 ms per
/// iteration on the H200 machines' hosts (bench/results/2026-12-05-h200-host-phases/; this host:
/// bench/results/2026-12-05-cpu-host-phases/).
void stable_radix_sort(std::vector<uint32_t>& keys, std::span<int32_t> values) {
  const size_t n = keys.size();
  FDLLM_ASSERT_MSG(values.size() == n, "stable_radix_sort: {} keys, {} values", n, values.size());
  std::array<std::array<uint32_t, 256>, 4> count{};
  for (const uint32_t k : keys)
    for (int d = 0; d < 4; ++d) ++count[static_cast<size_t>(d)][(k >> (8 * d)) & 0xffu];
  std::vector<uint32_t> k2(n);
  std::vector<int32_t> v2(n);
  uint32_t* kin = keys.data();
  int32_t* vin = values.data();
  uint32_t* kout = k2.data();
  int32_t* vout = v2.data();
  for (int d = 0; d < 4; ++d) {
    std::array<uint32_t, 256>& c = count[static_cast<size_t>(d)];
    if (n == 0 || c[(kin[0] >> (8 * d)) & 0xffu] == n) continue;  // one digit value: the order stays
    uint32_t at = 0;
    for (uint32_t& x : c) at += std::exchange(x, at);  // bucket starts
    for (size_t i = 0; i < n; ++i) {
      const uint32_t o = c[(kin[i] >> (8 * d)) & 0xffu]++;
      kout[o] = kin[i];
      vout[o] = vin[i];
    }
    std::swap(kin, kout);
    std::swap(vin, vout);
  }
  if (vin != values.data()) std::copy_n(vin, n, values.data());
}

}  // namespace

const char* flash_phase_name(FlashPhase p) noexcept {
  switch (p) {
    case FlashPhase::kMainCall: return "main forward call";
    case FlashPhase::kMainWait: return "main result wait";
    case FlashPhase::kDecide: return "decide and commit";
    case FlashPhase::kVerifyBatch: return "verify batch";
    case FlashPhase::kVerifyCall: return "verify forward call";
    case FlashPhase::kEarlyRerank: return "early re-rank";
    case FlashPhase::kVerifyWait: return "verify result wait";
    case FlashPhase::kAccept: return "acceptance";
    case FlashPhase::kContinue: return "continue";
  }
  return "?";
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
  FDLLM_CHECK_ARG(o.verify_rule == VerifyRule::kProduct || o.verify_rule == VerifyRule::kPaper,
                  "flash-cache: unknown verify_rule {}", static_cast<int>(o.verify_rule));
  FDLLM_CHECK_ARG(o.verify_kept == VerifyKept::kReleased || o.verify_kept == VerifyKept::kCommits,
                  "flash-cache: unknown verify_kept {}", static_cast<int>(o.verify_kept));
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
  SlotParams p;
  p.gen_length = o.gen_length;
  FlashSlot s = flash_init_slot(request, prompt, max_length, o, p, mask_id, eos_id);
  s.threshold.reset();  // follows the options
  return s;
}

FlashSlot flash_init_slot(int64_t request, std::span<const int32_t> prompt, int64_t max_length,
                          const FlashCacheOptions& o, const SlotParams& p, int32_t mask_id, int32_t eos_id) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t G = p.gen_length;
  FDLLM_CHECK_ARG(P > 0, "flash-cache: request {} has an empty prompt", request);
  FDLLM_CHECK_ARG(G > 0, "flash-cache: request {}: gen_length must be positive, got {}", request, G);
  FDLLM_CHECK_ARG(P + G + o.block_length <= max_length,
                  "flash-cache: request {}: prompt {} + gen_length {} + block_length {} exceeds the slot length {}",
                  request, P, G, o.block_length, max_length);
  for (int64_t i = 0; i < P; ++i)
    FDLLM_CHECK_ARG(prompt[i] != mask_id, "flash-cache: request {}: prompt position {} holds the mask token id {}",
                    request, i, mask_id);
  FlashSlot s;
  s.request = request;
  s.prompt_len = P;
  s.gen_length = G;
  s.threshold = p.threshold;
  s.temperature = p.temperature;
  s.seed = p.seed;
  s.seqlen_k = flash_seqlen_k(P, G, o.key_tile);
  FDLLM_CHECK_ARG(s.seqlen_k <= max_length,
                  "flash-cache: request {}: key length seqlen_k {} exceeds the slot length {} (use flash_max_length)",
                  request, s.seqlen_k, max_length);
  s.num_decoded = P;
  s.stop = P + G;
  s.x.assign(static_cast<size_t>(max_length), eos_id);
  std::copy(prompt.begin(), prompt.end(), s.x.begin());
  std::fill(s.x.begin() + P, s.x.begin() + P + G, mask_id);
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
  size_t rows = 0, windows = 0;
  for (size_t j = first; j < last; ++j) {
    rows += static_cast<size_t>(flash_query_rows(slots[j]));
    windows += slots[j].active() ? slots[j].window.size() : 0;
  }
  fb.token_ids.reserve(rows);
  fb.positions.reserve(rows);
  fb.kv_rows.reserve(rows);
  fb.logit_rows.reserve(windows);
  fb.row_keys.reserve(windows);
  auto add_rows = [&](const FlashSlot& s, int64_t j, const std::vector<int32_t>& pos) {
    if (pos.empty()) return;
    const auto [lo, hi] = std::minmax_element(pos.begin(), pos.end());
    FDLLM_CHECK_ARG(*lo >= 0 && *hi < store_stride && *hi < static_cast<int64_t>(s.x.size()),
                    "flash_plan: slot {} queries position {} outside its {} store rows", j, *lo < 0 ? *lo : *hi,
                    std::min<int64_t>(store_stride, static_cast<int64_t>(s.x.size())));
    const auto base = static_cast<int32_t>(j * store_stride);
    for (int32_t t : pos) {
      fb.token_ids.push_back(s.x[static_cast<size_t>(t)]);
      fb.positions.push_back(t);
      fb.kv_rows.push_back(base + t);
    }
  };
  // Per active slot, query rows [window | tracked set]; its first tile holds the window (and, with
  // query_tile_rows 0, the tracked set too), the score tile is its window rows; the other tiles of
  // the tracked set follow the first tiles of all slots (score tile i lies inside tile i).
  std::vector<AttentionTile> rest;
  int32_t q = 0;
  for (size_t j = first; j < last; ++j) {
    const FlashSlot& s = slots[j];
    if (!s.active()) continue;
    FDLLM_CHECK_ARG(!s.window.empty(), "flash_plan: active slot {} has an empty masked window", j);
    const auto k0 = static_cast<int32_t>(static_cast<int64_t>(j) * store_stride);
    const auto k1 = k0 + static_cast<int32_t>(s.seqlen_k);
    add_rows(s, static_cast<int64_t>(j), s.window);
    add_rows(s, static_cast<int64_t>(j), s.tracked);
    const auto n = static_cast<int32_t>(s.window.size()), m = static_cast<int32_t>(s.tracked.size());
    for (int32_t r = 0; r < n; ++r) {
      fb.logit_rows.push_back(q + r);
      // Greedy (Flash-dLLM): no noise. Sampling: a key per (seed, iteration, position), as the LLaDA sampler.
      fb.row_keys.push_back(s.temperature > 0.0 ? static_cast<int32_t>(noise_key(s.seed, s.iterations,
                                                                                  s.window[static_cast<size_t>(r)]))
                                                : 0);
    }
    fb.importance.tiles.push_back({q, q + n, k0, k1});
    if (o.query_tile_rows == 0) {
      fb.tiles.push_back({q, q + n + m, k0, k1});
    } else {  // the released tiling: the window, then the tracked set in tiles of query_tile_rows rows
      fb.tiles.push_back({q, q + n, k0, k1});
      const auto tile_rows = static_cast<int32_t>(std::min<int64_t>(o.query_tile_rows, std::max(m, 1)));
      for (int32_t r = 0; r < m; r += tile_rows)
        rest.push_back({q + n + r, q + n + std::min(m, r + tile_rows), k0, k1});
    }
    q += n + m;
  }
  FDLLM_CHECK_ARG(!fb.tiles.empty(), "flash_plan: no active slot in slots [{}, {})", first, last);
  fb.tiles.insert(fb.tiles.end(), rest.begin(), rest.end());
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
    const double threshold = s.threshold.value_or(o.threshold);
    for (size_t r = 0; r < w; ++r) k += d.eligible[r] && d.confidence[r] >= threshold;
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
  flash_rank_decoded(s, scores, s.num_decoded - s.last_committed);
  flash_prepare_queries(s, o);
}

void flash_rank_decoded(FlashSlot& s, std::span<const float> scores, int64_t n_decoded_old) {
  FDLLM_CHECK_ARG(scores.size() == s.full_pos.size(), "flash_rerank: {} scores for a slot of {} positions",
                  scores.size(), s.full_pos.size());
  FDLLM_CHECK_ARG(n_decoded_old >= 0 && n_decoded_old <= static_cast<int64_t>(s.full_pos.size()),
                  "flash_rerank: {} positions to rank in a slot of {}", n_decoded_old, s.full_pos.size());
  const auto n_old = static_cast<size_t>(n_decoded_old);
  const auto old_end = s.full_pos.begin() + static_cast<std::ptrdiff_t>(n_old);
  const auto score = [&](int32_t t) { return scores[static_cast<size_t>(t)]; };
  if (std::any_of(s.full_pos.begin(), old_end, [&](int32_t t) { return std::isnan(score(t)); })) {
    // NaN is unordered: keep the comparison sort's behaviour for it.
    std::stable_sort(s.full_pos.begin(), old_end, [&](int32_t a, int32_t b) { return score(a) < score(b); });
  } else {
    // The same order as a stable sort by score (ties keep their order): each score's bits mapped to
    // an unsigned integer of the same order (-0 as +0, which `<` calls equal), then a stable LSD
    // radix sort of the positions by them (stable_radix_sort).
    std::vector<uint32_t> keys(n_old);
    for (size_t i = 0; i < n_old; ++i) {
      const float v = score(s.full_pos[i]);
      uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof(bits));
      if (v == 0.0f) bits = 0;
      keys[i] = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
    }
    stable_radix_sort(keys, std::span<int32_t>(s.full_pos.data(), n_old));
  }
}

// ---------------------------------------------------------------------------------- the pool

namespace {

size_t pad256(size_t b) { return (b + 255) / 256 * 256; }

/// The sizes of a pool's buffers for n slots of prompt + gen_length <= T: allocate_pool allocates
/// them, flash_pool_bytes adds them up.
struct PoolShape {
  int64_t L = 0, Ls = 0;  // L_max (host slot rows) and the K/V store rows per slot
  // Main-pass workspace: a slot queries at most Ls + bm rows (its prefill, or a full-recompute
  // window and tracked set); forward calls are cut at max_forward_rows unless one slot alone
  // exceeds it (flash_forward_groups).
  int64_t tokens = 0, logit_rows = 0, tiles = 0;
  size_t conf_offset = 0, scores_offset = 0, sel_bytes = 0;  // [x0 | conf | scores], 256-byte aligned parts
  // Verify pass: a tile of at most 2·bm rows per slot (k1 + 2·S <= 2·bm for verify_kept commits), at
  // most the cap's mask rows, keys < seqlen_k <= Ls.
  int64_t v_tokens = 0, v_logit_rows = 0, v_tiles = 0, v_keys = 0;
  size_t v_x0 = 0, v_conf = 0, v_val = 0, v_drafts = 0;  // [x0 | conf | ℓ_draft, ℓ_argmax | drafts]
};

PoolShape pool_shape(const FlashCacheOptions& o, int64_t n, int64_t T) {
  FDLLM_CHECK_ARG(n >= 1 && T >= 2,
                  "flash-cache: a pool needs >= 1 slot and room for a prompt and a canvas, got {} "
                  "slots x {} positions",
                  n, T);
  const int64_t bm = o.block_length, kt = o.key_tile;
  PoolShape p;
  // L_max and the store stride for prompt + gen_length = T (flash_max_length / flash_slot_length).
  // Host slot rows have L_max entries with reference_quirks (they shape the windows near the end);
  // the K/V store needs only the rows a slot can query. With reference_quirks the released code's
  // decoded EOS padding moves windows past that, so the store keeps L_max rows.
  p.L = (T + bm) / kt * kt + kt;
  p.Ls = o.reference_quirks ? p.L : std::max(T / kt * kt + kt, T + bm);
  const int64_t slot_rows = p.Ls + bm;
  p.tokens = n * slot_rows;
  if (o.max_forward_rows > 0) p.tokens = std::min(p.tokens, std::max(o.max_forward_rows, slot_rows));
  const int64_t tile_rows = o.query_tile_rows > 0 ? o.query_tile_rows : slot_rows;
  // Per slot: its window tile (with query_tile_rows 0 the whole slot), its tracked tiles, its score tile.
  p.tiles = n * (2 + (slot_rows + tile_rows - 1) / tile_rows);
  p.logit_rows = n * bm;
  const auto R = static_cast<size_t>(p.logit_rows);
  p.conf_offset = pad256(R * 4);
  p.scores_offset = p.conf_offset + pad256(R * 8);
  p.sel_bytes = p.scores_offset + static_cast<size_t>(n * p.Ls + 1) * sizeof(float);
  p.v_tokens = n * 2 * bm;
  p.v_logit_rows = std::max<int64_t>(1, n * flash_verify_cap(o));
  p.v_tiles = n;
  p.v_keys = n * p.Ls;
  const auto VR = static_cast<size_t>(p.v_logit_rows);
  p.v_x0 = pad256(VR * 4);
  p.v_conf = pad256(VR * 8);
  p.v_val = pad256(2 * VR * 4);
  p.v_drafts = VR * 4;
  return p;
}

/// The one forward-workspace buffer of a pool: the main pass's layout, or the verify pass's if larger.
size_t pool_workspace_bytes(const PoolShape& p, const FlashCacheOptions& o, const LladaConfig& c, DType act,
                            const TensorParallel& tp) {
  const size_t main = forward_workspace_bytes(act, c, p.tokens, p.logit_rows, p.tiles, 0, tp);
  if (!o.verify) return main;
  return std::max(main, forward_workspace_bytes(act, c, p.v_tokens, p.v_logit_rows, p.v_tiles, p.v_keys, tp));
}

}  // namespace

FlashPoolBytes flash_pool_bytes(const LladaConfig& cfg, DType act, const FlashCacheOptions& o, int64_t n_slots,
                                int64_t max_total_length, const TensorParallel& tp) {
  const PoolShape p = pool_shape(o, n_slots, max_total_length);
  FlashPoolBytes b;
  b.store_stride = p.Ls;
  b.forward_rows = p.tokens;
  b.kv = kv_store_bytes(act, cfg, n_slots * p.Ls + 1, /*shared_across_layers=*/false, tp);
  b.workspace = pool_workspace_bytes(p, o, cfg, act, tp);
  b.selection = p.sel_bytes;
  if (o.verify) b.verify = p.v_x0 + p.v_conf + p.v_val + p.v_drafts;
  return b;
}

FlashCacheDenoiser::FlashCacheDenoiser(Backend& backend, const LladaModel& model, FlashCacheOptions options)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  validate_flash_cache_options(opt_, model_.config);
}

FlashCacheDenoiser::FlashCacheDenoiser(Backend& backend, const LladaModel& model, FlashCacheOptions options,
                                       const SlotPool& pool)
    : FlashCacheDenoiser(backend, model, std::move(options)) {
  allocate_pool(pool);
}

void FlashCacheDenoiser::allocate_pool(const SlotPool& pool) {
  const LladaConfig& c = model_.config;
  const int64_t n = pool.n_slots, T = pool.max_total_length, bm = opt_.block_length, kt = opt_.key_tile;
  const PoolShape p = pool_shape(opt_, n, T);
  const int64_t L = p.L, Ls = p.Ls;
  FDLLM_CHECK_ARG(L <= model_.rope.table.cos.rows(),
                  "flash-cache: slot length L_max = {} (prompt + gen_length {} + block_length {}, rounded up to the "
                  "{}-key tile) exceeds the model's RoPE table of {} positions",
                  L, T, bm, kt, model_.rope.table.cos.rows());
  FDLLM_CHECK_ARG(n * Ls + 1 < (int64_t{1} << 31), "flash-cache: {} slots × {} store rows (+ 1) exceed 2^31 store rows",
                  n, Ls);
  // Flat K/V cache: per layer [n_slots·Ls + 1, n_heads·head_dim] (the last row: padding rows' K/V,
  // below); refuse what cannot fit. This rank's share: its heads (tensor parallelism splits the K/V
  // cache by heads).
  const auto world = static_cast<size_t>(model_.tp.world);
  const size_t kv_bytes = kv_store_bytes(backend_.activation_dtype(), c, n * Ls + 1, false, model_.tp);
  const size_t free_bytes = backend_.free_memory();
  if (kv_bytes > free_bytes) {
    const int64_t fit = flash_max_slots(c, backend_.activation_dtype(), Ls, free_bytes * world);
    FDLLM_FAIL(ErrorCode::kOutOfMemory,
               "flash-cache: the K/V cache for {} slots × {} rows needs {:.2f} GiB but only {:.2f} GiB are free on {}; "
               "at most {} slot(s) fit (pass fewer slots or a shorter gen_length)",
               n, Ls, static_cast<double>(kv_bytes) / (1 << 30), static_cast<double>(free_bytes) / (1 << 30),
               backend_.name(), fit);
  }
  kv_ = KvStore{};
  // The slots' rows, then one row no tile reads: the K/V of the main pass's padding rows
  // (ForwardBatch::pad_kv_row), so that passes of nearby row counts share a recorded graph.
  kv_ = make_kv_store(backend_, c, n * Ls + 1, /*shared_across_layers=*/false, model_.tp);
  store_scores_.assign(static_cast<size_t>(n * Ls), 0.f);
  scores_.assign(static_cast<size_t>(n * L), 0.f);
  L_ = L;
  Ls_ = Ls;
  pool_total_ = T;
  slots_.assign(static_cast<size_t>(n), FlashSlot{});
  done_.assign(static_cast<size_t>(n), FlashSlot{});
  results_.assign(static_cast<size_t>(n), FlashRequestResult{});
  stats_ = FlashRunStats{};
  stats_.n_slots = n;
  stats_.max_length = L;
  stats_.store_stride = Ls;
  stats_.kv_bytes = kv_.bytes;

  // Workspaces for the largest iteration the pool can make (pool_shape), the main and the verify
  // pass's in one buffer (never in use at the same time).
  ws_ = ForwardWorkspace{};
  vws_ = ForwardWorkspace{};
  ws_buf_ = Buffer{};
  ws_buf_ = backend_.alloc(pool_workspace_bytes(p, opt_, c, backend_.activation_dtype(), model_.tp),
                           "forward workspace (main and verify passes)");
  ws_ = make_forward_workspace(backend_, c, p.tokens, p.logit_rows, p.tiles, 0, model_.tp, &ws_buf_);
  const int64_t R = ws_.max_logit_rows;
  conf_offset_ = p.conf_offset;
  scores_offset_ = p.scores_offset;
  sel_buf_ = backend_.alloc(p.sel_bytes, "flash-cache selection outputs and importance");
  sel_host_.assign(p.sel_bytes, std::byte{0});
  char* sel = static_cast<char*>(sel_buf_.data());
  x0_ = Tensor(sel, DType::kI32, backend_.device(), {R});
  conf_ = Tensor(sel + conf_offset_, DType::kF64, backend_.device(), {R});
  scores_dev_ = Tensor(sel + scores_offset_, DType::kF32, backend_.device(), {n * Ls + 1});  // one per store row
  backend_.fill_zero(scores_dev_);
  stats_.pool_bytes = kv_.bytes + ws_buf_.bytes() + sel_buf_.bytes();
  if (!opt_.verify) return;
  vws_ = make_forward_workspace(backend_, c, p.v_tokens, p.v_logit_rows, p.v_tiles, p.v_keys, model_.tp, &ws_buf_);
  const int64_t VR = vws_.max_logit_rows;
  vsel_buf_ = backend_.alloc(p.v_x0 + p.v_conf + p.v_val + p.v_drafts, "flash-verify selection outputs");
  char* base = static_cast<char*>(vsel_buf_.data());
  vx0_ = Tensor(base, DType::kI32, backend_.device(), {VR});
  vconf_ = Tensor(base + p.v_x0, DType::kF64, backend_.device(), {VR});
  vconf_offset_ = p.v_x0;
  vval_offset_ = p.v_x0 + p.v_conf;
  vval_ = Tensor(base + vval_offset_, DType::kF32, backend_.device(), {2 * VR});
  vdrafts_ = Tensor(base + vval_offset_ + p.v_val, DType::kI32, backend_.device(), {VR});
  vsel_host_.assign(vval_offset_ + p.v_val, std::byte{0});
  stats_.pool_bytes += vsel_buf_.bytes();
}

// ---------------------------------------------------------------------------------- slot contract

void FlashCacheDenoiser::check_request(std::span<const int32_t> prompt, const SlotParams& p) const {
  const LladaConfig& c = model_.config;
  FDLLM_CHECK_ARG(!slots_.empty(), "flash-cache: no slot pool (construct the denoiser with a SlotPool)");
  check_prompt_ids(prompt, c);
  const int64_t P = static_cast<int64_t>(prompt.size());
  FDLLM_CHECK_ARG(p.gen_length >= 1, "flash-cache: gen_length must be positive, got {}", p.gen_length);
  FDLLM_CHECK_ARG(P + p.gen_length <= c.max_sequence_length,
                  "prompt of {} tokens + gen_length {} = {} exceeds the model's max_sequence_length {}", P,
                  p.gen_length, P + p.gen_length, c.max_sequence_length);
  FDLLM_CHECK_ARG(P + p.gen_length <= pool_total_,
                  "prompt of {} tokens + gen_length {} = {} exceeds the {} positions a slot of this engine holds "
                  "(max_model_len)", P, p.gen_length, P + p.gen_length, pool_total_);
  if (p.threshold)
    FDLLM_CHECK_ARG(std::isfinite(*p.threshold) && *p.threshold > 0.0 && *p.threshold <= 1.0,
                    "flash-cache: threshold must be in (0, 1], got {}", *p.threshold);
  FDLLM_CHECK_ARG(std::isfinite(p.temperature) && p.temperature >= 0.0, "flash-cache: temperature must be >= 0, got {}",
                  p.temperature);
}

void FlashCacheDenoiser::admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) {
  FDLLM_CHECK_ARG(slot >= 0 && slot < n_slots() && !active(slot), "flash-cache: slot {} is not a free slot", slot);
  check_request(prompt, p);
  const LladaConfig& c = model_.config;
  const auto P = static_cast<int64_t>(prompt.size());
  // Batch invariance: the host row of a request is its own L_max unless the released layout is asked for.
  const int64_t L = opt_.reference_quirks ? L_ : flash_max_length(P, p.gen_length, opt_.block_length, opt_.key_tile);
  const auto j = static_cast<size_t>(slot);
  const int64_t request = stats_.admitted++;
  slots_[j] = flash_init_slot(request, prompt, L, opt_, p, c.mask_token_id, c.eos_token_id);
  FlashRequestResult& rr = results_[j];
  rr = FlashRequestResult{};
  rr.request = request;
  rr.slot = slot;
  rr.prompt_len = P;
  rr.seqlen_k = slots_[j].seqlen_k;
}

void FlashCacheDenoiser::release(int64_t slot) {
  if (slot < 0 || slot >= n_slots()) return;
  const auto j = static_cast<size_t>(slot);
  slots_[j] = FlashSlot{};
  done_[j] = FlashSlot{};
  results_[j] = FlashRequestResult{};
}

bool FlashCacheDenoiser::active(int64_t slot) const noexcept {
  if (slot < 0 || slot >= n_slots()) return false;
  const auto j = static_cast<size_t>(slot);
  return slots_[j].active() || done_[j].active();
}

const FlashSlot& FlashCacheDenoiser::slot_state(int64_t slot) const {
  FDLLM_CHECK_ARG(slot >= 0 && slot < n_slots(), "flash-cache: no slot {}", slot);
  const auto j = static_cast<size_t>(slot);
  return done_[j].active() ? done_[j] : slots_[j];
}

std::span<const int32_t> FlashCacheDenoiser::canvas(int64_t slot) const {
  const FlashSlot& s = slot_state(slot);
  if (!s.active()) return {};
  return std::span<const int32_t>(s.x).subspan(static_cast<size_t>(s.prompt_len), static_cast<size_t>(s.gen_length));
}

const FlashRequestResult& FlashCacheDenoiser::result(int64_t slot) const {
  FDLLM_CHECK_ARG(slot >= 0 && slot < n_slots() && done_[static_cast<size_t>(slot)].active(),
                  "flash-cache: slot {} holds no finished request", slot);
  return results_[static_cast<size_t>(slot)];
}

SlotOutput FlashCacheDenoiser::output(int64_t slot) const {
  const FlashSlot& s = slot_state(slot);
  SlotOutput o;
  if (!s.active()) return o;
  const FlashRequestResult& rr = results_[static_cast<size_t>(slot)];
  if (done_[static_cast<size_t>(slot)].active()) {
    o.canvas = rr.output_ids;
    o.nfe = rr.nfe;
    o.committed = rr.num_tokens;
    o.committed_reference = rr.num_tokens_reference;
    o.forward_passes = rr.forward_passes;
    o.verify_candidates = rr.candidates;
    o.verify_accepted = rr.accepted;
    return o;
  }
  const auto c = canvas(slot);  // a running request: its canvas so far
  o.canvas.assign(c.begin(), c.end());
  o.nfe = s.iterations;
  o.committed = s.num_decoded - s.prompt_len;
  o.committed_reference = o.committed;
  o.forward_passes = s.iterations + s.verify_passes;
  o.verify_candidates = s.candidates;
  o.verify_accepted = s.accepted;
  return o;
}

void FlashCacheDenoiser::finish_slot(size_t j) {
  // Finished (§D.9): the final record; the slot stops taking part in iterations until release().
  FlashSlot& s = slots_[j];
  FlashRequestResult& rr = results_[j];
  const auto P = static_cast<size_t>(s.prompt_len);
  const size_t end = opt_.reference_quirks ? static_cast<size_t>(s.num_decoded) : static_cast<size_t>(s.stop);
  rr.output_ids.assign(s.x.begin() + static_cast<std::ptrdiff_t>(P), s.x.begin() + static_cast<std::ptrdiff_t>(end));
  rr.canvas.assign(s.x.begin() + static_cast<std::ptrdiff_t>(P), s.x.begin() + static_cast<std::ptrdiff_t>(s.seqlen_k));
  rr.nfe = s.iterations;
  rr.forward_passes = s.iterations + s.verify_passes;
  rr.candidates = s.candidates;
  rr.accepted = s.accepted;
  rr.num_tokens = s.stop - s.prompt_len;
  rr.num_tokens_reference = s.num_decoded - s.prompt_len;
  rr.stop_rel = s.stop - s.prompt_len;
  rr.eos_rel = s.eos_pos >= 0 ? s.eos_pos - s.prompt_len : -1;
  stats_.nfe += rr.nfe;
  stats_.num_tokens += rr.num_tokens;
  stats_.num_tokens_reference += rr.num_tokens_reference;
  stats_.max_num_tokens += s.gen_length;
  stats_.candidates += rr.candidates;
  stats_.accepted += rr.accepted;
  done_[j] = std::move(s);
  s = FlashSlot{};
}

void FlashCacheDenoiser::copy_prefix(const Buffer& buf, size_t bytes, std::vector<std::byte>& host) {
  FDLLM_ASSERT_MSG(bytes % 4 == 0 && bytes <= host.size() && bytes <= buf.bytes(), "copy_prefix: {} bytes", bytes);
  // Every part of the selection buffers is a multiple of 4 bytes: the range is copied as I32 words.
  const Tensor range(buf.data(), DType::kI32, backend_.device(), {static_cast<int64_t>(bytes / 4)});
  backend_.copy_to_host(host.data(), range);
}

void FlashCacheDenoiser::fetch_selection(int64_t R, bool with_scores, std::vector<int32_t>& x0,
                                         std::vector<double>& conf) {
  copy_prefix(sel_buf_, with_scores ? sel_host_.size() : conf_offset_ + static_cast<size_t>(R) * 8, sel_host_);
  const size_t x0_at = x0.size(), conf_at = conf.size();
  x0.resize(x0_at + static_cast<size_t>(R));
  conf.resize(conf_at + static_cast<size_t>(R));
  std::memcpy(x0.data() + x0_at, sel_host_.data(), static_cast<size_t>(R) * sizeof(int32_t));
  std::memcpy(conf.data() + conf_at, sel_host_.data() + conf_offset_, static_cast<size_t>(R) * sizeof(double));
  if (with_scores)
    std::memcpy(store_scores_.data(), sel_host_.data() + scores_offset_, store_scores_.size() * sizeof(float));
}

std::vector<SlotStep> FlashCacheDenoiser::step(const FlashStepObserver& observer) {
  const LladaConfig& c = model_.config;
  const int64_t n = n_slots(), L = L_, Ls = Ls_;
  std::vector<SlotStep> out;
  if (std::none_of(slots_.begin(), slots_.end(), [](const FlashSlot& s) { return s.active(); })) return out;
  PhaseClock clock(stats_.phase_seconds);

  // The main pass: one forward call per slot group (several only when the rows exceed
  // max_forward_rows, i.e. admission prefills); window predictions come back in slot order, one
  // select call per run of slots with equal sampling parameters. The importance scores start from
  // zero (zeroed here, so a step that failed half-way leaves nothing behind for the next one).
  backend_.fill_zero(scores_dev_);
  std::vector<int32_t> x0;
  std::vector<double> conf;
  int64_t T = 0;
  const auto groups = flash_forward_groups(slots_, opt_.max_forward_rows);
  for (size_t g_i = 0; g_i < groups.size(); ++g_i) {
    const auto [first, last] = groups[g_i];
    ForwardBatch fb = flash_plan(slots_, Ls, opt_, c.n_heads, first, last);
    fb.importance.scores = scores_dev_;
    fb.pad_kv_row = static_cast<int32_t>(n * Ls);  // the store's row after the slots' (allocate_pool)
    const int64_t Tg = fb.n_tokens(), R = static_cast<int64_t>(fb.logit_rows.size());
    const auto n_tiles = static_cast<int64_t>(fb.tiles.size() + fb.importance.tiles.size());
    FDLLM_ASSERT_MSG(Tg <= ws_.max_tokens && R <= ws_.max_logit_rows && n_tiles <= ws_.max_tiles,
                     "flash-cache: an iteration of {} rows / {} logit rows / {} tiles exceeds the pool's workspace", Tg,
                     R, n_tiles);
    Tensor logits = llada_forward(backend_, model_, fb, kv_, ws_);
    ++passes_;
    std::vector<SelectSegment> segments;
    int64_t row = 0;
    for (size_t j = first; j < last; ++j) {
      const FlashSlot& s = slots_[j];
      if (!s.active()) continue;
      SelectParams sp;  // argmax (or Gumbel-max at the slot's temperature), float64 confidence (§D.7)
      sp.confidence_f64 = true;
      sp.temperature = s.temperature;
      sp.seed = s.seed;
      sp.exclude_token = c.mask_token_id;  // a committed position never holds [MASK]
      const auto w = static_cast<int64_t>(s.window.size());
      append_select_segment(segments, row, row + w, sp);
      row += w;
    }
    for (const SelectSegment& g : segments)
      backend_.select_tokens(logits.slice_rows(g.begin, g.end), ws_.row_keys.slice_rows(g.begin, g.end), g.params,
                             x0_.slice_rows(g.begin, g.end), conf_.slice_rows(g.begin, g.end));
    // One copy per group; the last one also brings the importance scores (complete by then).
    clock.lap(FlashPhase::kMainCall);
    fetch_selection(R, /*with_scores=*/g_i + 1 == groups.size(), x0, conf);
    clock.lap(FlashPhase::kMainWait);
    T += Tg;
  }
  const std::vector<size_t> bad = check_selection(x0, conf, c.mask_token_id, "flash-cache");
  for (int64_t j = 0; j < n; ++j) std::copy_n(store_scores_.begin() + j * Ls, Ls, scores_.begin() + j * L);
  const int64_t forward = stats_.forwards++;
  stats_.query_rows += T;
  auto slot_scores = [&](size_t j) {
    return std::span<const float>(scores_.data() + j * static_cast<size_t>(L), slots_[j].full_pos.size());
  };

  // Phase 1 (every mode): the main-pass decision of every active slot, committed.
  struct Phase {
    bool active = false, work = false;
    int64_t k1 = 0;
    FlashDecision decision;
    std::vector<int32_t> committed;  // this iteration's commits (slot-relative)
    std::vector<int32_t> verified;   // the verified subset
    std::string error;               // non-finite logits: the slot fails alone (SlotStep::error)
  };
  std::vector<Phase> phases(slots_.size());
  std::vector<int64_t> ranked(slots_.size(), -1);  // full_pos[0 : ranked[j]] re-ranked during the verify pass
  std::vector<FlashVerifyTile> tiles;
  size_t r0 = 0;
  for (size_t j = 0; j < slots_.size(); ++j) {
    FlashSlot& s = slots_[j];
    if (!s.active()) continue;
    const size_t w = s.window.size();
    Phase& st = phases[j];
    st.active = true;
    st.error = nonfinite_error(bad, conf, r0, r0 + w, "flash-cache");
    if (!st.error.empty()) {  // nothing committed; no verify tile
      r0 += w;
      continue;
    }
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
      step.importance = slot_scores(j);
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

  clock.lap(FlashPhase::kDecide);

  // Phase 2 (verify): one verify pass over every tile, acceptance, commit.
  if (!tiles.empty()) {
    VerifyBatch vb = flash_verify_batch(slots_, tiles, Ls);
    const int64_t VT = vb.n_tokens(), VR = static_cast<int64_t>(vb.logit_rows.size());
    FDLLM_ASSERT_MSG(VT <= vws_.max_tokens && VR <= vws_.max_logit_rows &&
                         static_cast<int64_t>(vb.tiles.size()) <= vws_.max_tiles &&
                         static_cast<int64_t>(vb.key_rows.size()) <= vws_.max_verify_keys,
                     "flash-verify: a verify pass of {} rows / {} keys exceeds the pool's workspace", VT,
                     vb.key_rows.size());
    // The drafts (one per mask-view row) go up with the pass's plan, before its layers are queued.
    std::vector<int32_t> drafts;
    for (const FlashVerifyTile& v : tiles) drafts.insert(drafts.end(), v.drafts.begin(), v.drafts.end());
    FDLLM_ASSERT_MSG(static_cast<int64_t>(drafts.size()) == VR, "flash-verify: {} drafts for {} mask rows",
                     drafts.size(), VR);
    const Tensor drafts_dev = vdrafts_.slice_rows(0, VR);
    if (VR > 0) backend_.copy_from_host(drafts_dev, drafts.data());  // none: tiles without candidates
    clock.lap(FlashPhase::kVerifyBatch);
    Tensor vlogits = llada_verify_forward(backend_, model_, vb, kv_, vws_);
    ++passes_;
    stats_.verify_forwards += 1;
    stats_.verify_query_rows += VT;
    // Mask-view argmax / max probability (select_tokens), then p(draft) = p_max · exp(ℓ_draft − ℓ_argmax)
    // from the two logits gathered on the device (the same float64 softmax, without copying whole
    // logit rows): x0 | conf | ℓ_draft | ℓ_argmax come back in one copy, one host synchronisation.
    std::vector<int32_t> vx0(static_cast<size_t>(VR));
    std::vector<double> vconf(static_cast<size_t>(VR));
    std::vector<float> vval(static_cast<size_t>(2 * VR));
    std::vector<size_t> vbad;  // mask-view rows with non-finite confidences: their slots fail alone
    if (VR > 0) {
      SelectParams sp;
      sp.confidence_f64 = true;
      Tensor x0_dev = vx0_.slice_rows(0, VR), conf_dev = vconf_.slice_rows(0, VR);
      backend_.select_tokens(vlogits, vws_.row_keys.slice_rows(0, VR), sp, x0_dev, conf_dev);
      // ℓ_argmax of a row without a finite logit is NaN (its argmax may be out of range): such a row
      // has a non-finite confidence and fails its slot below without reading it.
      backend_.gather_columns(vlogits, drafts_dev, vval_.slice_rows(0, VR));
      backend_.gather_columns(vlogits, x0_dev, vval_.slice_rows(VR, 2 * VR));
      clock.lap(FlashPhase::kVerifyCall);
      // While the device runs the verify pass: the re-rank of every continuing slot's older decoded
      // positions, which the pass cannot change. Their range is the one the final re-rank below
      // sorts: full_pos[0 : nd − last_committed] after phase 2 is full_pos[0 : nd − k1] after phase 1
      // when every commit is pinned (default), full_pos[0 : nd] when only the verified ones are
      // (reference_quirks; every slot has a tile there), and phase 2 writes only past it. With an
      // observer the order of operations stays as written (tests read full_pos in phase 2).
      if (!observer) {
        for (size_t j = 0; j < slots_.size(); ++j) {
          const Phase& st = phases[j];
          if (!st.active || !st.work || !st.error.empty()) continue;
          FlashSlot& s = slots_[j];
          ranked[j] = s.num_decoded - (opt_.reference_quirks ? 0 : st.k1);
          flash_rank_decoded(s, slot_scores(j), ranked[j]);
        }
        clock.lap(FlashPhase::kEarlyRerank);
      }
      copy_prefix(vsel_buf_, vval_offset_ + static_cast<size_t>(2 * VR) * 4, vsel_host_);
      std::memcpy(vx0.data(), vsel_host_.data(), static_cast<size_t>(VR) * sizeof(int32_t));
      std::memcpy(vconf.data(), vsel_host_.data() + vconf_offset_, static_cast<size_t>(VR) * sizeof(double));
      std::memcpy(vval.data(), vsel_host_.data() + vval_offset_, static_cast<size_t>(2 * VR) * sizeof(float));
      vbad = check_selection({}, vconf, c.mask_token_id, "flash-verify");
    }
    clock.lap(FlashPhase::kVerifyWait);
    size_t m0 = 0;
    for (const FlashVerifyTile& v : tiles) {
      const auto j = static_cast<size_t>(v.slot);
      FlashSlot& s = slots_[j];
      Phase& st = phases[j];
      const size_t S = v.candidates.size();
      st.error = nonfinite_error(vbad, vconf, m0, m0 + S, "flash-verify");
      if (!st.error.empty()) {  // the main pass's commits stand; the request fails
        m0 += S;
        continue;
      }
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
        step.importance = slot_scores(j);
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
    clock.lap(FlashPhase::kAccept);
  }

  // Continue (re-rank, next queries) or finish.
  for (size_t j = 0; j < slots_.size(); ++j) {
    FlashSlot& s = slots_[j];
    Phase& st = phases[j];
    if (!st.active) continue;
    FlashRequestResult& rr = results_[j];
    const auto rel = [&](std::vector<int32_t> v) {
      for (int32_t& t : v) t -= static_cast<int32_t>(s.prompt_len);
      std::sort(v.begin(), v.end());
      return v;
    };
    SlotStep ev;
    ev.slot = static_cast<int64_t>(j);
    ev.positions = rel(st.committed);
    for (int32_t t : ev.positions) ev.tokens.push_back(s.x[static_cast<size_t>(t + s.prompt_len)]);
    rr.iterations.push_back(ev.positions);
    if (opt_.verify) {
      ev.verified = rel(st.verified);
      rr.verified.push_back(ev.verified);
    }
    ev.error = st.error;
    ev.finished = !st.work || !st.error.empty();
    if (!ev.finished) {
      const int64_t n_old = s.num_decoded - s.last_committed;
      FDLLM_ASSERT_MSG(ranked[j] < 0 || ranked[j] == n_old,
                       "flash-verify: slot {} ranked {} older positions early, not {}", j, ranked[j], n_old);
      if (ranked[j] < 0) flash_rank_decoded(s, slot_scores(j), n_old);
      flash_prepare_queries(s, opt_);
    } else {
      finish_slot(j);
    }
    out.push_back(std::move(ev));
  }
  clock.lap(FlashPhase::kContinue);
  return out;
}

std::vector<StepPhase> FlashCacheDenoiser::step_phases() const {
  std::vector<StepPhase> out;
  for (size_t i = 0; i < kFlashPhases; ++i)
    out.push_back({flash_phase_name(static_cast<FlashPhase>(i)), stats_.phase_seconds[i]});
  return out;
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
  SlotPool pool;
  pool.n_slots = std::min<int64_t>(opt_.n_slots, static_cast<int64_t>(prompts.size()));
  pool.max_total_length = max_p + opt_.gen_length;
  allocate_pool(pool);

  SlotParams params;  // the options' request: gen_length, threshold (unset: follows the options), greedy
  params.gen_length = opt_.gen_length;
  FlashCacheResult res;
  res.requests.resize(prompts.size());
  size_t next = 0;
  auto fill = [&] {
    for (int64_t j = 0; j < n_slots() && next < prompts.size(); ++j)
      if (!active(j)) admit(j, prompts[next++], params);
  };
  fill();
  while (std::any_of(slots_.begin(), slots_.end(), [](const FlashSlot& s) { return s.active(); })) {
    for (const SlotStep& ev : step(observer)) {
      FDLLM_CHECK(ev.error.empty(), ErrorCode::kInvalidCheckpoint, "{}", ev.error);
      if (!ev.finished) continue;
      const FlashRequestResult& rr = result(ev.slot);
      res.requests[static_cast<size_t>(rr.request)] = rr;
      release(ev.slot);
    }
    fill();  // a finished slot takes the next request before the next iteration
  }
  res.stats = stats_;
  res.stats.free_bytes_at_end = backend_.free_memory();
  return res;
}

}  // namespace flashdllm
