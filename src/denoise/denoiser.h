// The slot contract every denoiser implements (design guide, practice 10): a fixed pool of slots
// sized once at construction (K/V stores and workspaces included), admit(slot, request) starts a
// request in a free slot, step() runs one iteration (one forward, plus Flash-Verify's verify pass)
// over every active slot and reports what each slot committed, release(slot) frees a slot whether
// its request finished or was cancelled. A denoiser never owns a queue: the request queue,
// admission order, cancellation and the stop rules live in the scheduler (src/engine/scheduler.h).
//
// Invariants every implementation keeps:
//  * no device allocation after construction: admit() refuses what the pool cannot hold
//    (check_request) and step() runs inside the preallocated workspaces;
//  * a slot's results depend only on its own request (prompt, parameters): never on which other
//    slots are active, when they were admitted or how many there are (batch invariance; exact on
//    the CPU backend, bf16 rounding aside on CUDA where the GEMM shape can change the kernel);
//  * no committed canvas position is the mask id: the token selection never proposes it, and
//    step() raises Error(kInternal) rather than commit one;
//  * a request whose logits rows are not finite (NaN / Inf weights, or an input that overflows
//    them) fails alone: its SlotStep carries the error and finishes it; the other slots' iteration
//    goes on (slots never attend to each other, so one slot's NaN cannot reach another).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashdllm/params.h"
#include "flashdllm/request.h"

namespace flashdllm {

struct ModelConfig;

/// A request's SamplingParams (params.h) as a denoiser runs them: resolved under the engine's
/// DecodeSettings by resolve_params, the one place that applies their defaults (steps, threshold)
/// and the canvas rounding; no defaults of its own.
struct SlotParams {
  int64_t gen_length = 0;           ///< canvas length G
  int64_t steps = 0;                ///< quota mode (block samplers without a threshold): forward passes
  std::optional<double> threshold;  ///< confidence threshold ε; flash: always set
  double temperature = 0.0;         ///< Gumbel-max temperature (0 = greedy)
  uint64_t seed = 0;                ///< noise seed
  double top_p = 1.0;               ///< Dream's sampler: nucleus filtering (1 = off)
  int64_t top_k = 0;                ///< Dream's sampler: top-k filtering (0 = off)
  int64_t logprobs = -1;            ///< SamplingParams::logprobs: -1 none, else top alternatives per token
};

/// A request's SlotParams under `d` (d.sampler resolved: effective_sampler): the canvas is gen_length
/// (exact_blocks, flash, or Dream's sampler) or gen_length rounded up to the block (the block samplers
/// need whole blocks); steps default to effective_steps, the threshold to effective_threshold (params.h).
SlotParams resolve_params(const SamplingParams& s, const DecodeSettings& d, bool exact_blocks);

/// What one iteration did to one active slot.
struct SlotStep {
  int64_t slot = 0;
  std::vector<int32_t> positions;  ///< canvas positions committed (0 = the first canvas position), ascending
  std::vector<int32_t> tokens;     ///< their tokens
  std::vector<int32_t> verified;   ///< Flash-Verify: the positions accepted by the verify pass (ascending)
  /// SlotParams::logprobs >= 0: one per committed position (same order), TokenLogprob's definition.
  std::vector<TokenLogprob> logprobs;
  bool finished = false;           ///< nothing is left to decode: output() is final, release() is next
  /// Non-empty: this slot's logits were not finite in this iteration, nothing was committed, the
  /// request fails (alone) with Error(kInvalidCheckpoint, error); finished is true, release() is next.
  std::string error;
};

/// A slot's request as the denoiser reports it (final once a step said finished).
struct SlotOutput {
  /// The generated ids: LLaDA / Fast-dLLM the whole canvas (MASK where undecoded); Flash-Cache
  /// x[P : stop) (up to and including the finishing EOS; reference_quirks: the released x[P : nd]).
  std::vector<int32_t> canvas;
  int64_t nfe = 0;                  ///< iterations the request took part in
  int64_t committed = 0;            ///< canvas positions committed (flash: stop − P)
  int64_t committed_reference = 0;  ///< the released code's count (flash: nd − P); = committed otherwise
  int64_t forward_passes = 0;       ///< model passes incl. Flash-Verify's
  int64_t verify_candidates = 0;    ///< Flash-Verify drafts checked
  int64_t verify_accepted = 0;      ///< Flash-Verify drafts accepted
  std::string call_kinds;           ///< Fast-dLLM: one letter per model call (F / S / B)
};

/// Host wall time of one phase of a denoiser's steps (steady clock, summed over every step since the
/// pool was made). A phase that waits for device results ("... wait") holds the device time the host
/// could not hide; the others are host work (on the CPU backend the forward calls also compute).
struct StepPhase {
  const char* name = "";  ///< static string, e.g. "main forward call"
  double seconds = 0.0;
};

/// The size of a slot pool.
struct SlotPool {
  int64_t n_slots = 1;           ///< concurrent requests
  int64_t max_total_length = 0;  ///< the longest prompt + gen_length (canvas) any admitted request may have
  /// Full-recompute and Fast-dLLM forwards: a bound on the query rows of one step (Σ over the
  /// active slots of prompt + canvas [+ padding]); 0 = n_slots × the longest row. Batch callers
  /// that know their requests pass the exact bound (smaller workspaces).
  int64_t max_step_rows = 0;
};

class Denoiser {
 public:
  virtual ~Denoiser() = default;

  virtual int64_t n_slots() const noexcept = 0;
  /// Throws Error(kInvalidArgument) naming the limit when `prompt` with `p` can never be admitted
  /// to this pool (empty prompt, ids outside the vocabulary or the mask id, too long for the pool or
  /// the model, parameters the mode cannot run).
  virtual void check_request(std::span<const int32_t> prompt, const SlotParams& p) const = 0;
  /// Starts a request in the free slot `slot` (check_request first). Its first step prefills.
  virtual void admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) = 0;
  /// One iteration over every active slot; one SlotStep per active slot, in slot order (a slot with
  /// non-finite logits gets SlotStep::error). Throws Error for a failure of the whole iteration (a
  /// device error); the pool's state is then undefined for the active slots (release them).
  virtual std::vector<SlotStep> step() = 0;
  /// Frees `slot` (a finished or a cancelled request). A no-op for a free slot.
  virtual void release(int64_t slot) = 0;
  virtual bool active(int64_t slot) const noexcept = 0;
  /// The slot's current canvas: gen_length ids, the mask id where undecoded.
  virtual std::span<const int32_t> canvas(int64_t slot) const = 0;
  /// The slot's request so far (final after its finishing step).
  virtual SlotOutput output(int64_t slot) const = 0;
  /// Model forward calls made so far (Flash-Verify passes and slot-group splits included).
  virtual int64_t model_passes() const noexcept = 0;
  /// Where the steps' host time went, phase by phase, in step order (empty: not timed by this mode).
  /// Read by the scheduler between steps (the stepping thread).
  virtual std::vector<StepPhase> step_phases() const { return {}; }
};

/// Checks a prompt for any denoiser: non-empty, ids in [0, embedding_size), no mask id. Throws
/// Error(kInvalidArgument) naming the position.
void check_prompt_ids(std::span<const int32_t> prompt, const ModelConfig& cfg);

/// Checks a selection of R rows (x0 I32 [R] or empty, conf F64 [R], as the token selection returned
/// them): raises Error(kInternal) when a row with a finite confidence proposed no token or the mask
/// id. Returns the rows whose confidence is not finite (the model produced NaN / Inf logits for
/// them), ascending; the caller fails their requests alone (nonfinite_error, SlotStep::error).
std::vector<size_t> check_selection(std::span<const int32_t> x0, std::span<const double> conf, int32_t mask_id,
                                    const char* where);

/// The SlotStep::error of a request whose logits rows are [begin, end) when one of them is in `bad`
/// (check_selection's list; conf the same confidences), else "".
std::string nonfinite_error(std::span<const size_t> bad, std::span<const double> conf, size_t begin, size_t end,
                            const char* where);

}  // namespace flashdllm
