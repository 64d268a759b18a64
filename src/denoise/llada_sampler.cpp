#include "denoise/llada_sampler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/philox.h"
#include "denoise/decode_rules.h"

namespace flashdllm {
namespace {

/// Mixes a sequence's step counter and a position into a 32-bit noise key (splitmix-style), so
/// every (step, position) of a request draws independent noise regardless of batch composition.
uint32_t noise_key(uint64_t salt, int64_t nfe, int64_t pos) {
  uint64_t z = salt + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(nfe + 1) + static_cast<uint64_t>(pos);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

}  // namespace

void validate_sampler_options(const LladaSamplerOptions& o, const LladaConfig& cfg) {
  FDLLM_CHECK_ARG(o.gen_length > 0, "gen_length must be positive, got {}", o.gen_length);
  FDLLM_CHECK_ARG(o.block_length > 0, "block_length must be positive, got {}", o.block_length);
  FDLLM_CHECK_ARG(o.gen_length % o.block_length == 0,
                  "gen_length ({}) must be a multiple of block_length ({}) (LLaDA generate.py asserts this)",
                  o.gen_length, o.block_length);
  const int64_t n_blocks = o.gen_length / o.block_length;
  if (!o.threshold) {
    FDLLM_CHECK_ARG(o.steps > 0, "steps must be positive, got {}", o.steps);
    FDLLM_CHECK_ARG(o.steps % n_blocks == 0,
                    "steps ({}) must be divisible by the number of blocks gen_length/block_length = {} "
                    "(LLaDA generate.py asserts this)",
                    o.steps, n_blocks);
  } else {
    FDLLM_CHECK_ARG(*o.threshold > 0.0 && *o.threshold <= 1.0, "threshold must be in (0, 1], got {}", *o.threshold);
  }
  FDLLM_CHECK_ARG(o.temperature >= 0.0 && std::isfinite(o.temperature), "temperature must be >= 0, got {}",
                  o.temperature);
  FDLLM_CHECK_ARG(o.cfg_scale >= 0.0 && std::isfinite(o.cfg_scale), "cfg_scale must be >= 0, got {}", o.cfg_scale);
  FDLLM_CHECK_ARG(!o.confidence_eos_eot_inf || (o.eot_token_id >= 0 && o.eot_token_id < cfg.embedding_size),
                  "confidence_eos_eot_inf needs the EOT token id (<|eot_id|>), which this checkpoint's tokenizer "
                  "does not define; pass --eot-id");
  FDLLM_CHECK_ARG(o.eos_pad_tile >= 0, "eos_pad_tile must be >= 0, got {}", o.eos_pad_tile);
  FDLLM_CHECK_ARG(o.gen_length < cfg.max_sequence_length,
                  "gen_length {} does not fit the model's max_sequence_length {}", o.gen_length,
                  cfg.max_sequence_length);
}

LladaSampler::LladaSampler(Backend& backend, const LladaModel& model, LladaSamplerOptions options)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  validate_sampler_options(opt_, model_.config);
}

SequenceState LladaSampler::init_state(std::span<const int32_t> prompt) const {
  const LladaConfig& c = model_.config;
  FDLLM_CHECK_ARG(!prompt.empty(), "the prompt is empty (LLaDA needs at least one prompt token)");
  const int64_t total = static_cast<int64_t>(prompt.size()) + opt_.gen_length;
  FDLLM_CHECK_ARG(total <= c.max_sequence_length,
                  "prompt of {} tokens + gen_length {} = {} exceeds the model's max_sequence_length {}",
                  prompt.size(), opt_.gen_length, total, c.max_sequence_length);
  for (size_t i = 0; i < prompt.size(); ++i) {
    FDLLM_CHECK_ARG(prompt[i] >= 0 && prompt[i] < c.embedding_size,
                    "prompt token {} at position {} is outside the vocabulary [0, {})", prompt[i], i,
                    c.embedding_size);
    FDLLM_CHECK_ARG(prompt[i] != c.mask_token_id,
                    "prompt position {} holds the mask token id {}; prompts must not contain masks", i,
                    c.mask_token_id);
  }
  SequenceState s;
  s.prompt_len = static_cast<int64_t>(prompt.size());
  s.gen_length = opt_.gen_length;
  s.x.assign(prompt.begin(), prompt.end());
  s.x.resize(static_cast<size_t>(total), c.mask_token_id);
  if (opt_.eos_pad_tile > 0) {
    const int64_t padded = total / opt_.eos_pad_tile * opt_.eos_pad_tile + opt_.eos_pad_tile;
    FDLLM_CHECK_ARG(padded <= c.max_sequence_length + opt_.eos_pad_tile,
                    "prompt + gen_length padded to the {}-token tile ({}) exceeds the model's context {}",
                    opt_.eos_pad_tile, padded, c.max_sequence_length);
    s.x.resize(static_cast<size_t>(padded), c.eos_token_id);
  }
  prepare_block(s);
  return s;
}

void LladaSampler::prepare_block(SequenceState& s) const {
  s.step_in_block = 0;
  s.block_quota.clear();
  if (opt_.threshold) return;
  const int64_t b0 = s.prompt_len + s.block * opt_.block_length;
  int64_t n_masked = 0;
  for (int64_t p = b0; p < b0 + opt_.block_length; ++p) n_masked += s.x[p] == model_.config.mask_token_id;
  s.block_quota = quota_schedule(n_masked, opt_.steps / (opt_.gen_length / opt_.block_length));
}

void LladaSampler::ensure_capacity(int64_t tokens, int64_t logit_rows, int64_t tiles) {
  if (kv_.rows < tokens) kv_ = make_kv_store(backend_, model_.config, tokens, /*shared_across_layers=*/true);
  if (ws_.max_tokens < tokens || ws_.max_logit_rows < logit_rows || ws_.max_tiles < tiles) {
    ws_ = make_forward_workspace(backend_, model_.config, std::max(tokens, ws_.max_tokens),
                                 std::max(logit_rows, ws_.max_logit_rows), std::max(tiles, ws_.max_tiles));
    const int64_t R = ws_.max_logit_rows;
    const size_t bytes_x0 = static_cast<size_t>(R) * 4, pad = (bytes_x0 + 255) / 256 * 256;
    sel_buf_ = backend_.alloc(pad + static_cast<size_t>(R) * 8, "token selection outputs");
    x0_ = Tensor(sel_buf_.data(), DType::kI32, backend_.device(), {R});
    conf_ = Tensor(static_cast<char*>(sel_buf_.data()) + pad, DType::kF64, backend_.device(), {R});
  }
}

std::vector<StepCommit> LladaSampler::step(std::vector<SequenceState>& batch) {
  const LladaConfig& c = model_.config;
  const int32_t mask = c.mask_token_id;
  const bool cfg = opt_.cfg_scale > 0.0;
  std::vector<StepCommit> commits(batch.size());

  // --- plan: every position of every active sequence is a query row (full recompute)
  ForwardBatch fb;
  std::vector<std::vector<int64_t>> cand(batch.size());  // candidate positions per sequence
  std::vector<int64_t> offset(batch.size(), -1);
  int64_t T = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    SequenceState& s = batch[i];
    if (s.done) continue;
    const int64_t L = static_cast<int64_t>(s.x.size());
    offset[i] = T;
    const int64_t b0 = s.prompt_len + s.block * opt_.block_length;
    for (int64_t p = b0; p < b0 + opt_.block_length; ++p)
      if (s.x[p] == mask) cand[i].push_back(p);
    T += L;
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
  const int64_t R_all = static_cast<int64_t>(fb.logit_rows.size());
  const int64_t R = R_all / n_copies;
  ensure_capacity(n_copies * n_cond, std::max<int64_t>(R_all, 1), static_cast<int64_t>(fb.tiles.size()));

  // --- forward, guidance, token choice on the device; only R ids + confidences come back
  std::vector<int32_t> x0(static_cast<size_t>(R));
  std::vector<double> conf(static_cast<size_t>(R));
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
    Tensor x0_dev = x0_.slice_rows(0, R), conf_dev = conf_.slice_rows(0, R);
    backend_.select_tokens(cond, ws_.row_keys.slice_rows(0, R), sp, x0_dev, conf_dev);
    backend_.copy_to_host(x0.data(), x0_dev);
    backend_.copy_to_host(conf.data(), conf_dev);
  }

  // --- per-sequence decisions
  int64_t r0 = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    SequenceState& s = batch[i];
    if (offset[i] < 0) continue;
    const int64_t n = static_cast<int64_t>(cand[i].size());
    std::span<const double> cs(conf.data() + r0, static_cast<size_t>(n));
    std::vector<double> random_conf;
    if (opt_.remasking == Remasking::kRandom) {
      for (int64_t j = 0; j < n; ++j)
        random_conf.push_back(philox_uniform(opt_.seed, 1, static_cast<uint32_t>(fb.row_keys[r0 + j]), 0xffffffffu));
      cs = random_conf;
    }
    std::vector<int64_t> pick;
    if (opt_.threshold) {
      pick = threshold_indices(cs, *opt_.threshold);
    } else {
      pick = top_k_indices(cs, s.block_quota[static_cast<size_t>(s.step_in_block)]);
    }
    std::sort(pick.begin(), pick.end());
    StepCommit& sc = commits[i];
    sc.candidates = cand[i];
    sc.confidences.assign(cs.begin(), cs.end());
    for (int64_t j : pick) {
      const int64_t pos = cand[i][static_cast<size_t>(j)];
      s.x[pos] = x0[static_cast<size_t>(r0 + j)];
      sc.positions.push_back(pos);
      sc.tokens.push_back(s.x[pos]);
    }
    r0 += n;
    s.nfe += 1;
    s.step_in_block += 1;
    bool block_done;
    if (opt_.threshold) {
      block_done = static_cast<int64_t>(pick.size()) == n;
    } else {
      block_done = s.step_in_block == static_cast<int64_t>(s.block_quota.size());
    }
    if (block_done) {
      s.block += 1;
      if (s.block == opt_.gen_length / opt_.block_length) {
        s.done = true;
      } else {
        prepare_block(s);
      }
    }
  }
  return commits;
}

std::vector<SequenceState> LladaSampler::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                  const StepObserver& observer) {
  std::vector<SequenceState> batch;
  batch.reserve(prompts.size());
  for (const auto& p : prompts) batch.push_back(init_state(p));
  while (std::any_of(batch.begin(), batch.end(), [](const SequenceState& s) { return !s.done; })) {
    std::vector<bool> was_done(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) was_done[i] = batch[i].done;
    std::vector<StepCommit> commits = step(batch);
    if (observer)
      for (size_t i = 0; i < batch.size(); ++i)
        if (!was_done[i]) observer(i, batch[i], commits[i]);
  }
  return batch;
}

}  // namespace flashdllm
