// Fast-dLLM's cached denoisers (reference §C; NVlabs/Fast-dLLM llada/generate.py
// `generate_with_prefix_cache` and `generate_with_dual_cache`, llada/model/modeling_llada.py).
//
// Semi-autoregressive blocks as in LLaDA (§B). Every block starts with one full forward over the
// whole sequence (call kind 'F') whose logits make the block's first commit and whose per-layer
// K/V become the cache of that block:
//   * prefix cache: every further step of the block queries x[block_start:] (the current block and
//     all later masked blocks, call 'S'); keys = cached K/V of positions < block_start + fresh K/V
//     of the queried suffix.
//   * dual cache: every further step queries only the current block's block_length positions
//     (call 'B'); keys = the whole sequence: cached prefix, fresh block rows (they overwrite the
//     block's cached rows), cached later blocks.
// Under a logit shift (Dream: position p is predicted by output row p − 1, logits_source in
// block_decoding.h) the S and B calls start one position earlier, at block_start − 1, so that the
// block's first position has its row; that row's K/V is rewritten fresh like the block's.
// The cache is refreshed only by the next block's F call. Commits happen only inside the current
// block. Token choice per step: quota mode (threshold unset; steps / n_blocks steps per block with
// LLaDA's quota split) or threshold mode (commit {conf >= threshold} ∪ {top-1}); both loop until the
// block has no mask left (`while True` upstream), so NFE is the number of model calls actually made.
//
// K/V layout: the cache holds K **after** RoPE at each row's absolute position. Fast-dLLM caches K
// before RoPE and re-rotates the whole key sequence at every call with positions [end − q_len, end);
// with absolute positions that is the same rotation of the same vectors, so the two agree (up to
// where fp32 rounding happens).
//
// Batches: sequences of different prompt lengths share one forward per step; sequence i of the
// batch owns store rows [Σ_{j<i} L_j, Σ_{j<=i} L_j) of per-layer K/V stores (L_j = x.size()), so
// a step may mix F calls of some sequences with S/B calls of others, and a sequence's result does
// not depend on its batch mates. The batch must therefore keep its order and sequence lengths
// between the steps of a block; the sampler checks this and reports a clear error otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "denoise/denoiser.h"
#include "denoise/llada_sampler.h"
#include "model/model.h"

namespace flashdllm {

/// Model-call kinds, as the golden traces name them (tests/data/golden/README.upstream.md).
inline constexpr char kCallFull = 'F';    ///< whole sequence, refreshes the cache (block start)
inline constexpr char kCallSuffix = 'S';  ///< prefix cache: x[block_start:] over cached prefix K/V
inline constexpr char kCallBlock = 'B';   ///< dual cache: the current block over cached K/V of the rest

/// The cached samplers run `GenerateOptions` as they are (params.h, validated there):
/// decode.cache is CacheMode::kPrefix (`generate_with_prefix_cache`) or kDual
/// (`generate_with_dual_cache`); they read decode.block_length (B, effective_block_length()),
/// remasking (random = U(0,1) confidences) and confidence_f32 (Fast-dLLM softmaxes in float64);
/// `sampling` is the default request of init_state(prompt) and generate() (threshold set =
/// Fast-dLLM's `threshold` mode, unset = quota mode with steps).

/// One sequence under a cached denoiser: the LLaDA state plus its cache bookkeeping.
/// Between steps a caller may rewrite `x` at positions >= the current block start (teacher forcing
/// does); the cached rows keep what the block's F call computed until the next F call.
struct CachedSequenceState : SequenceState {
  std::string call_kinds;    ///< one letter per model call so far (kCallFull / kCallSuffix / kCallBlock)
  int64_t cache_block = -1;  ///< block whose F call filled this sequence's cache; -1 = none yet
  int64_t kv_offset = -1;    ///< first K/V store row of this sequence (set by the F call)
  uint64_t cache_epoch = 0;  ///< identifies the F call that wrote the rows (checked before reuse)
};

/// Observer called after every step with the sequence's batch index, state and commit. A lambda
/// taking `const SequenceState&` (LladaSampler's StepObserver) converts to it.
using CachedStepObserver = std::function<void(size_t seq, const CachedSequenceState&, const StepCommit&)>;

/// Fast-dLLM's cached samplers. Driven by step(batch) over caller-owned states (tests, golden
/// traces; sequence i owns the store rows after those of sequences 0..i−1), or by the slot contract
/// of denoiser.h over its own pool (slot j owns the store rows [j·S, (j+1)·S), S =
/// pool.max_total_length, so slots join and leave without moving anyone's cache). Per-request
/// parameters live in each state.
class FastDllmCacheSampler : public Denoiser {
 public:
  /// Validates the options (params.h validate, whole blocks; Error(kInvalidArgument)). Workspaces
  /// and the per-layer K/V stores are allocated lazily for the largest batch seen.
  FastDllmCacheSampler(Backend& backend, const Model& model, GenerateOptions options);
  /// With a pool: K/V stores and workspaces for pool.n_slots slots of prompt + canvas <=
  /// pool.max_total_length, allocated now (Error(kOutOfMemory) when they do not fit). Validates
  /// options.decode only (the requests bring their own parameters).
  FastDllmCacheSampler(Backend& backend, const Model& model, GenerateOptions options, const SlotPool& pool);

  const GenerateOptions& options() const noexcept { return opt_; }

  /// New state: prompt followed by gen_length masks, block 0, no cache. Throws
  /// Error(kInvalidArgument) for an empty prompt, a prompt holding the mask id or ids outside the
  /// vocabulary, or prompt + gen_length beyond max_sequence_length.
  CachedSequenceState init_state(std::span<const int32_t> prompt) const;
  /// As init_state(prompt) with the request's own parameters (validated against the model).
  CachedSequenceState init_state(std::span<const int32_t> prompt, const SlotParams& params) const;

  /// One denoising step: one model call per active sequence, all in one forward. A sequence at
  /// step_in_block 0 makes an F call (cache refresh + first commit of the block); otherwise an S
  /// (prefix) or B (dual) call against its cache. Appends the call kind to call_kinds, adds 1 to
  /// nfe, moves to the next block when the current one has no mask left, and is done after the
  /// last block. Returns one commit per sequence (empty for sequences already done). Throws
  /// Error(kInvalidArgument) when a sequence needs a cached call but its cache is missing, belongs
  /// to another block, or was overwritten (the batch changed order or lengths within a block).
  std::vector<StepCommit> step(std::vector<CachedSequenceState>& batch);

  /// Runs every prompt to completion (all in one batch); returns the final states.
  std::vector<CachedSequenceState> generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const CachedStepObserver& observer = {});

  // The slot contract (denoiser.h); needs the pool constructor.
  int64_t n_slots() const noexcept override { return slots_.size(); }
  void check_request(std::span<const int32_t> prompt, const SlotParams& p) const override;
  void admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) override;
  std::vector<SlotStep> step() override;
  void release(int64_t slot) override { slots_.release(slot); }
  bool active(int64_t slot) const noexcept override { return slots_.active(slot); }
  std::span<const int32_t> canvas(int64_t slot) const override { return state_canvas(slots_.at(slot, "Fast-dLLM cache")); }
  SlotOutput output(int64_t slot) const override;
  int64_t model_passes() const noexcept override { return passes_; }

 private:
  void ensure_capacity(int64_t store_rows, int64_t tokens, int64_t logit_rows, int64_t tiles);
  /// step(batch) with sequence i's store rows starting at base[i].
  std::vector<StepCommit> step_at(std::vector<CachedSequenceState>& batch, const std::vector<int64_t>& base,
                                  int64_t store_rows);

  Backend& backend_;
  const Model& model_;
  GenerateOptions opt_;
  int64_t B_ = 0;                      // opt_.decode.effective_block_length()
  bool prefix_ = false;                // opt_.decode.cache == CacheMode::kPrefix (else dual)
  KvStore kv_;                         // per-layer stores (the cache)
  std::vector<uint64_t> row_epoch_;    // [kv_.rows] epoch of the F call that last wrote each row
  uint64_t next_epoch_ = 1;
  ForwardWorkspace ws_;
  TokenSelection selection_;
  BlockSlots<CachedSequenceState> slots_;  // the pool (the slot contract)
  int64_t passes_ = 0;                 // forwards run by step()                  // store rows per slot = the pool's max prompt + canvas
};

}  // namespace flashdllm
