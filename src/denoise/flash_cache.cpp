// Flash-Cache denoiser: the slot contract and step() by phases (main pass, decide, continue; the
// pool is in flash_pool.cpp, the verify pass in flash_verify.cpp, the slot pieces in
// flash_slot.cpp). See flash_cache.h for the algorithm, the layout and the deviations.
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

namespace {

/// The settings that pick this denoiser and the tiling facts; every other check is params.cpp's.
void check_flash_settings(const DecodeSettings& d, const FlashTiling& t) {
  FDLLM_CHECK_PARAM(d.cache == CacheMode::kFlash, "cache", "the Flash-Cache denoiser runs cache flash, got cache {}",
                    cache_mode_name(d.cache));
  FDLLM_CHECK_ARG(t.key_tile > 0 && t.key_tile <= (int64_t{1} << 20),
                  "flash-cache: key_tile must be in [1, 2^20], got {}", t.key_tile);
  FDLLM_CHECK_ARG(t.importance_first_layer >= 0, "flash-cache: importance_first_layer must be >= 0, got {}",
                  t.importance_first_layer);
}

}  // namespace

FlashCacheDenoiser::FlashCacheDenoiser(Backend& backend, const Model& model, GenerateOptions options,
                                       const FlashTiling& t)
    : backend_(backend), model_(model), opt_(std::move(options)), tiling_(t) {
  check_flash_settings(opt_.decode, tiling_);
  validate(opt_, model_.config);
  bm_ = opt_.decode.effective_block_length();
}

FlashCacheDenoiser::FlashCacheDenoiser(Backend& backend, const Model& model, GenerateOptions options,
                                       const SlotPool& pool, const FlashTiling& t)
    : backend_(backend), model_(model), opt_(std::move(options)), tiling_(t) {
  check_flash_settings(opt_.decode, tiling_);
  validate(opt_.decode, model_.config);  // the requests are checked at admission (check_request)
  bm_ = opt_.decode.effective_block_length();
  allocate_pool(pool);
}

// ---------------------------------------------------------------------------------- slot contract

void FlashCacheDenoiser::check_request(std::span<const int32_t> prompt, const SlotParams& p) const {
  const ModelConfig& c = model_.config;
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
  const ModelConfig& c = model_.config;
  const auto P = static_cast<int64_t>(prompt.size());
  // Batch invariance: the host row of a request is its own L_max unless the released layout is asked for.
  const int64_t L = opt_.decode.reference_quirks ? L_ : flash_max_length(P, p.gen_length, bm_, tiling_.key_tile);
  const auto j = static_cast<size_t>(slot);
  const int64_t request = stats_.admitted++;
  slots_[j] = flash_init_slot(request, prompt, L, opt_, p, c.mask_token_id, c.eos_token_id, tiling_);
  slots_[j].logit_shift = c.logit_shift;
  flash_map_logit_rows(slots_[j]);
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
  const size_t end = opt_.decode.reference_quirks ? static_cast<size_t>(s.num_decoded) : static_cast<size_t>(s.stop);
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

std::span<const float> FlashCacheDenoiser::slot_scores(size_t j) const {
  return std::span<const float>(scores_.data() + j * static_cast<size_t>(L_), slots_[j].full_pos.size());
}

int64_t FlashCacheDenoiser::main_pass(FlashPhaseClock& clock, std::vector<int32_t>& x0, std::vector<double>& conf) {
  const ModelConfig& c = model_.config;
  const int64_t n = n_slots(), L = L_, Ls = Ls_;
  // One forward call per slot group (several only when the rows exceed max_forward_rows, i.e.
  // admission prefills); window predictions come back in slot order, one select call per run of
  // slots with equal sampling parameters. The importance scores start from zero (zeroed here, so a
  // step that failed half-way leaves nothing behind for the next one).
  backend_.fill_zero(scores_dev_);
  int64_t T = 0;
  const auto groups = flash_forward_groups(slots_, opt_.decode.max_forward_rows);
  for (size_t g_i = 0; g_i < groups.size(); ++g_i) {
    const auto [first, last] = groups[g_i];
    ForwardBatch fb = flash_plan(slots_, Ls, opt_, c.n_heads, first, last, tiling_);
    fb.importance.scores = scores_dev_;
    fb.pad_kv_row = static_cast<int32_t>(n * Ls);  // the store's row after the slots' (allocate_pool)
    const int64_t Tg = fb.n_tokens(), R = static_cast<int64_t>(fb.logit_rows.size());
    const auto n_tiles = static_cast<int64_t>(fb.tiles.size() + fb.importance.tiles.size());
    FDLLM_ASSERT_MSG(Tg <= ws_.max_tokens && R <= ws_.max_logit_rows && n_tiles <= ws_.max_tiles,
                     "flash-cache: an iteration of {} rows / {} logit rows / {} tiles exceeds the pool's workspace", Tg,
                     R, n_tiles);
    Tensor logits = model_forward(backend_, model_, fb, kv_, ws_);
    ++passes_;
    std::vector<SelectSegment> segments;
    int64_t row = 0;
    if (window_logprobs_.size() < slots_.size()) window_logprobs_.resize(slots_.size());
    for (size_t j = first; j < last; ++j) {
      const FlashSlot& s = slots_[j];
      if (!s.active()) continue;
      // Logprobs: the window's rows to the host now (the next group's forward reuses the logits).
      if (s.logprobs >= 0 && !s.window.empty())
        window_logprobs_[j].fetch(backend_, logits.slice_rows(row, row + static_cast<int64_t>(s.window.size())));
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
  for (int64_t j = 0; j < n; ++j) std::copy_n(store_scores_.begin() + j * Ls, Ls, scores_.begin() + j * L);
  return T;
}

void FlashCacheDenoiser::decide(const FlashStepObserver& observer, int64_t forward, std::span<const int32_t> x0,
                                std::span<const double> conf, std::vector<SlotPhase>& phases,
                                std::vector<FlashVerifyTile>& tiles) {
  const ModelConfig& c = model_.config;
  const std::vector<size_t> bad = check_selection(x0, conf, c.mask_token_id, "flash-cache");
  size_t r0 = 0;
  for (size_t j = 0; j < slots_.size(); ++j) {
    FlashSlot& s = slots_[j];
    if (!s.active()) continue;
    const size_t w = s.window.size();
    SlotPhase& st = phases[j];
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
    const int64_t n_valid = opt_.decode.verify ? flash_verify_valid_count(s, d, opt_) : 0;
    st.k1 = d.count;
    st.work = flash_commit(s, d, c.eos_token_id);
    if (!opt_.decode.verify) continue;
    FlashVerifyTile tile = flash_verify_plan_slot(s, static_cast<int64_t>(j), d, n_valid, opt_);
    // Released code: a tile for every active slot; default: only where candidates can be accepted.
    if (opt_.decode.reference_quirks || (!tile.candidates.empty() && st.work)) tiles.push_back(std::move(tile));
  }
}

std::vector<TokenLogprob> FlashCacheDenoiser::commit_logprobs(size_t j, const SlotPhase& st,
                                                              std::span<const int32_t> positions) const {
  const FlashSlot& s = slots_[j];
  const LogprobIds ids{-1, model_.config.mask_token_id};
  const std::vector<int32_t>& window = st.decision.window;  // the main pass's rows, in this order
  std::vector<TokenLogprob> out;
  for (int32_t t : positions) {
    const auto p = static_cast<int32_t>(t + s.prompt_len);
    const auto it = std::find(window.begin(), window.end(), p);
    FDLLM_ASSERT_MSG(it != window.end(), "flash-cache: slot {} committed position {} outside its window", j, p);
    out.push_back(window_logprobs_[j].at(it - window.begin(), s.x[static_cast<size_t>(p)], s.logprobs, ids));
  }
  return out;
}

std::vector<SlotStep> FlashCacheDenoiser::continue_slots(std::vector<SlotPhase>& phases,
                                                         const std::vector<int64_t>& ranked) {
  std::vector<SlotStep> out;
  for (size_t j = 0; j < slots_.size(); ++j) {
    FlashSlot& s = slots_[j];
    SlotPhase& st = phases[j];
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
    if (s.logprobs >= 0 && st.error.empty()) ev.logprobs = commit_logprobs(j, st, ev.positions);
    rr.iterations.push_back(ev.positions);
    if (opt_.decode.verify) {
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
  return out;
}

std::vector<SlotStep> FlashCacheDenoiser::step(const FlashStepObserver& observer) {
  if (std::none_of(slots_.begin(), slots_.end(), [](const FlashSlot& s) { return s.active(); })) return {};
  FlashPhaseClock clock(stats_.phase_seconds);
  // The main pass (draft): the window predictions and the importance scores of every active slot.
  std::vector<int32_t> x0;
  std::vector<double> conf;
  const int64_t T = main_pass(clock, x0, conf);
  const int64_t forward = stats_.forwards++;
  stats_.query_rows += T;
  // Phase 1 (every mode): the main-pass decision of every active slot, committed.
  std::vector<SlotPhase> phases(slots_.size());
  std::vector<FlashVerifyTile> tiles;
  decide(observer, forward, x0, conf, phases, tiles);
  clock.lap(FlashPhase::kDecide);
  // Phase 2 (verify): one verify pass over every tile, acceptance, commit.
  std::vector<int64_t> ranked(slots_.size(), -1);  // full_pos[0 : ranked[j]] re-ranked during the verify pass
  if (!tiles.empty()) {
    verify(observer, forward, clock, tiles, phases, ranked);
    clock.lap(FlashPhase::kAccept);
  }
  // Continue (re-rank, next queries) or finish.
  std::vector<SlotStep> out = continue_slots(phases, ranked);
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
  const ModelConfig& c = model_.config;
  FDLLM_CHECK_ARG(!prompts.empty(), "flash-cache: no prompts");
  int64_t max_p = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    FDLLM_CHECK_ARG(!prompts[i].empty(), "flash-cache: prompt {} is empty", i);
    for (size_t p = 0; p < prompts[i].size(); ++p)
      FDLLM_CHECK_ARG(prompts[i][p] >= 0 && prompts[i][p] < c.embedding_size,
                      "flash-cache: prompt {} token {} at position {} is outside the vocabulary [0, {})", i,
                      prompts[i][p], p, c.embedding_size);
    max_p = std::max<int64_t>(max_p, static_cast<int64_t>(prompts[i].size()));
    FDLLM_CHECK_ARG(
        static_cast<int64_t>(prompts[i].size()) + opt_.sampling.gen_length <= c.max_sequence_length,
        "flash-cache: prompt {} of {} tokens + gen_length {} = {} exceeds the model's max_sequence_length {}", i,
        prompts[i].size(), opt_.sampling.gen_length, static_cast<int64_t>(prompts[i].size()) + opt_.sampling.gen_length,
        c.max_sequence_length);
  }
  SlotPool pool;
  const auto N = static_cast<int64_t>(prompts.size());
  pool.n_slots = opt_.decode.n_slots > 0 ? std::min<int64_t>(opt_.decode.n_slots, N) : N;  // 0 = one per prompt
  pool.max_total_length = max_p + opt_.sampling.gen_length;
  allocate_pool(pool);

  const SlotParams params = resolve_params(opt_.sampling, opt_.decode, /*exact_blocks=*/true);  // the options' request
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
