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
#include "model/model.h"

namespace flashdllm {

/// The LLaDA sampler runs `GenerateOptions` as they are (params.h, validated there): decode.cache
/// must be CacheMode::kNone; it reads decode.block_length (B, effective_block_length()), remasking,
/// cfg_scale, logits_eos_inf, confidence_eos_eot_inf (needs decode.eot_token_id, the EOT id the
/// engine resolves from the tokenizer), confidence_f32, reference_quirks and eos_pad_tile (the
/// Flash-dLLM row layout, §D.3: EOS padding after the canvas up to the next multiple of the tile,
/// visible as context, never decoded); `sampling` is the default request of init_state(prompt) and
/// generate().

/// Called after every step with the sequence index in the batch, its state and the commit.
using StepObserver = std::function<void(size_t seq, const SequenceState&, const StepCommit&)>;

/// The LLaDA sampler. Two ways to drive it: step(batch) over states the caller owns (tests, the
/// golden traces), or the slot contract of denoiser.h over its own pool of slots (the engine).
/// Per-request parameters (gen_length, steps, threshold, temperature, seed) live in each
/// SequenceState, so one step may mix them; options.sampling gives the defaults of init_state(prompt).
class LladaSampler : public Denoiser {
 public:
  /// Without a pool the workspaces grow lazily for the largest batch step(batch) sees. Validates
  /// the options (params.h validate, whole blocks) against the model; Error(kInvalidArgument).
  LladaSampler(Backend& backend, const Model& model, GenerateOptions options);
  /// With a pool: workspaces for pool.n_slots slots of prompt + canvas <= pool.max_total_length
  /// (plus the eos_pad_tile padding), allocated now. Validates options.decode only (the requests
  /// bring their own parameters). Throws Error(kOutOfMemory) when they do not fit.
  LladaSampler(Backend& backend, const Model& model, GenerateOptions options, const SlotPool& pool);

  const GenerateOptions& options() const noexcept { return opt_; }

  /// New state: prompt followed by gen_length masks (and the eos_pad_tile padding), the options'
  /// request (options.sampling, resolved: resolve_params). Throws Error(kInvalidArgument) for an empty prompt, a prompt
  /// holding the mask id or ids outside the vocabulary, or prompt + gen_length beyond max_sequence_length.
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
  const Model& model_;
  GenerateOptions opt_;
  int64_t B_ = 0;     // opt_.decode.effective_block_length()
  int32_t eot_ = -1;  // opt_.decode.eot_token_id, -1 = none
  KvStore kv_;
  ForwardWorkspace ws_;
  TokenSelection selection_;
  BlockSlots<SequenceState> slots_;  // the pool (the slot contract)
  int64_t passes_ = 0;                 // forwards run by step()            // the pool's max prompt + canvas
};

}  // namespace flashdllm
