#include "denoise/dream_sampler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/philox.h"
#include "denoise/decode_rules.h"

namespace flashdllm {

namespace {

/// Streams of the sampler's own draws (Philox step argument), apart from the Gumbel noise of the
/// token choice (select_tokens, keyed by the row keys).
constexpr uint64_t kOriginStream = 3, kAlgTempStream = 4;

GenerateOptions dream_options(GenerateOptions o) {
  FDLLM_CHECK_PARAM(o.decode.cache == CacheMode::kNone, "cache", "Dream's sampler runs cache none, got cache {}",
                    cache_mode_name(o.decode.cache));
  FDLLM_CHECK_PARAM(o.decode.sampler != Sampler::kLlada, "sampler",
                    "Dream's sampler was asked for with sampler llada (LLaDA's block sampler)");
  o.decode.sampler = Sampler::kDream;
  return o;
}

}  // namespace

DreamSampler::DreamSampler(Backend& backend, const Model& model, GenerateOptions options)
    : backend_(backend), model_(model), opt_(dream_options(std::move(options))) {
  validate(opt_, model_.config);
}

DreamSampler::DreamSampler(Backend& backend, const Model& model, GenerateOptions options, const SlotPool& pool)
    : backend_(backend), model_(model), opt_(dream_options(std::move(options))) {
  validate(opt_.decode, model_.config);  // the requests are checked at admission (check_request)
  FDLLM_CHECK_ARG(pool.n_slots >= 1 && pool.max_total_length >= 2,
                  "Dream sampler: a pool needs >= 1 slot and max_total_length >= 2, got {} slots x {}", pool.n_slots,
                  pool.max_total_length);
  slots_.reset(pool.n_slots, pool.max_total_length);
  const int64_t rows = pool.max_step_rows > 0 ? pool.max_step_rows : pool.n_slots * pool.max_total_length;
  // Every masked position is a logits row: at most the canvas, i.e. the slot less one prompt token.
  const int64_t logit_rows = std::min(rows, pool.n_slots * (pool.max_total_length - 1));
  ensure_capacity(rows, logit_rows, pool.n_slots);
  selection_.reserve(backend_, logit_rows);
}

DreamState DreamSampler::init_state(std::span<const int32_t> prompt) const {
  return init_state(prompt, resolve_params(opt_.sampling, opt_.decode, /*exact_blocks=*/true));
}

DreamState DreamSampler::init_state(std::span<const int32_t> prompt, const SlotParams& params) const {
  const ModelConfig& c = model_.config;
  DreamState s;
  init_sequence(s, prompt, params.gen_length, c);
  set_state_params(s, params);
  s.top_p = params.top_p;
  s.top_k = params.top_k;
  // threshold, temperature, top_p and top_k were validated with the request (params.cpp); the
  // schedule below needs steps in [1, gen_length] whatever the caller resolved.
  FDLLM_CHECK_PARAM(s.steps >= 1 && s.steps <= s.gen_length, "steps", "steps must be in [1, gen_length = {}], got {}",
                    s.gen_length, s.steps);
  s.timesteps = dream_timesteps(s.steps, static_cast<float>(opt_.decode.timestep_eps));
  return s;
}

void DreamSampler::ensure_capacity(int64_t tokens, int64_t logit_rows, int64_t tiles) {
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

SelectParams DreamSampler::select_params(const DreamState& s) const {
  SelectParams sp;
  sp.dream_rule = true;
  sp.temperature = s.temperature;
  sp.seed = s.seed;
  sp.exclude_token = model_.config.mask_token_id;  // a committed position never holds [MASK]
  sp.top_p = s.top_p;
  sp.top_k = static_cast<int32_t>(std::min<int64_t>(s.top_k, model_.config.embedding_size));
  switch (opt_.decode.dream_alg) {
    case DreamAlg::kTopkMargin: sp.confidence = SelectConfidence::kMargin; break;
    case DreamAlg::kEntropy: sp.confidence = SelectConfidence::kNegEntropy; break;
    case DreamAlg::kOrigin:
    case DreamAlg::kMaskgitPlus: sp.confidence = SelectConfidence::kProbability; break;
  }
  return sp;
}

StepCommit DreamSampler::commit(DreamState& s, std::span<const int64_t> cand, std::span<const int32_t> x0,
                                std::span<const double> conf) const {
  StepCommit sc;
  sc.candidates.assign(cand.begin(), cand.end());
  const std::vector<float>& t = s.timesteps;
  const int64_t i = s.step_in_block, n = static_cast<int64_t>(cand.size());
  std::vector<int64_t> pick;
  if (opt_.decode.dream_alg == DreamAlg::kOrigin) {
    // Each masked position moves with probability 1 − s/t (all of them at the last step).
    const float p = i < s.steps - 1 ? 1.0f - t[static_cast<size_t>(i + 1)] / t[static_cast<size_t>(i)] : 1.0f;
    for (int64_t j = 0; j < n; ++j) {
      const double u = philox_uniform(s.seed, kOriginStream, noise_key(s.seed, s.nfe, cand[j]), 0);
      sc.confidences.push_back(u);
      if (u < static_cast<double>(p)) pick.push_back(j);
    }
  } else {
    sc.confidences.assign(conf.begin(), conf.end());
    const int64_t k = dream_transfer_count(n, i, t);
    if (opt_.decode.alg_temp > 0.0) {
      // torch.multinomial(softmax(conf / alg_temp), k) without replacement = the top k of
      // conf / alg_temp + Gumbel noise (the Gumbel-top-k trick).
      std::vector<double> keyed(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const double u = philox_uniform(s.seed, kAlgTempStream, noise_key(s.seed, s.nfe, cand[j]), 0);
        keyed[j] = conf[j] / opt_.decode.alg_temp - std::log(-std::log(u));
      }
      pick = top_k_indices(keyed, k);
    } else {
      pick = top_k_indices(conf, k);
    }
    std::sort(pick.begin(), pick.end());
  }
  for (int64_t j : pick) {
    s.x[static_cast<size_t>(cand[j])] = x0[static_cast<size_t>(j)];
    sc.positions.push_back(cand[j]);
    sc.tokens.push_back(x0[static_cast<size_t>(j)]);
  }
  s.nfe += 1;
  s.step_in_block += 1;
  s.done = s.step_in_block >= s.steps || static_cast<int64_t>(pick.size()) == n;
  return sc;
}

std::vector<StepCommit> DreamSampler::step(std::vector<DreamState>& batch) {
  const ModelConfig& c = model_.config;
  const int32_t mask = c.mask_token_id;
  std::vector<StepCommit> commits(batch.size());

  // --- plan: every position of every active sequence is a query row (full recompute); the logits
  // of masked position p come from row p − 1 under the logit shift (row p without it).
  ForwardBatch fb;
  std::vector<std::vector<int64_t>> cand(batch.size());
  std::vector<int64_t> offset(batch.size(), -1);
  int64_t T = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    DreamState& s = batch[i];
    if (s.done) continue;
    offset[i] = T;
    const int64_t L = static_cast<int64_t>(s.x.size());
    for (int64_t p = s.gen_begin(); p < s.gen_end(); ++p)
      if (s.x[static_cast<size_t>(p)] == mask) cand[i].push_back(p);
    for (int64_t p = 0; p < L; ++p) {
      fb.token_ids.push_back(s.x[static_cast<size_t>(p)]);
      fb.positions.push_back(static_cast<int32_t>(p));
      fb.kv_rows.push_back(static_cast<int32_t>(T + p));
    }
    fb.tiles.push_back(
        {static_cast<int32_t>(T), static_cast<int32_t>(T + L), static_cast<int32_t>(T), static_cast<int32_t>(T + L)});
    for (int64_t p : cand[i]) {
      fb.logit_rows.push_back(static_cast<int32_t>(T + logits_source(c, p)));
      fb.row_keys.push_back(static_cast<int32_t>(noise_key(s.seed, s.nfe, p)));
    }
    T += L;
  }
  if (T == 0) return commits;
  const auto R = static_cast<int64_t>(fb.logit_rows.size());
  ensure_capacity(T, std::max<int64_t>(R, 1), static_cast<int64_t>(fb.tiles.size()));

  // --- forward and token choice on the device; R ids + confidences come back
  std::vector<int32_t> x0;
  std::vector<double> conf;
  std::vector<size_t> bad;
  Tensor logits;  // the candidates' rows [0, R) (logprobs read them after the decisions)
  if (R > 0) {
    logits = model_forward(backend_, model_, fb, kv_, ws_);
    ++passes_;
    std::vector<SelectSegment> segments;
    int64_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (offset[i] < 0) continue;
      const auto n = static_cast<int64_t>(cand[i].size());
      append_select_segment(segments, row, row + n, select_params(batch[i]));
      row += n;
    }
    selection_.run(backend_, logits.slice_rows(0, R), ws_.row_keys.slice_rows(0, R), segments, x0, conf);
    bad = check_selection(x0, conf, mask, "Dream sampler");
  }

  // --- per-sequence decisions
  size_t r0 = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (offset[i] < 0) continue;
    const size_t n = cand[i].size();
    DreamState& s = batch[i];
    commits[i].error = nonfinite_error(bad, conf, r0, r0 + n, "Dream sampler");
    if (!commits[i].error.empty()) {
      s.done = true;
    } else {
      commits[i] =
          commit(s, cand[i], std::span<const int32_t>(x0).subspan(r0, n), std::span<const double>(conf).subspan(r0, n));
      attach_logprobs(backend_, logits, r0, cand[i], s, LogprobIds{-1, mask}, commits[i]);
    }
    r0 += n;
  }
  return commits;
}

// ---------------------------------------------------------------------------------- slot contract

void DreamSampler::check_request(std::span<const int32_t> prompt, const SlotParams& p) const {
  slots_.check_fits(prompt, p, "Dream sampler");
  (void)init_state(prompt, p);  // every other check
}

void DreamSampler::admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) {
  FDLLM_CHECK_ARG(slot >= 0 && slot < n_slots() && !active(slot), "Dream sampler: slot {} is not a free slot", slot);
  check_request(prompt, p);
  slots_.states[static_cast<size_t>(slot)] = init_state(prompt, p);
}

std::vector<SlotStep> DreamSampler::step() {
  const std::vector<bool> was_active = slots_.active_mask();
  std::vector<StepCommit> commits = step(slots_.states);
  return slot_steps_of(slots_.states, commits, was_active);
}

std::vector<DreamState> DreamSampler::generate(
    const std::vector<std::vector<int32_t>>& prompts,
    const std::function<void(size_t, const DreamState&, const StepCommit&)>& observer) {
  return run_to_completion<DreamState>(*this, prompts, observer);
}

}  // namespace flashdllm
