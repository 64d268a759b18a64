// Flash-Cache's typed pieces (flash_cache.h): the slot layout (§D.2, D.3), a slot's state and
// its query sets (§D.4), the main pass's plan, and the decisions, commits and re-ranks of §D.7.
// Pure host functions over one slot or a list of slots: the denoiser (flash_cache.cpp) runs them
// every iteration and the tests drive them alone.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "denoise/block_decoding.h"  // noise_key
#include "denoise/flash_cache.h"

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

size_t flash_kv_cache_bytes(const ModelConfig& cfg, DType act, int64_t n_slots, int64_t max_length) {
  return 2 * static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(n_slots) * static_cast<size_t>(max_length) *
         static_cast<size_t>(cfg.kv_width()) * dtype_size(act);
}

int64_t flash_max_slots(const ModelConfig& cfg, DType act, int64_t max_length, size_t budget_bytes) {
  const size_t per_slot = flash_kv_cache_bytes(cfg, act, 1, max_length);
  return per_slot == 0 ? 0 : static_cast<int64_t>(budget_bytes / per_slot);
}

// ---------------------------------------------------------------------------------- slot state

FlashSlot flash_init_slot(int64_t request, std::span<const int32_t> prompt, int64_t max_length,
                          const GenerateOptions& o, int32_t mask_id, int32_t eos_id, const FlashTiling& t) {
  SlotParams p;
  p.gen_length = o.sampling.gen_length;
  FlashSlot s = flash_init_slot(request, prompt, max_length, o, p, mask_id, eos_id, t);
  s.threshold.reset();  // follows the options
  return s;
}

FlashSlot flash_init_slot(int64_t request, std::span<const int32_t> prompt, int64_t max_length,
                          const GenerateOptions& o, const SlotParams& p, int32_t mask_id, int32_t eos_id,
                          const FlashTiling& t) {
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t G = p.gen_length;
  FDLLM_CHECK_ARG(P > 0, "flash-cache: request {} has an empty prompt", request);
  FDLLM_CHECK_ARG(G > 0, "flash-cache: request {}: gen_length must be positive, got {}", request, G);
  FDLLM_CHECK_ARG(P + G + o.decode.effective_block_length() <= max_length,
                  "flash-cache: request {}: prompt {} + gen_length {} + block_length {} exceeds the slot length {}",
                  request, P, G, o.decode.effective_block_length(), max_length);
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
  s.logprobs = p.logprobs;
  s.seqlen_k = flash_seqlen_k(P, G, t.key_tile);
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
  append_slice(s.full_pos, P, P + o.decode.effective_block_length(), s.window);
  append_slice(s.full_pos, 0, P, s.tracked);
  append_slice(s.full_pos, P + o.decode.effective_block_length(), s.seqlen_k, s.tracked);
  return s;
}

void flash_prepare_queries(FlashSlot& s, const GenerateOptions& o) {
  const int64_t nd = s.num_decoded, bm = o.decode.effective_block_length();
  s.window.clear();
  s.tracked.clear();
  append_slice(s.full_pos, nd, nd + bm, s.window);
  if (o.decode.track_num < 0) {
    append_slice(s.full_pos, 0, nd, s.tracked);
    append_slice(s.full_pos, nd + bm, s.seqlen_k, s.tracked);
  } else {
    append_slice(s.full_pos, std::max<int64_t>(0, nd - o.decode.track_num * bm), nd, s.tracked);
    append_slice(s.full_pos, nd + bm, std::min(s.seqlen_k, nd + o.decode.mask_num * bm), s.tracked);
  }
  flash_map_logit_rows(s);
}

void flash_map_logit_rows(FlashSlot& s) {
  s.logit_rows.clear();
  if (!s.logit_shift) return;
  // Query row of each position (-1: not queried); window rows first, then the tracked set.
  std::vector<int32_t> row(s.x.size(), -1);
  auto note = [&](int32_t pos, size_t r) {
    if (pos >= 0 && static_cast<size_t>(pos) < row.size() && row[static_cast<size_t>(pos)] < 0)
      row[static_cast<size_t>(pos)] = static_cast<int32_t>(r);
  };
  for (size_t r = 0; r < s.window.size(); ++r) note(s.window[r], r);
  for (size_t r = 0; r < s.tracked.size(); ++r) note(s.tracked[r], s.window.size() + r);
  for (int32_t p : s.window) {
    const auto src = static_cast<int32_t>(logits_source(true, p));
    FDLLM_CHECK_ARG(src >= 0 && static_cast<size_t>(src) < row.size(),
                    "flash-cache: window position {} has no source row under the logit shift", p);
    if (row[static_cast<size_t>(src)] < 0) {
      s.tracked.push_back(src);
      row[static_cast<size_t>(src)] = static_cast<int32_t>(s.window.size() + s.tracked.size() - 1);
    }
    s.logit_rows.push_back(row[static_cast<size_t>(src)]);
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

ForwardBatch flash_plan(const std::vector<FlashSlot>& slots, int64_t store_stride, const GenerateOptions& o,
                        int64_t n_heads, size_t first, size_t last, const FlashTiling& t) {
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
      fb.logit_rows.push_back(q + (s.logit_rows.empty() ? r : s.logit_rows[static_cast<size_t>(r)]));
      // Greedy (Flash-dLLM): no noise. Sampling: a key per (seed, iteration, position), as the LLaDA sampler.
      fb.row_keys.push_back(
          s.temperature > 0.0 ? static_cast<int32_t>(noise_key(s.seed, s.iterations, s.window[static_cast<size_t>(r)]))
                              : 0);
    }
    fb.importance.tiles.push_back({q, q + n, k0, k1});
    if (o.decode.query_tile_rows == 0) {
      fb.tiles.push_back({q, q + n + m, k0, k1});
    } else {  // the released tiling: the window, then the tracked set in tiles of query_tile_rows rows
      fb.tiles.push_back({q, q + n, k0, k1});
      const auto tile_rows = static_cast<int32_t>(std::min<int64_t>(o.decode.query_tile_rows, std::max(m, 1)));
      for (int32_t r = 0; r < m; r += tile_rows)
        rest.push_back({q + n + r, q + n + std::min(m, r + tile_rows), k0, k1});
    }
    q += n + m;
  }
  FDLLM_CHECK_ARG(!fb.tiles.empty(), "flash_plan: no active slot in slots [{}, {})", first, last);
  fb.tiles.insert(fb.tiles.end(), rest.begin(), rest.end());
  fb.importance.first_layer = t.importance_first_layer;
  fb.importance.weight =
      static_cast<float>(1.0 / (static_cast<double>(o.decode.effective_block_length()) * static_cast<double>(n_heads)));
  fb.importance.probability_mass = o.decode.importance_probability_mass;
  return fb;
}

// ---------------------------------------------------------------------------------- decisions

FlashDecision flash_decide(const FlashSlot& s, std::span<const double> conf, std::span<const int32_t> tokens,
                           const GenerateOptions& o) {
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
    if (o.decode.reference_quirks) {
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
  if (!o.decode.forced_schedule.empty()) {
    const size_t i = std::min<size_t>(static_cast<size_t>(s.iterations), o.decode.forced_schedule.size() - 1);
    k = o.decode.forced_schedule[i];
  } else if (o.decode.tokens_per_step > 0) {
    k = o.decode.tokens_per_step;
  } else {
    k = 0;
    const double threshold = s.threshold ? *s.threshold : effective_threshold(o.decode, o.sampling).value_or(1.0);
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
  FDLLM_CHECK_ARG(d.count >= 1 && d.count <= static_cast<int64_t>(d.window.size()) && d.order.size() == d.window.size(),
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

void flash_rerank(FlashSlot& s, std::span<const float> scores, const GenerateOptions& o) {
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

}  // namespace flashdllm
