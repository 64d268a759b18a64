// Flash-Verify pieces; see flash_verify.h for the algorithm and the deviations from the released code.
#include "denoise/flash_verify.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "core/check.h"

namespace flashdllm {

int64_t flash_verify_cap(const FlashCacheOptions& o) noexcept {
  return o.max_candidates > 0 ? o.max_candidates : o.block_length / 2;
}

int64_t flash_verify_valid_count(const FlashSlot& s, const FlashDecision& d, const FlashCacheOptions& o) {
  FDLLM_CHECK_ARG(d.window == s.window, "flash_verify_valid_count: the decision is for another window");
  int64_t n = 0;
  for (int32_t t : d.window) n += t < s.stop || (o.reference_quirks && s.eos_pos < 0);
  return n;
}

FlashVerifyTile flash_verify_plan_slot(const FlashSlot& s, int64_t slot_index, const FlashDecision& d,
                                       int64_t n_valid, const FlashCacheOptions& o) {
  const auto w = static_cast<int64_t>(d.window.size());
  FDLLM_CHECK_ARG(n_valid >= 0 && n_valid <= w, "flash_verify_plan_slot: n_valid {} outside [0, {}]", n_valid, w);
  const int64_t k1 = d.count, nd = s.num_decoded, nd0 = nd - k1;
  FDLLM_CHECK_ARG(k1 >= 1 && nd0 >= 0 && nd0 + w <= static_cast<int64_t>(s.full_pos.size()),
                  "flash_verify_plan_slot: slot {} with {} decoded positions cannot hold a commit of {}", slot_index, nd,
                  k1);
  for (int64_t i = 0; i < w; ++i)
    FDLLM_CHECK_ARG(s.full_pos[static_cast<size_t>(nd0 + i)] == d.window[static_cast<size_t>(d.order[static_cast<size_t>(i)])],
                    "flash_verify_plan_slot: slot {}: full_pos[{}] is not the decision's entry {} (apply flash_commit "
                    "first)",
                    slot_index, nd0 + i, i);
  FlashVerifyTile v;
  v.slot = slot_index;
  const int64_t S = std::clamp<int64_t>(n_valid - k1, 0, flash_verify_cap(o));
  const int64_t bm = o.block_length;
  // Released: the tile is always 2·bm rows; commits: only the k1 phase-1 commits (by default the
  // positions whose cached K/V is still of the [MASK] state, params.h VerifyKept).
  v.kept_budget = o.verify_kept == VerifyKept::kCommits ? k1 : 2 * bm - 2 * S;
  // Short prompt (§D.11): clamp instead of the released negative-index wrap.
  const int64_t kept_begin = std::max<int64_t>(0, nd - v.kept_budget);
  v.kept.assign(s.full_pos.begin() + kept_begin, s.full_pos.begin() + nd);
  for (int64_t i = 0; i < S; ++i) {
    const auto idx = static_cast<size_t>(d.order[static_cast<size_t>(k1 + i)]);
    v.candidates.push_back(d.window[idx]);
    v.drafts.push_back(d.tokens[idx]);
  }
  if (o.reference_quirks) {
    // Released gather list: full_pos[0 : nd − T] ++ full_pos[nd + S : seqlen_k] (full_pos indices).
    v.keys.assign(s.full_pos.begin(), s.full_pos.begin() + kept_begin);
    const int64_t b = std::min<int64_t>(nd + S, static_cast<int64_t>(s.full_pos.size()));
    const int64_t e = std::min<int64_t>(s.seqlen_k, static_cast<int64_t>(s.full_pos.size()));
    if (b < e) v.keys.insert(v.keys.end(), s.full_pos.begin() + b, s.full_pos.begin() + e);
  } else {
    // The main pass's context: every position < seqlen_k, minus the positions recomputed in the tile
    // (at most k1 + S of them: the runs between them are written whole).
    std::vector<int32_t> out;
    out.reserve(v.kept.size() + v.candidates.size());
    for (const auto* list : {&v.kept, &v.candidates})
      for (int32_t t : *list)
        if (t >= 0 && t < s.seqlen_k) out.push_back(t);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    v.keys.resize(static_cast<size_t>(s.seqlen_k) - out.size());
    auto k = v.keys.begin();
    int32_t t = 0;
    for (const int32_t e : out) {
      std::iota(k, k + (e - t), t);
      k += e - t;
      t = e + 1;
    }
    std::iota(k, v.keys.end(), t);
  }
  return v;
}

VerifyBatch flash_verify_batch(const std::vector<FlashSlot>& slots, const std::vector<FlashVerifyTile>& tiles,
                               int64_t store_stride) {
  FDLLM_CHECK_ARG(!tiles.empty(), "flash_verify_batch: no verify tiles");
  FDLLM_CHECK_ARG(store_stride > 0 && static_cast<int64_t>(slots.size()) * store_stride < (int64_t{1} << 31),
                  "flash_verify_batch: {} slots × store stride {} must be positive and below 2^31 store rows",
                  slots.size(), store_stride);
  VerifyBatch vb;
  size_t rows = 0, keys = 0, cands = 0;
  for (const FlashVerifyTile& v : tiles) {
    rows += static_cast<size_t>(v.rows());
    keys += v.keys.size();
    cands += v.candidates.size();
  }
  vb.token_ids.reserve(rows);
  vb.positions.reserve(rows);
  vb.key_rows.reserve(keys);
  vb.tiles.reserve(tiles.size());
  vb.logit_rows.reserve(cands);
  vb.row_keys.reserve(cands);
  for (const FlashVerifyTile& v : tiles) {
    FDLLM_CHECK_ARG(v.slot >= 0 && v.slot < static_cast<int64_t>(slots.size()) && slots[static_cast<size_t>(v.slot)].active(),
                    "flash_verify_batch: tile for slot {} which is not an active slot of {}", v.slot, slots.size());
    FDLLM_CHECK_ARG(v.rows() > 0 && v.drafts.size() == v.candidates.size(),
                    "flash_verify_batch: slot {}: empty tile or {} drafts for {} candidates", v.slot, v.drafts.size(),
                    v.candidates.size());
    const FlashSlot& s = slots[static_cast<size_t>(v.slot)];
    const auto q0 = static_cast<int32_t>(vb.token_ids.size());
    const auto k0 = static_cast<int32_t>(vb.key_rows.size());
    for (int32_t t : v.kept) {
      vb.token_ids.push_back(s.x[static_cast<size_t>(t)]);
      vb.positions.push_back(t);
    }
    for (size_t i = 0; i < v.candidates.size(); ++i) {
      vb.token_ids.push_back(v.drafts[i]);
      vb.positions.push_back(v.candidates[i]);
    }
    const auto m0 = static_cast<int32_t>(vb.token_ids.size());
    for (int32_t t : v.candidates) {  // the undecoded state: [MASK], or the EOS padding token (§F.11)
      vb.token_ids.push_back(s.x[static_cast<size_t>(t)]);
      vb.positions.push_back(t);
    }
    // Key rows = the slot's base + position, the positions checked in the same pass (one the
    // compiler vectorises: a minmax_element pass was most of this function's time); the sum is taken
    // modulo 2^32 and used only once every position is in range.
    const auto base = static_cast<uint32_t>(v.slot * store_stride);
    const size_t at = vb.key_rows.size(), nk = v.keys.size();
    vb.key_rows.resize(at + nk);
    int32_t* rows_out = vb.key_rows.data() + at;
    const int32_t* pos = v.keys.data();
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (size_t i = 0; i < nk; ++i) {
      lo = std::min(lo, pos[i]);
      hi = std::max(hi, pos[i]);
      rows_out[i] = static_cast<int32_t>(base + static_cast<uint32_t>(pos[i]));
    }
    FDLLM_CHECK_ARG(nk == 0 || (lo >= 0 && hi < store_stride),
                    "flash_verify_batch: slot {}: key position {} outside the {} store rows", v.slot, lo < 0 ? lo : hi,
                    store_stride);
    const auto S = static_cast<int32_t>(v.candidates.size());
    vb.tiles.push_back({q0, static_cast<int32_t>(vb.token_ids.size()), k0, static_cast<int32_t>(vb.key_rows.size()), S});
    for (int32_t i = 0; i < S; ++i) {
      vb.logit_rows.push_back(m0 + i);
      vb.row_keys.push_back(0);
    }
  }
  return vb;
}

int64_t flash_verify_accept(std::span<const double> p_draft, std::span<const double> p_max,
                            std::span<const int32_t> argmax, std::span<const int32_t> drafts,
                            std::span<const uint8_t> blocked, VerifyRule rule, double gamma, int64_t forced) {
  const size_t S = p_draft.size();
  FDLLM_CHECK_ARG(p_max.size() == S && argmax.size() == S && drafts.size() == S && blocked.size() == S,
                  "flash_verify_accept: {} p(draft), {} p_max, {} argmax, {} drafts, {} blocked flags differ", S,
                  p_max.size(), argmax.size(), drafts.size(), blocked.size());
  FDLLM_CHECK_ARG(gamma > 0.0 && gamma <= 1.0, "flash_verify_accept: gamma must be in (0, 1], got {}", gamma);
  FDLLM_CHECK_ARG(forced >= 0, "flash_verify_accept: forced {} must be >= 0", forced);
  int64_t n = 0;
  if (forced > 0) {
    while (n < static_cast<int64_t>(S) && n < forced && !blocked[static_cast<size_t>(n)]) ++n;
    return n;
  }
  if (rule == VerifyRule::kProduct) {
    // As released: cumprod, then count the entries >= γ (a prefix: every factor is <= 1).
    double prod = 1.0;
    for (size_t i = 0; i < S; ++i) {
      prod *= blocked[i] ? 0.0 : p_draft[i];
      n += prod >= gamma;
    }
    return n;
  }
  while (n < static_cast<int64_t>(S)) {
    const auto i = static_cast<size_t>(n);
    if (blocked[i] || argmax[i] != drafts[i] || !(p_max[i] >= gamma)) break;
    ++n;
  }
  return n;
}

std::vector<uint8_t> flash_verify_blocked(const FlashSlot& s, const FlashVerifyTile& v, const FlashCacheOptions& o) {
  std::vector<uint8_t> b;
  for (int32_t t : v.candidates) b.push_back(t >= s.stop && (!o.reference_quirks || s.eos_pos >= 0));
  return b;
}

bool flash_verify_commit(FlashSlot& s, const FlashVerifyTile& v, std::span<const int32_t> accepted,
                         std::span<const int32_t> tokens, int64_t k1, int32_t eos_id, bool pin_all_new) {
  const auto S = static_cast<int64_t>(v.candidates.size());
  const int64_t nd = s.num_decoded;
  FDLLM_CHECK_ARG(accepted.size() == tokens.size(), "flash_verify_commit: {} positions but {} tokens", accepted.size(),
                  tokens.size());
  FDLLM_CHECK_ARG(nd + S <= static_cast<int64_t>(s.full_pos.size()) &&
                      std::equal(v.candidates.begin(), v.candidates.end(), s.full_pos.begin() + nd),
                  "flash_verify_commit: the tile's candidates are not the slot's next undecoded entries full_pos[{} : {}]",
                  nd, nd + S);
  FDLLM_CHECK_ARG(k1 >= 0 && k1 <= nd, "flash_verify_commit: phase-1 count {} outside [0, {}]", k1, nd);
  std::vector<uint8_t> used(static_cast<size_t>(S), 0);
  std::vector<int32_t> order;
  for (int32_t t : accepted) {
    const auto it = std::find(v.candidates.begin(), v.candidates.end(), t);
    FDLLM_CHECK_ARG(it != v.candidates.end(), "flash_verify_commit: position {} is not a candidate", t);
    const auto idx = static_cast<size_t>(it - v.candidates.begin());
    FDLLM_CHECK_ARG(!used[idx], "flash_verify_commit: candidate {} is accepted twice", t);
    used[idx] = 1;
    order.push_back(t);
  }
  for (int64_t i = 0; i < S; ++i)
    if (!used[static_cast<size_t>(i)]) order.push_back(v.candidates[static_cast<size_t>(i)]);
  std::copy(order.begin(), order.end(), s.full_pos.begin() + nd);
  const auto k2 = static_cast<int64_t>(accepted.size());
  int64_t new_eos = -1;
  for (int64_t i = 0; i < k2; ++i) {
    const int32_t t = accepted[static_cast<size_t>(i)];
    s.x[static_cast<size_t>(t)] = tokens[static_cast<size_t>(i)];
    if (tokens[static_cast<size_t>(i)] == eos_id) new_eos = std::max<int64_t>(new_eos, t);
  }
  s.num_decoded = nd + k2;
  s.accepted += k2;
  s.last_committed = pin_all_new ? k1 + k2 : k2;
  if (s.eos_pos < 0 && new_eos >= 0) {
    s.eos_pos = new_eos;
    s.stop = new_eos + 1;
  }
  return flash_has_work(s);
}

}  // namespace flashdllm
