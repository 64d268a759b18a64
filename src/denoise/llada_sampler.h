// The LLaDA sampler (reference §B; ML-GSAI/LLaDA generate.py) with full recompute every step,
// plus the confidence-threshold mode of Fast-dLLM's `generate` (reference §C, NVlabs/Fast-dLLM
// llada/generate.py with `threshold`).
//
// A canvas of gen_length MASK tokens follows each prompt and is decoded in semi-autoregressive
// blocks of block_length. Quota mode: each block gets steps / n_blocks forward passes and commits
// quota_schedule(#masks, steps per block)[i] tokens at step i, chosen by confidence (low_confidence)
// or at random (random). Threshold mode: each step commits every masked position of the block with
// confidence >= threshold, at least the most confident one, until the block is full (steps ignored).
//
// Batches: prompts of different lengths run together without padding (each sequence is its own
// attention tile), so a sequence's result does not depend on its batch mates.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "denoise/block_decoding.h"
#include "denoise/denoiser.h"
#include "model/llada.h"

namespace flashdllm {

struct LladaSamplerOptions {
  int64_t gen_length = 128;    ///< canvas length G (tokens generated)
  int64_t block_length = 32;   ///< semi-autoregressive block B; G % B == 0
  int64_t steps = 128;         ///< forward passes in quota mode; steps % (G / B) == 0
  double temperature = 0.0;    ///< Gumbel-max temperature (0 = greedy)
  double cfg_scale = 0.0;      ///< unsupervised classifier-free guidance w (0 = off)
  Remasking remasking = Remasking::kLowConfidence;
  std::optional<double> threshold;     ///< confidence-threshold mode ε in (0, 1]; nullopt = quota
  bool logits_eos_inf = false;         ///< forbid EOS (logit -inf) — LLaDA option
  /// LLaDA option: EOS and EOT get confidence 0 (transferred last in their block) at any temperature.
  /// With reference_quirks, upstream's ordering: at τ > 0 only EOT (reference §B quirk).
  bool confidence_eos_eot_inf = false;
  bool reference_quirks = false;       ///< reproduce upstream's confidence_eos_eot_inf ordering
  /// Confidence softmax precision: float64 (Fast-dLLM, and LLaDA's current generate.py) or
  /// float32 (the golden LLaDA traces; LLaDA softmaxes logits in their own dtype).
  bool confidence_f64 = true;
  uint64_t seed = 0;                   ///< noise seed (temperature > 0, random remasking)
  int32_t eot_token_id = -1;           ///< needed by confidence_eos_eot_inf; -1 = none
  /// Flash-dLLM row layout (reference §D.3): when > 0, the sequence continues past the canvas with
  /// EOS tokens up to floor((P + G) / tile) · tile + tile positions; the padding is visible context
  /// (keys) but never decoded. 0 = LLaDA's layout (prompt + canvas only).
  int64_t eos_pad_tile = 0;

  BlockSchedule schedule() const { return {gen_length, block_length, steps, threshold}; }
};

/// Validates options against the model: the block schedule (validate_block_schedule), cfg_scale >= 0,
/// eos_pad_tile >= 0, and that confidence_eos_eot_inf has an EOT id. Throws Error(kInvalidArgument)
/// naming the parameter.
void validate_sampler_options(const LladaSamplerOptions& o, const LladaConfig& cfg);

/// Called after every step with the sequence index in the batch, its state and the commit.
using StepObserver = std::function<void(size_t seq, const SequenceState&, const StepCommit&)>;

/// The LLaDA sampler. Two ways to drive it: step(batch) over states the caller owns (tests, the
/// golden traces), or the slot contract of denoiser.h over its own pool of slots (the engine).
/// Per-request parameters (gen_length, steps, threshold, temperature, seed) live in each
/// SequenceState, so one step may mix them; the options give the defaults of init_state(prompt).
class LladaSampler : public Denoiser {
 public:
  /// Without a pool the workspaces grow lazily for the largest batch step(batch) sees.
  LladaSampler(Backend& backend, const LladaModel& model, LladaSamplerOptions options);
  /// With a pool: workspaces for pool.n_slots slots of prompt + canvas <= pool.max_total_length
  /// (plus the eos_pad_tile padding), allocated now. Throws Error(kOutOfMemory) when they do not fit.
  LladaSampler(Backend& backend, const LladaModel& model, LladaSamplerOptions options, const SlotPool& pool);

  const LladaSamplerOptions& options() const noexcept { return opt_; }

  /// New state: prompt followed by gen_length masks (and the eos_pad_tile padding), the options'
  /// parameters. Throws Error(kInvalidArgument) for an empty prompt, a prompt holding the mask id or
  /// ids outside the vocabulary, or prompt + gen_length beyond max_sequence_length.
  SequenceState init_state(std::span<const int32_t> prompt) const;
  /// As init_state(prompt) with the request's own parameters (validated against the model).
  SequenceState init_state(std::span<const int32_t> prompt, const SlotParams& params) const;

  /// One denoising step (one forward over all sequences not yet done). Sequences whose block is
  /// complete move to the next block; a sequence is done after its last block. Returns one commit
  /// per sequence (empty for sequences that were already done).
  std::vector<StepCommit> step(std::vector<SequenceState>& batch);

  /// Runs every prompt to completion; returns the final states.
  std::vector<SequenceState> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const StepObserver& observer = {});

  // The slot contract (denoiser.h); needs the pool constructor.
  int64_t n_slots() const noexcept override { return slots_.size(); }
  void check_request(std::span<const int32_t> prompt, const SlotParams& p) const override;
  void admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) override;
  std::vector<SlotStep> step() override;
  void release(int64_t slot) override { slots_.release(slot); }
  bool active(int64_t slot) const noexcept override { return slots_.active(slot); }
  std::span<const int32_t> canvas(int64_t slot) const override { return state_canvas(slots_.at(slot, "LLaDA sampler")); }
  SlotOutput output(int64_t slot) const override;
  int64_t model_passes() const noexcept override { return passes_; }

 private:
  void ensure_capacity(int64_t tokens, int64_t logit_rows, int64_t tiles);
  int64_t padded_length(int64_t total) const noexcept;

  Backend& backend_;
  const LladaModel& model_;
  LladaSamplerOptions opt_;
  KvStore kv_;
  ForwardWorkspace ws_;
  TokenSelection selection_;
  BlockSlots<SequenceState> slots_;  // the pool (the slot contract)
  int64_t passes_ = 0;                 // forwards run by step()            // the pool's max prompt + canvas
};

}  // namespace flashdllm
