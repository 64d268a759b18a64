#include "denoise/block_decoding.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/philox.h"
#include "denoise/decode_rules.h"

namespace flashdllm {

void validate_block_schedule(const BlockSchedule& o, double temperature, const LladaConfig& cfg, const char* source) {
  FDLLM_CHECK_ARG(o.gen_length > 0, "gen_length must be positive, got {}", o.gen_length);
  FDLLM_CHECK_ARG(o.block_length > 0, "block_length must be positive, got {}", o.block_length);
  FDLLM_CHECK_ARG(o.gen_length % o.block_length == 0,
                  "gen_length ({}) must be a multiple of block_length ({}) ({} asserts this)", o.gen_length,
                  o.block_length, source);
  if (!o.threshold) {
    FDLLM_CHECK_ARG(o.steps > 0 && o.steps <= o.gen_length,
                    "steps must be in [1, gen_length = {}] (a step commits at least one token), got {}", o.gen_length,
                    o.steps);
    FDLLM_CHECK_ARG(o.steps % o.n_blocks() == 0,
                    "steps ({}) must be divisible by the number of blocks gen_length/block_length = {} ({} asserts "
                    "this)",
                    o.steps, o.n_blocks(), source);
  } else {
    FDLLM_CHECK_ARG(std::isfinite(*o.threshold) && *o.threshold > 0.0 && *o.threshold <= 1.0,
                    "threshold must be in (0, 1], got {}", *o.threshold);
  }
  FDLLM_CHECK_ARG(temperature >= 0.0 && std::isfinite(temperature), "temperature must be >= 0, got {}", temperature);
  FDLLM_CHECK_ARG(o.gen_length < cfg.max_sequence_length, "gen_length {} does not fit the model's max_sequence_length {}",
                  o.gen_length, cfg.max_sequence_length);
}

void init_sequence(SequenceState& s, std::span<const int32_t> prompt, int64_t gen_length, const LladaConfig& c) {
  FDLLM_CHECK_ARG(!prompt.empty(), "the prompt is empty (LLaDA needs at least one prompt token)");
  const int64_t total = static_cast<int64_t>(prompt.size()) + gen_length;
  FDLLM_CHECK_ARG(total <= c.max_sequence_length,
                  "prompt of {} tokens + gen_length {} = {} exceeds the model's max_sequence_length {}",
                  prompt.size(), gen_length, total, c.max_sequence_length);
  for (size_t i = 0; i < prompt.size(); ++i) {
    FDLLM_CHECK_ARG(prompt[i] >= 0 && prompt[i] < c.embedding_size,
                    "prompt token {} at position {} is outside the vocabulary [0, {})", prompt[i], i, c.embedding_size);
    FDLLM_CHECK_ARG(prompt[i] != c.mask_token_id,
                    "prompt position {} holds the mask token id {}; prompts must not contain masks", i,
                    c.mask_token_id);
  }
  s.prompt_len = static_cast<int64_t>(prompt.size());
  s.gen_length = gen_length;
  s.x.assign(prompt.begin(), prompt.end());
  s.x.resize(static_cast<size_t>(total), c.mask_token_id);
}

void begin_block(SequenceState& s, const BlockSchedule& sched, int32_t mask_id) {
  s.step_in_block = 0;
  s.block_quota.clear();
  if (sched.threshold) return;
  const int64_t b0 = s.block_begin(sched.block_length);
  const int64_t n_masked = std::count(s.x.begin() + b0, s.x.begin() + b0 + sched.block_length, mask_id);
  s.block_quota = quota_schedule(n_masked, sched.steps_per_block());
}

std::vector<int64_t> block_candidates(const SequenceState& s, int64_t block_length, int32_t mask_id) {
  std::vector<int64_t> cand;
  const int64_t b0 = s.block_begin(block_length);
  for (int64_t p = b0; p < b0 + block_length; ++p)
    if (s.x[static_cast<size_t>(p)] == mask_id) cand.push_back(p);
  return cand;
}

uint32_t noise_key(uint64_t seed, int64_t nfe, int64_t pos) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(nfe + 1) + static_cast<uint64_t>(pos);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

void TokenSelection::run(Backend& backend, Tensor logits, Tensor row_keys, const SelectParams& params,
                         std::vector<int32_t>& x0, std::vector<double>& conf) {
  const int64_t R = logits.rows();
  x0.resize(static_cast<size_t>(R));
  conf.resize(static_cast<size_t>(R));
  if (R == 0) return;
  if (rows_ < R) {
    const size_t pad = (static_cast<size_t>(R) * 4 + 255) / 256 * 256;
    buf_ = Buffer{};
    buf_ = backend.alloc(pad + static_cast<size_t>(R) * 8, "token selection outputs");
    x0_ = Tensor(buf_.data(), DType::kI32, backend.device(), {R});
    conf_ = Tensor(static_cast<char*>(buf_.data()) + pad, DType::kF64, backend.device(), {R});
    rows_ = R;
  }
  Tensor x0_dev = x0_.slice_rows(0, R), conf_dev = conf_.slice_rows(0, R);
  backend.select_tokens(logits, row_keys, params, x0_dev, conf_dev);
  backend.copy_to_host(x0.data(), x0_dev);
  backend.copy_to_host(conf.data(), conf_dev);
}

StepCommit commit_step(SequenceState& s, std::span<const int64_t> cand, std::span<const int32_t> x0,
                       std::span<const double> conf, std::span<const int32_t> keys, const BlockSchedule& sched,
                       Remasking remasking, uint64_t seed, BlockEnd end, int32_t mask_id) {
  StepCommit sc;
  sc.candidates.assign(cand.begin(), cand.end());
  if (remasking == Remasking::kRandom) {
    for (int32_t k : keys) sc.confidences.push_back(philox_uniform(seed, 1, static_cast<uint32_t>(k), 0xffffffffu));
  } else {
    sc.confidences.assign(conf.begin(), conf.end());
  }
  std::vector<int64_t> pick;
  if (sched.threshold) {
    pick = threshold_indices(sc.confidences, *sched.threshold);
  } else {
    FDLLM_CHECK_ARG(s.step_in_block < static_cast<int64_t>(s.block_quota.size()),
                    "sequence is at step {} of block {} but the block's quota schedule has {} steps (masks were "
                    "added to the block after it started?)",
                    s.step_in_block, s.block, s.block_quota.size());
    pick = top_k_indices(sc.confidences, s.block_quota[static_cast<size_t>(s.step_in_block)]);
  }
  std::sort(pick.begin(), pick.end());
  for (int64_t j : pick) {
    const int64_t pos = cand[static_cast<size_t>(j)];
    s.x[static_cast<size_t>(pos)] = x0[static_cast<size_t>(j)];
    sc.positions.push_back(pos);
    sc.tokens.push_back(x0[static_cast<size_t>(j)]);
  }
  s.nfe += 1;
  s.step_in_block += 1;
  // Threshold mode always runs until the block is full (it commits at least one token per step).
  bool block_done;
  if (end == BlockEnd::kWhenFull || sched.threshold) {
    const int64_t b0 = s.block_begin(sched.block_length);
    block_done = std::none_of(s.x.begin() + b0, s.x.begin() + b0 + sched.block_length,
                              [mask_id](int32_t t) { return t == mask_id; });
  } else {
    block_done = s.step_in_block == static_cast<int64_t>(s.block_quota.size());
  }
  if (block_done) {
    s.block += 1;
    if (s.block == sched.n_blocks())
      s.done = true;
    else
      begin_block(s, sched, mask_id);
  }
  return sc;
}

}  // namespace flashdllm
