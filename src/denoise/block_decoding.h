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
#include "model/llada.h"

namespace flashdllm {

enum class Remasking { kLowConfidence, kRandom };

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
void validate_block_schedule(const BlockSchedule& s, double temperature, const LladaConfig& cfg, const char* source);

/// One sequence being denoised.
struct SequenceState {
  std::vector<int32_t> x;  ///< prompt + canvas (mask_token_id where undecoded) [+ EOS padding]
  int64_t prompt_len = 0;
  int64_t gen_length = 0;            ///< canvas length G; x.size() >= prompt_len + G
  int64_t block = 0;                 ///< current block index
  int64_t step_in_block = 0;         ///< steps already taken in the current block
  std::vector<int64_t> block_quota;  ///< quota mode: tokens to commit at each step of the block
  int64_t nfe = 0;                   ///< forward passes this sequence took part in
  bool done = false;

  int64_t gen_begin() const noexcept { return prompt_len; }
  int64_t gen_end() const noexcept { return prompt_len + gen_length; }
  int64_t block_begin(int64_t block_length) const noexcept { return prompt_len + block * block_length; }
};

/// What one step did to one sequence: committed positions (absolute, ascending) and tokens, plus
/// the decision's inputs: every candidate position of the step and its confidence (for margins).
struct StepCommit {
  std::vector<int64_t> positions;
  std::vector<int32_t> tokens;
  std::vector<int64_t> candidates;
  std::vector<double> confidences;
};

/// Fills `s` with prompt + G masks after checking the prompt: non-empty, ids in the vocabulary, no
/// mask id, prompt + G <= max_sequence_length. Throws Error(kInvalidArgument) naming the position.
void init_sequence(SequenceState& s, std::span<const int32_t> prompt, int64_t gen_length, const LladaConfig& cfg);

/// Starts the current block: step_in_block = 0 and, in quota mode, the block's quota schedule from
/// the number of masks it holds now (LLaDA get_num_transfer_tokens).
void begin_block(SequenceState& s, const BlockSchedule& sched, int32_t mask_id);

/// Masked positions of the current block (absolute, ascending): the step's decode candidates.
std::vector<int64_t> block_candidates(const SequenceState& s, int64_t block_length, int32_t mask_id);

/// 32-bit Gumbel/remasking noise key of (sequence's step counter, position), mixed with the seed
/// (splitmix64 finaliser): independent draws per step and position, whatever the batch holds.
uint32_t noise_key(uint64_t seed, int64_t nfe, int64_t pos);

/// Device buffers for select_tokens results and the copy back of R ids and confidences.
class TokenSelection {
 public:
  /// Runs backend.select_tokens on logits [R, V] and returns the R ids and confidences on the host
  /// (growing the device buffers when R exceeds them). R = 0 returns empty vectors.
  void run(Backend& backend, Tensor logits, Tensor row_keys, const SelectParams& params, std::vector<int32_t>& x0,
           std::vector<double>& conf);

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
    if (observer)
      for (size_t i = 0; i < batch.size(); ++i)
        if (!was_done[i]) observer(i, batch[i], commits[i]);
  }
  return batch;
}

}  // namespace flashdllm
