#include "denoise/llada_sampler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace flashdllm {

namespace {

/// The settings that only the LLaDA sampler (cache none) runs with; the rest of their checks are
/// params.cpp's (validate).
void check_llada_settings(const DecodeSettings& d, const ModelConfig& cfg) {
  FDLLM_CHECK_PARAM(d.cache == CacheMode::kNone, "cache", "the LLaDA sampler runs cache none, got cache {}",
                    cache_mode_name(d.cache));
  // The EOT id is the tokenizer's (resolved by the engine), not checked by params.cpp.
  FDLLM_CHECK_PARAM(
      !d.confidence_eos_eot_inf || (d.eot_token_id && *d.eot_token_id >= 0 && *d.eot_token_id < cfg.embedding_size),
      "eot_token_id",
      "confidence_eos_eot_inf needs the end-of-turn (EOT) token id, which this checkpoint's tokenizer does not "
      "define (LLaDA's <|eot_id|>, or the family's own); pass --eot-id");
}

}  // namespace

LladaSampler::LladaSampler(Backend& backend, const Model& model, GenerateOptions options)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  check_llada_settings(opt_.decode, model_.config);
  validate(opt_, model_.config);
  B_ = opt_.decode.effective_block_length();
  eot_ = opt_.decode.eot_token_id.value_or(-1);
}

LladaSampler::LladaSampler(Backend& backend, const Model& model, GenerateOptions options, const SlotPool& pool)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  check_llada_settings(opt_.decode, model_.config);
  validate(opt_.decode, model_.config);  // the requests are checked at admission (check_request)
  B_ = opt_.decode.effective_block_length();
  eot_ = opt_.decode.eot_token_id.value_or(-1);
  FDLLM_CHECK_ARG(pool.n_slots >= 1 && pool.max_total_length >= 1, "LLaDA sampler: a pool needs >= 1 slot and a "
                  "positive max_total_length, got {} slots x {}", pool.n_slots, pool.max_total_length);
  slots_.reset(pool.n_slots, pool.max_total_length);
  const int64_t copies = opt_.decode.cfg_scale > 0.0 ? 2 : 1;
  const int64_t rows = pool.max_step_rows > 0 ? pool.max_step_rows : pool.n_slots * padded_length(pool.max_total_length);
  const int64_t logit_rows = pool.n_slots * B_;
  ensure_capacity(copies * rows, copies * logit_rows, copies * pool.n_slots);
  selection_.reserve(backend_, logit_rows);
}

int64_t LladaSampler::padded_length(int64_t total) const noexcept {
  const int64_t tile = opt_.decode.eos_pad_tile;
  return tile > 0 ? total / tile * tile + tile : total;
}

SequenceState LladaSampler::init_state(std::span<const int32_t> prompt) const {
  return init_state(prompt, resolve_params(opt_.sampling, opt_.decode, /*exact_blocks=*/true));
}

SequenceState LladaSampler::init_state(std::span<const int32_t> prompt, const SlotParams& params) const {
  const ModelConfig& c = model_.config;
  SequenceState s;
  init_sequence(s, prompt, params.gen_length, c);
  set_state_params(s, params);
  validate_state_params(s, B_, c, "LLaDA generate.py");
  if (opt_.decode.eos_pad_tile > 0) {
    const int64_t total = static_cast<int64_t>(s.x.size());
    const int64_t padded = padded_length(total);
    FDLLM_CHECK_ARG(padded <= c.max_sequence_length,
                    "eos_pad_tile {}: prompt + gen_length = {} padded to the next tile is {} positions, beyond the "
                    "model's max_sequence_length {} (use a shorter prompt or gen_length, or no --eos-pad-tile)",
                    opt_.decode.eos_pad_tile, total, padded, c.max_sequence_length);
    s.x.resize(static_cast<size_t>(padded), c.eos_token_id);
  }
  begin_block(s, s.schedule(B_), c.mask_token_id);
  return s;
}

void LladaSampler::ensure_capacity(int64_t tokens, int64_t logit_rows, int64_t tiles) {
  if (kv_.rows < tokens) {
    kv_ = KvStore{};
    kv_ = make_kv_store(backend_, model_.config, tokens, /*shared_across_layers=*/true, model_.tp);
  }
  if (ws_.max_tokens < tokens || ws_.max_logit_rows < logit_rows || ws_.max_tiles < tiles) {
    const int64_t t = std::max(tokens, ws_.max_tokens), r = std::max(logit_rows, ws_.max_logit_rows),
                  n = std::max(tiles, ws_.max_tiles);
    ws_ = ForwardWorkspace{};  // free the old one first
    ws_ = make_forward_workspace(backend_, model_.config, t, r, n, 0, model_.tp);
  }
}

std::vector<StepCommit> LladaSampler::step(std::vector<SequenceState>& batch) {
  const ModelConfig& c = model_.config;
  const int32_t mask = c.mask_token_id;
  const bool cfg = opt_.decode.cfg_scale > 0.0;
  std::vector<StepCommit> commits(batch.size());

  // --- plan: every position of every active sequence is a query row (full recompute)
  ForwardBatch fb;
  std::vector<std::vector<int64_t>> cand(batch.size());
  std::vector<int64_t> offset(batch.size(), -1);
  int64_t T = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].done) continue;
    offset[i] = T;
    cand[i] = block_candidates(batch[i], B_, mask);
    T += static_cast<int64_t>(batch[i].x.size());
  }
  if (T == 0) return commits;
  const int64_t n_cond = T;
  const int n_copies = cfg ? 2 : 1;
  for (int copy = 0; copy < n_copies; ++copy) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (offset[i] < 0) continue;
      const SequenceState& s = batch[i];
      const int64_t L = static_cast<int64_t>(s.x.size());
      const int32_t o = static_cast<int32_t>(offset[i] + copy * n_cond);
      for (int64_t p = 0; p < L; ++p) {
        // Unsupervised CFG: the unconditional copy has its prompt replaced by masks (reference §B).
        fb.token_ids.push_back(copy == 1 && p < s.prompt_len ? mask : s.x[p]);
        fb.positions.push_back(static_cast<int32_t>(p));
        fb.kv_rows.push_back(o + static_cast<int32_t>(p));
      }
      fb.tiles.push_back({o, o + static_cast<int32_t>(L), o, o + static_cast<int32_t>(L)});
    }
  }
  for (int copy = 0; copy < n_copies; ++copy)
    for (size_t i = 0; i < batch.size(); ++i)
      for (int64_t p : cand[i]) {
        fb.logit_rows.push_back(static_cast<int32_t>(offset[i] + copy * n_cond + logits_source(c, p)));
        fb.row_keys.push_back(static_cast<int32_t>(noise_key(batch[i].seed, batch[i].nfe, p)));
      }
  const int64_t R = static_cast<int64_t>(fb.logit_rows.size()) / n_copies;
  ensure_capacity(n_copies * n_cond, std::max<int64_t>(n_copies * R, 1), static_cast<int64_t>(fb.tiles.size()));

  // --- forward, guidance, token choice on the device; only R ids + confidences come back.
  // One select call per run of sequences with equal parameters (a uniform batch: one call).
  std::vector<int32_t> x0;
  std::vector<double> conf;
  std::vector<size_t> bad;  // rows with non-finite confidences: their sequences fail alone
  Tensor logits_rows;       // the candidates' rows [0, R) (logprobs read them after the decisions)
  if (R > 0) {
    Tensor logits = model_forward(backend_, model_, fb, kv_, ws_);
    ++passes_;
    Tensor cond = logits.slice_rows(0, R);
    if (cfg) backend_.cfg_combine(cond, logits.slice_rows(R, 2 * R), static_cast<float>(opt_.decode.cfg_scale), cond);
    std::vector<SelectSegment> segments;
    int64_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      const SequenceState& s = batch[i];
      SelectParams sp;
      sp.temperature = s.temperature;
      sp.seed = s.seed;
      sp.confidence_f64 = !opt_.decode.confidence_f32;
      sp.exclude_token = mask;  // a committed position never holds [MASK]
      if (opt_.decode.logits_eos_inf) sp.suppress_token = c.eos_token_id;
      if (opt_.decode.confidence_eos_eot_inf) {
        sp.conf_suppress_a = eot_;
        // Upstream (reference §B quirk, kept under reference_quirks): at τ = 0 the noised and clean
        // logits are one tensor, so EOS loses its confidence too; at τ > 0 only EOT does.
        if (!opt_.decode.reference_quirks || s.temperature == 0.0) sp.conf_suppress_b = c.eos_token_id;
      }
      const auto n = static_cast<int64_t>(cand[i].size());
      append_select_segment(segments, row, row + n, sp);
      row += n;
    }
    selection_.run(backend_, cond, ws_.row_keys.slice_rows(0, R), segments, x0, conf);
    logits_rows = cond;
    bad = check_selection(x0, conf, mask, "LLaDA sampler");
  }

  // --- per-sequence decisions
  size_t r0 = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (offset[i] < 0) continue;
    const size_t n = cand[i].size();
    SequenceState& s = batch[i];
    commits[i].error = nonfinite_error(bad, conf, r0, r0 + n, "LLaDA sampler");
    if (!commits[i].error.empty()) {
      s.done = true;
      r0 += n;
      continue;
    }
    commits[i] =
        commit_step(s, cand[i], std::span<const int32_t>(x0).subspan(r0, n),
                    std::span<const double>(conf).subspan(r0, n), std::span<const int32_t>(fb.row_keys).subspan(r0, n),
                    s.schedule(B_), opt_.decode.remasking, s.seed, BlockEnd::kAfterQuotaSteps, mask);
    // The rows the selection read (guided under cfg_scale), EOS at -inf under logits_eos_inf.
    const LogprobIds ids{opt_.decode.logits_eos_inf ? c.eos_token_id : -1, mask};
    attach_logprobs(backend_, logits_rows, r0, cand[i], s, ids, commits[i]);
    r0 += n;
  }
  return commits;
}

// ---------------------------------------------------------------------------------- slot contract

void LladaSampler::check_request(std::span<const int32_t> prompt, const SlotParams& p) const {
  slots_.check_fits(prompt, p, "LLaDA sampler");
  (void)init_state(prompt, p);  // every other check
}

void LladaSampler::admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) {
  FDLLM_CHECK_ARG(slot >= 0 && slot < n_slots() && !active(slot), "LLaDA sampler: slot {} is not a free slot", slot);
  check_request(prompt, p);
  slots_.states[static_cast<size_t>(slot)] = init_state(prompt, p);
}

std::vector<SlotStep> LladaSampler::step() {
  const std::vector<bool> was_active = slots_.active_mask();
  std::vector<StepCommit> commits = step(slots_.states);
  return slot_steps_of(slots_.states, commits, was_active);
}

SlotOutput LladaSampler::output(int64_t slot) const {
  return state_output(slots_.at(slot, "LLaDA sampler"));
}

std::vector<SequenceState> LladaSampler::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                  const StepObserver& observer) {
  return run_to_completion<SequenceState>(*this, prompts, observer);
}

}  // namespace flashdllm
