// Dream's sampler (Dream-org Dream-v0 `generation_utils.py`, DreamGenerationMixin._sample; reference
// for the Dream family in docs/decisions.md) with full recompute every step.
//
// A canvas of gen_length MASK tokens follows each prompt and is decoded as a whole (no blocks) in
// `steps` forward passes. timesteps t = linspace(1, eps, steps + 1); step i commits
// k = int(n_masked · (1 − t[i+1]/t[i])) masked positions (all that are left at the last step):
//  * alg maskgit_plus / topk_margin / entropy: each masked position gets a token x0 and a confidence
//    from softmax(filter(logits / T)) (SelectParams::dream_rule) and the k most confident commit
//    (alg_temp > 0: k positions drawn from softmax(confidence / alg_temp) without replacement);
//  * alg origin: each masked position commits with probability 1 − t[i+1]/t[i] (1 at the last step).
// The model's logit shift (ModelConfig: Dream reads the logits of position p from row p − 1) is
// applied when the logits rows are chosen, so the same code runs unshifted families.
//
// Random draws (temperature > 0, origin, alg_temp > 0) come from the counter-based Philox keyed by
// the request's seed, its step and the position: the distributions are upstream's, the draws are not
// torch's. A request is done after `steps` passes or as soon as no mask is left (upstream keeps
// running forwards that change nothing; the output is the same).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "denoise/block_decoding.h"
#include "denoise/denoiser.h"
#include "model/model.h"

namespace flashdllm {

/// One sequence under Dream's sampler: SequenceState's canvas and request fields (block stays 0,
/// step_in_block counts the steps taken) plus the request's filtering.
struct DreamState : SequenceState {
  double top_p = 1.0;
  int64_t top_k = 0;
  std::vector<float> timesteps;  ///< dream_timesteps(steps, timestep_eps): steps + 1 values, made once
};

/// Dream's sampler runs `GenerateOptions` as they are (params.h, validated there): decode.cache none,
/// decode.sampler dream (set by the constructor when auto), decode.dream_alg, alg_temp, timestep_eps;
/// per request steps (default gen_length), temperature, top_p, top_k, seed.
class DreamSampler : public Denoiser {
 public:
  /// Without a pool (step(batch) over states the caller owns; workspaces grow lazily). Throws
  /// Error(kInvalidArgument) naming the parameter for settings the sampler cannot run.
  DreamSampler(Backend& backend, const Model& model, GenerateOptions options);
  /// With a pool: workspaces for pool.n_slots slots of prompt + canvas <= pool.max_total_length,
  /// allocated now (every masked position is a logits row: n_slots × the longest canvas rows).
  /// Throws Error(kOutOfMemory) when they do not fit.
  DreamSampler(Backend& backend, const Model& model, GenerateOptions options, const SlotPool& pool);

  const GenerateOptions& options() const noexcept { return opt_; }

  /// New state: prompt followed by gen_length masks, the options' request (resolve_params).
  /// Throws Error(kInvalidArgument) for an empty prompt, a prompt holding the mask id or ids outside
  /// the vocabulary, prompt + gen_length beyond max_sequence_length, or steps outside [1, gen_length].
  DreamState init_state(std::span<const int32_t> prompt) const;
  DreamState init_state(std::span<const int32_t> prompt, const SlotParams& params) const;

  /// One step (one forward over every sequence not yet done); one commit per sequence (empty for
  /// sequences already done). StepCommit::candidates are the masked positions, confidences theirs
  /// (origin: the uniforms that decided).
  std::vector<StepCommit> step(std::vector<DreamState>& batch);

  /// Runs every prompt to completion; returns the final states.
  std::vector<DreamState> generate(
      const std::vector<std::vector<int32_t>>& prompts,
      const std::function<void(size_t, const DreamState&, const StepCommit&)>& observer = {});

  // The slot contract (denoiser.h); needs the pool constructor.
  int64_t n_slots() const noexcept override { return slots_.size(); }
  void check_request(std::span<const int32_t> prompt, const SlotParams& p) const override;
  void admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) override;
  std::vector<SlotStep> step() override;
  void release(int64_t slot) override { slots_.release(slot); }
  bool active(int64_t slot) const noexcept override { return slots_.active(slot); }
  std::span<const int32_t> canvas(int64_t slot) const override {
    return state_canvas(slots_.at(slot, "Dream sampler"));
  }
  SlotOutput output(int64_t slot) const override { return state_output(slots_.at(slot, "Dream sampler")); }
  int64_t model_passes() const noexcept override { return passes_; }

 private:
  void ensure_capacity(int64_t tokens, int64_t logit_rows, int64_t tiles);
  SelectParams select_params(const DreamState& s) const;
  StepCommit commit(DreamState& s, std::span<const int64_t> cand, std::span<const int32_t> x0,
                    std::span<const double> conf) const;

  Backend& backend_;
  const Model& model_;
  GenerateOptions opt_;
  KvStore kv_;
  ForwardWorkspace ws_;
  TokenSelection selection_;
  BlockSlots<DreamState> slots_;
  int64_t passes_ = 0;
};

}  // namespace flashdllm
