// Flash-Verify: its pieces and the denoiser's verify pass (FlashCacheDenoiser::verify, phase 2 of
// an iteration); see flash_verify.h for the algorithm and the deviations from the released code.
#include "denoise/flash_verify.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "core/check.h"

namespace flashdllm {

int64_t flash_verify_cap(const GenerateOptions& o) noexcept {
  return o.decode.max_candidates > 0 ? o.decode.max_candidates : o.decode.effective_block_length() / 2;
}

int64_t flash_verify_max_rows(const GenerateOptions& o, bool logit_shift) noexcept {
  return 2 * o.decode.effective_block_length() + (logit_shift ? flash_verify_cap(o) : 0);
}

int64_t flash_verify_valid_count(const FlashSlot& s, const FlashDecision& d, const GenerateOptions& o) {
  FDLLM_CHECK_ARG(d.window == s.window, "flash_verify_valid_count: the decision is for another window");
  int64_t n = 0;
  for (int32_t t : d.window) n += t < s.stop || (o.decode.reference_quirks && s.eos_pos < 0);
  return n;
}

FlashVerifyTile flash_verify_plan_slot(const FlashSlot& s, int64_t slot_index, const FlashDecision& d, int64_t n_valid,
                                       const GenerateOptions& o) {
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
  const int64_t bm = o.decode.effective_block_length();
  // Released: the tile is always 2·bm rows; commits: only the k1 phase-1 commits (by default the
  // positions whose cached K/V is still of the [MASK] state, params.h VerifyKept). With source rows
  // (logit shift) the released tile keeps 2·bm rows too, T = 2·bm − 3·S, but never fewer kept rows
  // than the k1 commits (it is 2·bm − 3·S >= k1 whenever S <= bm / 2, the default cap).
  v.source_rows = s.logit_shift;
  v.kept_budget = o.decode.verify_kept == VerifyKept::kCommits ? k1
                  : v.source_rows                              ? std::max<int64_t>(k1, 2 * bm - 3 * S)
                                                               : 2 * bm - 2 * S;
  // Short prompt (§D.11): clamp instead of the released negative-index wrap.
  const int64_t kept_begin = std::max<int64_t>(0, nd - v.kept_budget);
  v.kept.assign(s.full_pos.begin() + kept_begin, s.full_pos.begin() + nd);
  for (int64_t i = 0; i < S; ++i) {
    const auto idx = static_cast<size_t>(d.order[static_cast<size_t>(k1 + i)]);
    v.candidates.push_back(d.window[idx]);
    v.drafts.push_back(d.tokens[idx]);
  }
  if (o.decode.reference_quirks) {
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
    for (int32_t t : v.candidates) {  // the undecoded state: [MASK], or the EOS padding token (§F.11)
      vb.token_ids.push_back(s.x[static_cast<size_t>(t)]);
      vb.positions.push_back(t);
    }
    // The logit rows: the mask rows, or under the logit shift the source rows (position c_i − 1 in
    // M_i's view, whose output row predicts c_i: logits_source).
    const auto m0 = static_cast<int32_t>(vb.token_ids.size() - (v.source_rows ? 0 : v.candidates.size()));
    if (v.source_rows)
      for (size_t i = 0; i < v.candidates.size(); ++i) {
        vb.token_ids.push_back(flash_verify_source_token(s, v, i));
        vb.positions.push_back(v.candidates[i] - 1);
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
    vb.tiles.push_back({q0, static_cast<int32_t>(vb.token_ids.size()), k0, static_cast<int32_t>(vb.key_rows.size()), S,
                        v.source_rows ? S : 0});
    for (int32_t i = 0; i < S; ++i) {
      vb.logit_rows.push_back(m0 + i);
      vb.row_keys.push_back(0);
    }
  }
  return vb;
}

int32_t flash_verify_source_token(const FlashSlot& s, const FlashVerifyTile& v, size_t i) {
  FDLLM_CHECK_ARG(i < v.candidates.size() && v.drafts.size() == v.candidates.size(),
                  "flash_verify_source_token: candidate {} of {} ({} drafts)", i, v.candidates.size(), v.drafts.size());
  const int32_t p = v.candidates[i] - 1;
  FDLLM_CHECK_ARG(p >= 0 && static_cast<size_t>(p) < s.x.size(),
                  "flash_verify_source_token: candidate position {} has no source position under the logit shift "
                  "(a prompt has at least one token)",
                  v.candidates[i]);
  for (size_t k = 0; k < i; ++k)
    if (v.candidates[k] == p) return v.drafts[k];  // filled in in M_i's view
  return s.x[static_cast<size_t>(p)];              // decoded, prompt, or a later candidate's undecoded state
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

std::vector<uint8_t> flash_verify_blocked(const FlashSlot& s, const FlashVerifyTile& v, const GenerateOptions& o) {
  std::vector<uint8_t> b;
  for (int32_t t : v.candidates) b.push_back(t >= s.stop && (!o.decode.reference_quirks || s.eos_pos >= 0));
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

// ---------------------------------------------------------------------------------- the verify pass

void FlashCacheDenoiser::verify(const FlashStepObserver& observer, int64_t forward, FlashPhaseClock& clock,
                                const std::vector<FlashVerifyTile>& tiles, std::vector<SlotPhase>& phases,
                                std::vector<int64_t>& ranked) {
  const ModelConfig& c = model_.config;
  const int64_t Ls = Ls_;
  VerifyBatch vb = flash_verify_batch(slots_, tiles, Ls);
  const int64_t VT = vb.n_tokens(), VR = static_cast<int64_t>(vb.logit_rows.size());
  FDLLM_ASSERT_MSG(
      VT <= vws_.max_tokens && VR <= vws_.max_logit_rows && static_cast<int64_t>(vb.tiles.size()) <= vws_.max_tiles &&
          static_cast<int64_t>(vb.key_rows.size()) <= vws_.max_verify_keys,
      "flash-verify: a verify pass of {} rows / {} keys exceeds the pool's workspace", VT, vb.key_rows.size());
  // The drafts (one per logit row) go up with the pass's plan, before its layers are queued.
  std::vector<int32_t> drafts;
  for (const FlashVerifyTile& v : tiles) drafts.insert(drafts.end(), v.drafts.begin(), v.drafts.end());
  FDLLM_ASSERT_MSG(static_cast<int64_t>(drafts.size()) == VR, "flash-verify: {} drafts for {} logit rows",
                   drafts.size(), VR);
  const Tensor drafts_dev = vdrafts_.slice_rows(0, VR);
  if (VR > 0) backend_.copy_from_host(drafts_dev, drafts.data());  // none: tiles without candidates
  clock.lap(FlashPhase::kVerifyBatch);
  Tensor vlogits = model_verify_forward(backend_, model_, vb, kv_, vws_);
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
        const SlotPhase& st = phases[j];
        if (!st.active || !st.work || !st.error.empty()) continue;
        FlashSlot& s = slots_[j];
        ranked[j] = s.num_decoded - (opt_.decode.reference_quirks ? 0 : st.k1);
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
    SlotPhase& st = phases[j];
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
      ver.p_draft.push_back(v.drafts[i] == vx0[r]
                                ? vconf[r]
                                : vconf[r] * std::exp(static_cast<double>(vval[r]) -
                                                      static_cast<double>(vval[static_cast<size_t>(VR) + r])));
    }
    m0 += S;
    ver.blocked = flash_verify_blocked(s, v, opt_);
    ver.count = flash_verify_accept(ver.p_draft, ver.p_max, ver.argmax, v.drafts, ver.blocked, opt_.decode.verify_rule,
                                    opt_.decode.gamma, opt_.decode.forced_acceptance);
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
    st.work = flash_verify_commit(s, v, accepted, tokens, st.k1, c.eos_token_id, !opt_.decode.reference_quirks);
    st.verified = accepted;
    st.committed.insert(st.committed.end(), accepted.begin(), accepted.end());
  }
}

}  // namespace flashdllm
