#include "denoise/llada_sampler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace flashdllm {

void validate_sampler_options(const LladaSamplerOptions& o, const LladaConfig& cfg) {
  validate_block_schedule(o.schedule(), o.temperature, cfg, "LLaDA generate.py");
  FDLLM_CHECK_ARG(o.cfg_scale >= 0.0 && std::isfinite(o.cfg_scale), "cfg_scale must be >= 0, got {}", o.cfg_scale);
  FDLLM_CHECK_ARG(!o.confidence_eos_eot_inf || (o.eot_token_id >= 0 && o.eot_token_id < cfg.embedding_size),
                  "confidence_eos_eot_inf needs the EOT token id (<|eot_id|>), which this checkpoint's tokenizer "
                  "does not define; pass --eot-id");
  FDLLM_CHECK_ARG(o.eos_pad_tile >= 0 && o.eos_pad_tile <= cfg.max_sequence_length,
                  "eos_pad_tile must be in [0, max_sequence_length = {}], got {}", cfg.max_sequence_length,
                  o.eos_pad_tile);
}

LladaSampler::LladaSampler(Backend& backend, const LladaModel& model, LladaSamplerOptions options)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  validate_sampler_options(opt_, model_.config);
}

SequenceState LladaSampler::init_state(std::span<const int32_t> prompt) const {
  const LladaConfig& c = model_.config;
  SequenceState s;
  init_sequence(s, prompt, opt_.gen_length, c);
  if (opt_.eos_pad_tile > 0) {
    const int64_t total = static_cast<int64_t>(s.x.size());
    const int64_t padded = total / opt_.eos_pad_tile * opt_.eos_pad_tile + opt_.eos_pad_tile;
    // The padded row must stay inside the RoPE table (the engine makes max_sequence_length + 256 rows,
    // room for the Flash-dLLM layout's padding).
    const int64_t rope_rows = model_.rope.table.cos.rows();
    FDLLM_CHECK_ARG(padded <= rope_rows,
                    "--eos-pad-tile {}: prompt + gen_length = {} padded to the next tile is {} positions, beyond the "
                    "{} positions this model supports (max_sequence_length {})",
                    opt_.eos_pad_tile, total, padded, rope_rows, c.max_sequence_length);
    s.x.resize(static_cast<size_t>(padded), c.eos_token_id);
  }
  begin_block(s, opt_.schedule(), c.mask_token_id);
  return s;
}

void LladaSampler::ensure_capacity(int64_t tokens, int64_t logit_rows, int64_t tiles) {
  if (kv_.rows < tokens) {
    kv_ = KvStore{};
    kv_ = make_kv_store(backend_, model_.config, tokens, /*shared_across_layers=*/true);
  }
  if (ws_.max_tokens < tokens || ws_.max_logit_rows < logit_rows || ws_.max_tiles < tiles) {
    const int64_t t = std::max(tokens, ws_.max_tokens), r = std::max(logit_rows, ws_.max_logit_rows),
                  n = std::max(tiles, ws_.max_tiles);
    ws_ = ForwardWorkspace{};  // free the old one first
    ws_ = make_forward_workspace(backend_, model_.config, t, r, n);
  }
}

std::vector<StepCommit> LladaSampler::step(std::vector<SequenceState>& batch) {
  const LladaConfig& c = model_.config;
  const int32_t mask = c.mask_token_id;
  const bool cfg = opt_.cfg_scale > 0.0;
  std::vector<StepCommit> commits(batch.size());

  // --- plan: every position of every active sequence is a query row (full recompute)
  ForwardBatch fb;
  std::vector<std::vector<int64_t>> cand(batch.size());
  std::vector<int64_t> offset(batch.size(), -1);
  int64_t T = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].done) continue;
    offset[i] = T;
    cand[i] = block_candidates(batch[i], opt_.block_length, mask);
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
        fb.logit_rows.push_back(static_cast<int32_t>(offset[i] + copy * n_cond + p));
        fb.row_keys.push_back(static_cast<int32_t>(noise_key(opt_.seed, batch[i].nfe, p)));
      }
  const int64_t R = static_cast<int64_t>(fb.logit_rows.size()) / n_copies;
  ensure_capacity(n_copies * n_cond, std::max<int64_t>(n_copies * R, 1), static_cast<int64_t>(fb.tiles.size()));

  // --- forward, guidance, token choice on the device; only R ids + confidences come back
  std::vector<int32_t> x0;
  std::vector<double> conf;
  if (R > 0) {
    Tensor logits = llada_forward(backend_, model_, fb, kv_, ws_);
    Tensor cond = logits.slice_rows(0, R);
    if (cfg) backend_.cfg_combine(cond, logits.slice_rows(R, 2 * R), static_cast<float>(opt_.cfg_scale), cond);
    SelectParams sp;
    sp.temperature = opt_.temperature;
    sp.seed = opt_.seed;
    sp.confidence_f64 = opt_.confidence_f64;
    if (opt_.logits_eos_inf) sp.suppress_token = c.eos_token_id;
    if (opt_.confidence_eos_eot_inf) {
      sp.conf_suppress_a = opt_.eot_token_id;
      // Quirk reproduced (reference §B): at τ = 0 the noised and clean logits are one tensor,
      // so EOS is removed from the confidence too; at τ > 0 only EOT is.
      if (opt_.temperature == 0.0) sp.conf_suppress_b = c.eos_token_id;
    }
    selection_.run(backend_, cond, ws_.row_keys.slice_rows(0, R), sp, x0, conf);
  }

  // --- per-sequence decisions
  const BlockSchedule sched = opt_.schedule();
  size_t r0 = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (offset[i] < 0) continue;
    const size_t n = cand[i].size();
    commits[i] = commit_step(batch[i], cand[i], std::span<const int32_t>(x0).subspan(r0, n),
                             std::span<const double>(conf).subspan(r0, n),
                             std::span<const int32_t>(fb.row_keys).subspan(r0, n), sched, opt_.remasking, opt_.seed,
                             BlockEnd::kAfterQuotaSteps, mask);
    r0 += n;
  }
  return commits;
}

std::vector<SequenceState> LladaSampler::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                  const StepObserver& observer) {
  return run_to_completion<SequenceState>(*this, prompts, observer);
}

}  // namespace flashdllm
