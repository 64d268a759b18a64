// Pieces shared by the semi-autoregressive samplers (LLaDA generate.py and Fast-dLLM's cached
// variants; reference §B, §C): option and prompt checks, the per-block schedule, noise keys,
// token selection on the device, and the commit step of one sequence.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/check.h"
#include "denoise/denoiser.h"
#include "denoise/token_logprobs.h"
#include "flashdllm/params.h"  // Remasking
#include "model/model.h"

namespace flashdllm {

/// The block schedule of a semi-autoregressive sampler.
struct BlockSchedule {
  int64_t gen_length = 128;         ///< canvas length G
  int64_t block_length = 32;        ///< block B; G % B == 0
  int64_t steps = 128;              ///< quota mode: forward passes per request; steps % (G / B) == 0
  std::optional<double> threshold;  ///< threshold mode ε in (0, 1]; nullopt = quota mode

  int64_t n_blocks() const noexcept { return gen_length / block_length; }
  int64_t steps_per_block() const noexcept { return steps / n_blocks(); }
};

/// Checks a schedule and a temperature against the model (G > 0, B > 0, G % B == 0; quota mode:
/// steps > 0 divisible by G / B; threshold in (0, 1]; temperature >= 0; G < max_sequence_length).
/// `source` names the reference that asserts the same ("LLaDA generate.py", ...).
/// Throws Error(kInvalidArgument) naming the parameter.
void validate_block_schedule(const BlockSchedule& s, double temperature, const ModelConfig& cfg, const char* source);



/// The position whose output row holds the logits of position `p`: p − 1 under the model's logit
/// shift (ModelConfig::logit_shift; Dream's generation_utils.py `cat([logits[:, :1], logits[:, :-1]], 1)`,
/// so the first canvas position reads the last prompt token's row), else p. Every denoiser maps its
/// logits rows and widens its query sets through this one function; p >= 1 wherever it is used
/// (candidates lie after a non-empty prompt).
inline int64_t logits_source(bool logit_shift, int64_t p) noexcept { return logit_shift ? p - 1 : p; }
inline int64_t logits_source(const ModelConfig& cfg, int64_t p) noexcept { return logits_source(cfg.logit_shift, p); }

/// One sequence being denoised, with its own decoding parameters (a batch may mix them).
struct SequenceState {
  std::vector<int32_t> x;  ///< prompt + canvas (mask_token_id where undecoded) [+ EOS padding]
  int64_t prompt_len = 0;
  int64_t gen_length = 0;            ///< canvas length G; x.size() >= prompt_len + G
  int64_t block = 0;                 ///< current block index
  int64_t step_in_block = 0;         ///< steps already taken in the current block
  std::vector<int64_t> block_quota;  ///< quota mode: tokens to commit at each step of the block
  int64_t nfe = 0;                   ///< forward passes this sequence took part in
  bool done = false;
  // The request's parameters (the sampler's options unless it was admitted with its own).
  int64_t steps = 0;                 ///< quota mode: forward passes over the canvas
  std::optional<double> threshold;   ///< threshold mode ε; nullopt = quota mode
  double temperature = 0.0;          ///< Gumbel-max temperature
  uint64_t seed = 0;                 ///< noise seed
  int64_t logprobs = -1;             ///< SlotParams::logprobs: -1 none, else top alternatives per token

  int64_t gen_begin() const noexcept { return prompt_len; }
  int64_t gen_end() const noexcept { return prompt_len + gen_length; }
  int64_t block_begin(int64_t block_length) const noexcept { return prompt_len + block * block_length; }
  BlockSchedule schedule(int64_t block_length) const { return {gen_length, block_length, steps, threshold}; }
};

/// What one step did to one sequence: committed positions (absolute, ascending) and tokens, plus
/// the decision's inputs: every candidate position of the step and its confidence (for margins).
struct StepCommit {
  std::vector<int64_t> positions;
  std::vector<int32_t> tokens;
  std::vector<int64_t> candidates;
  std::vector<double> confidences;
  /// The sequence asked for logprobs (SequenceState::logprobs >= 0): one per committed position
  /// (attach_logprobs), same order.
  std::vector<TokenLogprob> logprobs;
  /// Non-empty: the sequence's logits were not finite, nothing was committed and the sequence is
  /// done (SlotStep::error; a batch generate() throws Error(kInvalidCheckpoint, error)).
  std::string error;
};

/// The parameters of state `s` as a schedule for blocks of block_length, validated like
/// validate_block_schedule.
void validate_state_params(const SequenceState& s, int64_t block_length, const ModelConfig& cfg, const char* source);

/// Fills `s` with prompt + G masks after checking the prompt: non-empty, ids in the vocabulary, no
/// mask id, prompt + G <= max_sequence_length. Throws Error(kInvalidArgument) naming the position.
void init_sequence(SequenceState& s, std::span<const int32_t> prompt, int64_t gen_length, const ModelConfig& cfg);

/// Starts the current block: step_in_block = 0 and, in quota mode, the block's quota schedule from
/// the number of masks it holds now (LLaDA get_num_transfer_tokens).
void begin_block(SequenceState& s, const BlockSchedule& sched, int32_t mask_id);

/// Masked positions of the current block (absolute, ascending): the step's decode candidates.
std::vector<int64_t> block_candidates(const SequenceState& s, int64_t block_length, int32_t mask_id);

/// 32-bit Gumbel/remasking noise key of (sequence's step counter, position), mixed with the seed
/// (splitmix64 finaliser): independent draws per step and position, whatever the batch holds.
uint32_t noise_key(uint64_t seed, int64_t nfe, int64_t pos);

/// Consecutive logits rows [begin, end) selected with one SelectParams (the rows of requests with
/// equal temperature and seed).
struct SelectSegment {
  int64_t begin = 0, end = 0;
  SelectParams params;
};

/// Appends rows [begin, end) with `params` to `segments`, merging with the last segment when it
/// ends at `begin` with equal parameters (so a uniform batch is one select call).
void append_select_segment(std::vector<SelectSegment>& segments, int64_t begin, int64_t end, const SelectParams& params);

/// Device buffers for select_tokens results and the copy back of R ids and confidences.
class TokenSelection {
 public:
  /// Preallocates room for `rows` rows (the pool's bound; run() grows past it only when asked for more).
  void reserve(Backend& backend, int64_t rows);
  /// Runs backend.select_tokens on logits [R, V] and returns the R ids and confidences on the host
  /// (growing the device buffers when R exceeds them). R = 0 returns empty vectors.
  void run(Backend& backend, Tensor logits, Tensor row_keys, const SelectParams& params, std::vector<int32_t>& x0,
           std::vector<double>& conf);
  /// As run(), one select_tokens call per segment (segments cover [0, R) in order).
  void run(Backend& backend, Tensor logits, Tensor row_keys, std::span<const SelectSegment> segments,
           std::vector<int32_t>& x0, std::vector<double>& conf);

 private:
  Buffer buf_;
  Tensor x0_, conf_;
  int64_t rows_ = 0;
};

/// When a block is finished: after its quota steps (LLaDA) or once it holds no mask (Fast-dLLM).
enum class BlockEnd { kAfterQuotaSteps, kWhenFull };

/// The commit of one sequence in one step (reference §B low-confidence / random remasking, §C
/// threshold rule): confidences are `conf` (or Philox uniforms keyed by `keys` for random
/// remasking); quota mode commits the block quota's count, threshold mode {c >= ε} ∪ {top-1};
/// x is updated, nfe / step counters advance, the block (and the sequence) end per `end`.
/// cand, x0, conf, keys: one entry per candidate. Throws Error(kInvalidArgument) when a quota step
/// is missing (masks added to a block after it started).
StepCommit commit_step(SequenceState& s, std::span<const int64_t> cand, std::span<const int32_t> x0,
                       std::span<const double> conf, std::span<const int32_t> keys, const BlockSchedule& sched,
                       Remasking remasking, uint64_t seed, BlockEnd end, int32_t mask_id);

/// When s.logprobs >= 0: fills c.logprobs for c's committed positions from `logits`, where candidate
/// cand[k] (ascending, absolute positions) has logits row r0 + k (token_logprobs.h: each committed
/// row is copied to the host and reduced there). A no-op otherwise.
void attach_logprobs(Backend& backend, Tensor logits, size_t r0, std::span<const int64_t> cand, const SequenceState& s,
                     const LogprobIds& ids, StepCommit& c);

/// Per-request fields of `s` from SlotParams (steps, threshold, temperature, seed).
void set_state_params(SequenceState& s, const SlotParams& p);

/// The canvas positions of `s` (empty for a state without rows).
std::span<const int32_t> state_canvas(const SequenceState& s);
/// SlotOutput of a block-sampler state: the canvas, nfe, committed = gen_length.
SlotOutput state_output(const SequenceState& s);
/// The SlotStep of a state that took part in a step: positions relative to the canvas, finished = done.
SlotStep slot_step_of(int64_t slot, const SequenceState& s, const StepCommit& commit);

/// SlotSteps of the slots that were active before a step(batch) over the pool.
template <class State>
std::vector<SlotStep> slot_steps_of(const std::vector<State>& slots, const std::vector<StepCommit>& commits,
                                    const std::vector<bool>& was_active) {
  std::vector<SlotStep> out;
  for (size_t j = 0; j < slots.size(); ++j)
    if (was_active[j]) out.push_back(slot_step_of(static_cast<int64_t>(j), slots[j], commits[j]));
  return out;
}

/// The slot pool both block samplers keep for the slot contract (denoiser.h): one state per slot,
/// a free slot being a done state without rows; the pool admits prompt + canvas <= max_total.
template <class State>
struct BlockSlots {
  std::vector<State> states;
  int64_t max_total = 0;

  void reset(int64_t n_slots, int64_t max_total_length) {
    states.assign(static_cast<size_t>(n_slots), State{});
    for (State& s : states) s.done = true;
    max_total = max_total_length;
  }
  int64_t size() const noexcept { return static_cast<int64_t>(states.size()); }
  bool active(int64_t j) const noexcept { return j >= 0 && j < size() && !states[static_cast<size_t>(j)].done; }
  void release(int64_t j) {
    if (j < 0 || j >= size()) return;
    states[static_cast<size_t>(j)] = State{};
    states[static_cast<size_t>(j)].done = true;
  }
  /// The state of slot j; Error(kInvalidArgument) naming `who` for a slot outside the pool.
  const State& at(int64_t j, const char* who) const {
    if (j < 0 || j >= size()) throw_error(ErrorCode::kInvalidArgument, fmt::format("{}: no slot {}", who, j));
    return states[static_cast<size_t>(j)];
  }
  std::vector<bool> active_mask() const {
    std::vector<bool> m(states.size());
    for (size_t j = 0; j < states.size(); ++j) m[j] = !states[j].done;
    return m;
  }
  /// Refuses a request longer than the pool's slots (and any request without a pool).
  void check_fits(std::span<const int32_t> prompt, const SlotParams& p, const char* who) const {
    if (states.empty())
      throw_error(ErrorCode::kInvalidArgument, fmt::format("{}: no slot pool (construct it with a SlotPool)", who));
    const int64_t total = static_cast<int64_t>(prompt.size()) + p.gen_length;
    if (total > max_total)
      throw_error(ErrorCode::kInvalidArgument,
                  fmt::format("prompt of {} tokens + gen_length {} = {} exceeds the {} positions a slot of this "
                              "engine holds (max_model_len)",
                              prompt.size(), p.gen_length, total, max_total));
  }
};

/// The generate loop of a step-wise sampler: init_state for every prompt, then step() until every
/// sequence is done; `observer(i, state, commit)` (if set) sees each sequence that took part in a step.
template <class State, class Sampler, class Observer>
std::vector<State> run_to_completion(Sampler& sampler, const std::vector<std::vector<int32_t>>& prompts,
                                     const Observer& observer) {
  std::vector<State> batch;
  batch.reserve(prompts.size());
  for (const auto& p : prompts) batch.push_back(sampler.init_state(p));
  std::vector<bool> was_done(batch.size());
  while (std::any_of(batch.begin(), batch.end(), [](const State& s) { return !s.done; })) {
    for (size_t i = 0; i < batch.size(); ++i) was_done[i] = batch[i].done;
    std::vector<StepCommit> commits = sampler.step(batch);
    for (const StepCommit& c : commits) FDLLM_CHECK(c.error.empty(), ErrorCode::kInvalidCheckpoint, "{}", c.error);
    if (observer)
      for (size_t i = 0; i < batch.size(); ++i)
        if (!was_done[i]) observer(i, batch[i], commits[i]);
  }
  return batch;
}

}  // namespace flashdllm
