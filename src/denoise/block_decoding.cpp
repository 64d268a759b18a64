#include "denoise/block_decoding.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/philox.h"
#include "denoise/decode_rules.h"
#include "denoise/denoiser.h"

namespace flashdllm {

void validate_block_schedule(const BlockSchedule& o, double temperature, const ModelConfig& cfg, const char* source) {
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

void validate_state_params(const SequenceState& s, int64_t block_length, const ModelConfig& cfg, const char* source) {
  validate_block_schedule(s.schedule(block_length), s.temperature, cfg, source);
}

void set_state_params(SequenceState& s, const SlotParams& p) {
  s.steps = p.steps;
  s.threshold = p.threshold;
  s.temperature = p.temperature;
  s.seed = p.seed;
  s.logprobs = p.logprobs;
}

void attach_logprobs(Backend& backend, Tensor logits, size_t r0, std::span<const int64_t> cand, const SequenceState& s,
                     const LogprobIds& ids, StepCommit& c) {
  if (s.logprobs < 0) return;
  LogprobReader reader;
  for (size_t i = 0; i < c.positions.size(); ++i) {
    const auto it = std::lower_bound(cand.begin(), cand.end(), c.positions[i]);
    FDLLM_ASSERT_MSG(it != cand.end() && *it == c.positions[i], "logprobs: committed position {} is no candidate",
                     c.positions[i]);
    const auto row = static_cast<int64_t>(r0) + (it - cand.begin());
    reader.fetch(backend, logits.slice_rows(row, row + 1));
    c.logprobs.push_back(reader.at(0, c.tokens[i], s.logprobs, ids));
  }
}

void init_sequence(SequenceState& s, std::span<const int32_t> prompt, int64_t gen_length, const ModelConfig& c) {
  FDLLM_CHECK_ARG(!prompt.empty(), "the prompt is empty (the model needs at least one prompt token)");
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

namespace {

bool same_params(const SelectParams& a, const SelectParams& b) {
  return a.temperature == b.temperature && a.seed == b.seed && a.step == b.step &&
         a.suppress_token == b.suppress_token && a.exclude_token == b.exclude_token &&
         a.conf_suppress_a == b.conf_suppress_a && a.conf_suppress_b == b.conf_suppress_b &&
         a.confidence_f64 == b.confidence_f64;
}

}  // namespace

void append_select_segment(std::vector<SelectSegment>& segments, int64_t begin, int64_t end, const SelectParams& params) {
  if (end <= begin) return;
  if (!segments.empty() && segments.back().end == begin && same_params(segments.back().params, params)) {
    segments.back().end = end;
    return;
  }
  segments.push_back({begin, end, params});
}

void TokenSelection::reserve(Backend& backend, int64_t rows) {
  if (rows_ >= rows || rows <= 0) return;
  const size_t pad = (static_cast<size_t>(rows) * 4 + 255) / 256 * 256;
  buf_ = Buffer{};
  buf_ = backend.alloc(pad + static_cast<size_t>(rows) * 8, "token selection outputs");
  x0_ = Tensor(buf_.data(), DType::kI32, backend.device(), {rows});
  conf_ = Tensor(static_cast<char*>(buf_.data()) + pad, DType::kF64, backend.device(), {rows});
  rows_ = rows;
}

void TokenSelection::run(Backend& backend, Tensor logits, Tensor row_keys, const SelectParams& params,
                         std::vector<int32_t>& x0, std::vector<double>& conf) {
  const SelectSegment all{0, logits.rows(), params};
  run(backend, logits, row_keys, std::span<const SelectSegment>(&all, 1), x0, conf);
}

void TokenSelection::run(Backend& backend, Tensor logits, Tensor row_keys, std::span<const SelectSegment> segments,
                         std::vector<int32_t>& x0, std::vector<double>& conf) {
  const int64_t R = logits.rows();
  x0.resize(static_cast<size_t>(R));
  conf.resize(static_cast<size_t>(R));
  if (R == 0) return;
  reserve(backend, R);
  int64_t covered = 0;
  for (const SelectSegment& g : segments) {
    FDLLM_ASSERT_MSG(g.begin == covered && g.end > g.begin && g.end <= R, "select segments must cover [0, {}) in order",
                     R);
    backend.select_tokens(logits.slice_rows(g.begin, g.end), row_keys.slice_rows(g.begin, g.end), g.params,
                          x0_.slice_rows(g.begin, g.end), conf_.slice_rows(g.begin, g.end));
    covered = g.end;
  }
  FDLLM_ASSERT_MSG(covered == R, "select segments cover {} of {} rows", covered, R);
  backend.copy_to_host(x0.data(), x0_.slice_rows(0, R));
  backend.copy_to_host(conf.data(), conf_.slice_rows(0, R));
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

std::span<const int32_t> state_canvas(const SequenceState& s) {
  if (s.x.empty()) return {};
  return std::span<const int32_t>(s.x).subspan(static_cast<size_t>(s.gen_begin()), static_cast<size_t>(s.gen_length));
}

SlotOutput state_output(const SequenceState& s) {
  SlotOutput o;
  const auto c = state_canvas(s);
  o.canvas.assign(c.begin(), c.end());
  o.nfe = s.nfe;
  o.committed = s.gen_length;
  o.committed_reference = s.gen_length;
  o.forward_passes = s.nfe;
  return o;
}

SlotStep slot_step_of(int64_t slot, const SequenceState& s, const StepCommit& c) {
  SlotStep st;
  st.slot = slot;
  for (size_t i = 0; i < c.positions.size(); ++i) {
    st.positions.push_back(static_cast<int32_t>(c.positions[i] - s.gen_begin()));
    st.tokens.push_back(c.tokens[i]);
  }
  st.logprobs = c.logprobs;
  st.finished = s.done;
  st.error = c.error;
  return st;
}

}  // namespace flashdllm
