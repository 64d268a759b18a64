// Flash-Cache denoiser: Flash-dLLM's elastic KV cache (reference-algorithms.md §D.2–D.7, D.9;
// VILA-Lab/Flash-dLLM llada/generate.py `generate_with_Flash_dLLM` and llada/flash_cache_triton.py
// `flash_fused_elastic_cache`). With options.verify the same loop runs Flash-Verify (§D.8): after
// each iteration's commit a verify pass checks further drafts of the window; its pieces, semantics
// and deviations are documented in denoise/flash_verify.h.
//
// Layout (§D.2, D.3). One run serves a list of prompts with n_slots concurrent slots. Every slot j
// owns the flat K/V store rows [j·L_max, (j+1)·L_max) of every layer (K stored after RoPE), with
// L_max = (floor((max_P + G + bm) / 128) + 1) · 128 over all prompts of the run. A slot row holds
// prompt | G masks | EOS padding; its keys are always [0, seqlen_k) with
// seqlen_k = floor((P + G) / 128) · 128 + 128. Positions in this file are slot-relative
// (t ∈ [0, L_max)); the store row of t is j·L_max + t, its RoPE position is t.
//
// full_pos (per slot) is a permutation of [0, L_max) kept as
//   [ decoded positions, ranked | undecoded: window (last confidence order), then the rest in natural order ]
// with the boundary at num_decoded (nd; the prompt counts as decoded).
//
// One iteration (§D.4–D.7), for all active slots in one forward:
//  * masked window W = full_pos[nd : nd + bm]: query rows and decode candidates;
//  * tracked set = full_pos[max(0, nd − β_t) : nd] (the newest commits plus the decoded positions with
//    the highest attention importance, prompt included) ++ full_pos[nd + bm : min(seqlen_k, nd + β_m)]
//    (look-ahead masks); β_t = track_num·bm, β_m = mask_num·bm; track_num < 0: every other position
//    in [0, seqlen_k) (full recompute). A new or refilled slot queries all of [0, seqlen_k) (prefill).
//  * query rows [W_0 T_0 | W_1 T_1 | …] (each active slot's window, then its tracked set; upstream puts
//    all windows first, and any order gives the same results since each row only depends on its own
//    token and the keys), store rows j·L_max + t, one attention tile per slot over both (a window tile
//    and tracked tiles of query_tile_rows rows when that is set; upstream cuts at block_length), keys
//    [j·L_max, j·L_max + seqlen_k); the importance scores each slot's window rows. Every query row
//    writes fresh K/V before any attention of the layer reads the store, so queried positions see each other fresh and
//    all other positions stale (their K/V of the last pass that queried them).
//  * attention importance a_t (§D.6): Σ over layers >= 2 of the mean over the bm window rows and the
//    heads of raw q·k (or of attention probabilities, option), accumulated for every key.
//  * per slot: confidence c = max softmax (float64) of the window's logits, token = argmax; commit
//    (threshold rule: all c >= ε, at least the top one; fixed-count rule: the n most confident);
//    the first iteration that commits any EOS sets the stop (predicted length) to the largest EOS
//    position it committed + 1; the slot finishes when every position < stop is decoded, and is
//    refilled from the queue in the same iteration (continuous batching). Otherwise the older
//    decoded positions are re-ranked by a_t ascending (highest just before the newest commits).
//
// Fixes of released-code bugs (default) and `reference_quirks` (reproduces them, for parity runs):
//  * EOS padding is decodable in the released code (§F.11): window positions >= P + G are candidates
//    until an EOS was decoded, so a request can "generate" more than G tokens. Fixed: positions
//    >= stop (= P + G until an EOS is decoded) are never committed; they stay queried as context.
//  * The released output is the count-based slice x[P : nd], which can contain MASK ids and tokens
//    past the stop (§D.9). Fixed: output = x[P : stop), every position of which is decoded.
//  With reference_quirks both fixes are off; everything else is identical in both modes.
//  (The short-prompt slice wrap of §D.11 exists only in verify mode; this mode clamps the tracked
//  slice at 0 exactly like upstream, so prompts shorter than β_t are handled.)
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "denoise/denoiser.h"
#include "denoise/token_logprobs.h"
#include "flashdllm/params.h"
#include "model/model.h"

namespace flashdllm {

/// Flash-Cache runs `GenerateOptions` as they are (params.h, their one owner: defaults, presets
/// and validation): decode.cache must be CacheMode::kFlash; it reads decode.block_length (bm, the
/// masked-window size, effective_block_length()), track_num (β_t = track_num·bm, < 0 = full
/// recompute), mask_num (β_m), tokens_per_step (> 0: the greedy fixed-count rule instead of the
/// threshold rule), forced_schedule, reference_quirks, importance_probability_mass,
/// query_tile_rows, max_forward_rows, n_slots (generate()'s pool), and the Flash-Verify settings
/// (verify, gamma, verify_rule, max_candidates, verify_kept, forced_acceptance). `sampling` is the
/// default request of generate() and of flash_init_slot without SlotParams (a slot initialised that
/// way follows effective_threshold(decode, sampling): ε 0.9 unless set).

/// The two tiling facts of this implementation that are not decoding settings (the released code's
/// constants). Tests shrink the key tile to reach the end of a slot row with small models.
struct FlashTiling {
  int64_t key_tile = 128;              ///< block_n: rounding unit of L_max and seqlen_k (128 upstream)
  int64_t importance_first_layer = 2;  ///< first layer counted in a_t (released code: 2); >= n_layers = none
};

// ------------------------------------------------------------------------------ layout (§D.2, D.3)

/// L_max: m = max_prompt_len + gen_length + block_length, L_max = (floor(m / key_tile) + 1) · key_tile
/// (adds a whole tile even when m is a multiple). Throws Error(kInvalidArgument) for sizes <= 0.
/// Semantic, not only a size: windows near the end of a slot row are slices of full_pos [0, L_max)
/// and reach into the EOS padding past seqlen_k (the released code's short windows, §D.4).
int64_t flash_max_length(int64_t max_prompt_len, int64_t gen_length, int64_t block_length,
                         int64_t key_tile = FlashTiling{}.key_tile);

/// K/V store rows per slot (the flat cache's slot stride): max(seqlen_k, max_prompt_len + gen_length
/// + block_length) for the longest prompt. Every position a slot ever queries is below it: keys end at
/// seqlen_k, and a masked window near the end of the canvas reaches at most block_length − 1 positions
/// past it (positions >= seqlen_k are never decoded, so they keep their own index in full_pos; with
/// reference_quirks they can be, and the denoiser then keeps L_max store rows per slot). The
/// host-side slot rows keep L_max (flash_max_length) entries, whose tail only shapes those windows; the
/// released code allocates L_max store rows per slot, up to a key tile more than this (LLaDA-8B,
/// 250-token prompts, gen 512: 778 instead of 896 rows, −13% K/V memory). Throws
/// Error(kInvalidArgument) for sizes <= 0.
int64_t flash_slot_length(int64_t max_prompt_len, int64_t gen_length, int64_t block_length,
                          int64_t key_tile = FlashTiling{}.key_tile);

/// seqlen_k = floor((prompt_len + gen_length) / key_tile) · key_tile + key_tile (> prompt_len + gen_length).
int64_t flash_seqlen_k(int64_t prompt_len, int64_t gen_length, int64_t key_tile = FlashTiling{}.key_tile);

/// Bytes of the flat K/V cache: 2 (K and V) · n_layers · n_slots · max_length · n_kv_heads·head_dim ·
/// dtype_size(act) (LLaDA-8B, bf16, 32 slots × 1536: 25.8 GB).
size_t flash_kv_cache_bytes(const ModelConfig& cfg, DType act, int64_t n_slots, int64_t max_length);

/// Number of slots whose K/V cache fits in `budget_bytes` (0 if not even one).
int64_t flash_max_slots(const ModelConfig& cfg, DType act, int64_t max_length, size_t budget_bytes);

/// Device bytes a FlashCacheDenoiser pool allocates (allocate_pool; FlashRunStats::pool_bytes), by
/// part, for n_slots slots of prompt + gen_length <= max_total_length, without allocating anything.
struct FlashPoolBytes {
  int64_t store_stride = 0;  ///< K/V store rows per slot
  int64_t forward_rows = 0;  ///< query rows the main-pass workspace holds (max_forward_rows or one slot's)
  size_t kv = 0;             ///< the flat K/V cache
  size_t workspace = 0;      ///< the forward workspace buffer: the main pass's, or the verify pass's if larger
  size_t selection = 0;      ///< the main pass's selection outputs and importance scores
  size_t verify = 0;         ///< verify on: the verify pass's selection outputs (its workspace shares `workspace`)
  size_t total() const noexcept { return kv + workspace + selection + verify; }
};
/// Throws Error(kInvalidArgument) for n_slots < 1 or max_total_length < 2, as model_shard.
FlashPoolBytes flash_pool_bytes(const ModelConfig& cfg, DType act, const GenerateOptions& o, int64_t n_slots,
                                int64_t max_total_length, const TensorParallel& tp = {}, const FlashTiling& t = {});

// ------------------------------------------------------------------------------ slot state

/// One slot. Positions are slot-relative; `request` < 0 means inactive (empty query sets).
struct FlashSlot {
  int64_t request = -1;          ///< index of the request in the prompt list; -1 = inactive
  int64_t prompt_len = 0;        ///< P
  int64_t seqlen_k = 0;          ///< keys [0, seqlen_k)
  int64_t num_decoded = 0;       ///< nd: decoded positions (prompt included) = boundary in full_pos
  int64_t stop = 0;              ///< predicted_length: P + G, or the finishing EOS position + 1
  int64_t eos_pos = -1;          ///< decoded_eos_pos: max EOS position of the first EOS-committing iteration
  int64_t last_committed = 0;    ///< newest entries of full_pos pinned into the next tracked set (the
                                 ///< last iteration's commits; verify with reference_quirks: only its verified ones)
  int64_t gen_length = 0;        ///< G of this request
  std::optional<double> threshold;  ///< ε of this request; unset = effective_threshold(options)
  double temperature = 0.0;      ///< Gumbel-max temperature of this request (0 = greedy, as Flash-dLLM)
  uint64_t seed = 0;             ///< its noise seed
  int64_t logprobs = -1;         ///< SlotParams::logprobs: -1 none, else top alternatives per token
  int64_t iterations = 0;        ///< iterations this request was active (n_steps = NFE)
  int64_t verify_passes = 0;     ///< verify passes this request took part in
  int64_t candidates = 0;        ///< Flash-Verify candidates tried (Σ S)
  int64_t accepted = 0;          ///< Flash-Verify candidates accepted (Σ k2)
  std::vector<int32_t> x;        ///< [L_max] current tokens (MASK where undecoded, EOS padding after P + G)
  std::vector<int32_t> full_pos; ///< [L_max] permutation of [0, L_max), see the file comment
  std::vector<int32_t> window;   ///< masked window of the next iteration (query order)
  std::vector<int32_t> tracked;  ///< tracked query positions of the next iteration (query order)
  /// ModelConfig::logit_shift of the model (set at admission): window position p is predicted by
  /// the query row of position p − 1 (logits_source), which flash_prepare_queries adds to the
  /// tracked set when neither the window nor the tracked set holds it.
  bool logit_shift = false;
  /// Per window entry, the slot's query row (index into [window | tracked]) whose logits predict it;
  /// empty = row r for window entry r (no shift).
  std::vector<int32_t> logit_rows;
  bool active() const noexcept { return request >= 0; }
};

/// Initialises a slot for `request` (§D.3): x = prompt | MASK·G | EOS up to L_max, nd = P,
/// stop = P + G, seqlen_k from flash_seqlen_k, full_pos = identity, first query set = full prefill
/// (window [P, P + bm), tracked [0, P) ∪ [P + bm, seqlen_k)). G = o.sampling.gen_length; the
/// threshold follows the options, decoding is greedy. Throws Error(kInvalidArgument) for an empty
/// prompt, a prompt holding mask_id, or P + G + bm beyond max_length.
FlashSlot flash_init_slot(int64_t request, std::span<const int32_t> prompt, int64_t max_length,
                          const GenerateOptions& o, int32_t mask_id, int32_t eos_id, const FlashTiling& t = {});
/// As above with the request's own G (p.gen_length), threshold, temperature and seed.
FlashSlot flash_init_slot(int64_t request, std::span<const int32_t> prompt, int64_t max_length,
                          const GenerateOptions& o, const SlotParams& p, int32_t mask_id, int32_t eos_id,
                          const FlashTiling& t = {});

/// Rebuilds slot.window and slot.tracked from full_pos and nd (§D.4, formulas above; slices are
/// clipped like Python slices), then flash_map_logit_rows.
void flash_prepare_queries(FlashSlot& slot, const GenerateOptions& o);

/// Under slot.logit_shift: appends to slot.tracked every source position logits_source(p) of a
/// window position p that neither the window nor the tracked set queries (in window order), and
/// fills slot.logit_rows; without it clears logit_rows. The added rows write fresh K/V like every
/// query row (they are selective-refresh rows like the tracked ones).
void flash_map_logit_rows(FlashSlot& slot);

/// The main-pass ForwardBatch of one iteration over slots [first, min(last, slots.size())) (inactive
/// ones skipped; store rows stay absolute): per active slot, query rows [window | tracked set] with
/// token x[t], position t, store row j·store_stride + t; tiles: one per slot first, holding its window
/// and (query_tile_rows 0) its tracked set, then, when query_tile_rows > 0, the tracked sets in tiles of
/// that many rows; keys [j·store_stride, j·store_stride + seqlen_k); importance tiles: each slot's
/// window rows (inside its first tile); logit rows = the window rows in slot order, noise
/// keys noise_key(seed, iterations, t) for a slot sampling at temperature > 0, else 0; importance:
/// first layer t.importance_first_layer, weight 1 / (block_length · n_heads), variant from the
/// options (scores left for the caller to set). store_stride: the K/V store rows per slot, at
/// least flash_slot_length() (L_max also works). Throws Error(kInvalidArgument) if no slot of the
/// range is active or a queried position is >= store_stride.
ForwardBatch flash_plan(const std::vector<FlashSlot>& slots, int64_t store_stride, const GenerateOptions& o,
                        int64_t n_heads, size_t first = 0, size_t last = SIZE_MAX, const FlashTiling& t = {});

/// Query rows of an active slot's main pass (window + tracked set); 0 for an inactive slot.
int64_t flash_query_rows(const FlashSlot& slot);

/// Consecutive slot ranges [first, last) for one iteration's forward calls: each range's active slots
/// need at most max_rows query rows together (a single slot above it forms its own range); ranges
/// without an active slot are left out. max_rows <= 0: one range over all slots.
std::vector<std::pair<size_t, size_t>> flash_forward_groups(const std::vector<FlashSlot>& slots, int64_t max_rows);

/// One slot's decision in one iteration (§D.7), from the window's predictions.
struct FlashDecision {
  std::vector<int32_t> window;     ///< W (slot-relative, query order)
  std::vector<int32_t> tokens;     ///< argmax token per window entry
  std::vector<double> confidence;  ///< confidence per window entry after the stop rule (0 = zeroed)
  std::vector<uint8_t> eligible;   ///< 1 where the entry may be committed
  std::vector<int64_t> order;      ///< window indices by confidence, descending (stable: ties -> lower index)
  int64_t count = 0;               ///< k: the first `count` entries of `order` are committed
};

/// The natural decision: confidences zeroed for window positions >= stop (always when fixed;
/// released code: only once an EOS was decoded, and the entries stay eligible), then the rule /
/// forced schedule of `o` (iteration index = slot.iterations; the threshold is the slot's when set,
/// else effective_threshold(o.decode, o.sampling)). conf F64 and tokens of the window rows.
/// Throws Error(kInvalidArgument) if the sizes differ from the window.
FlashDecision flash_decide(const FlashSlot& slot, std::span<const double> conf, std::span<const int32_t> tokens,
                           const GenerateOptions& o);

/// Replaces a decision by a forced commit (teacher forcing): `positions` (distinct, in the window,
/// at least one) with `tokens` are committed in the given order; the other window entries follow in
/// the decision's order. Throws Error(kInvalidArgument) for positions outside the window,
/// duplicates, sizes that differ, or an empty set.
void flash_force(FlashDecision& d, std::span<const int32_t> positions, std::span<const int32_t> tokens);

/// Applies a decision (§D.7): full_pos[nd : nd+|W|] = W[order]; x[first count] = their tokens;
/// nd += count; the EOS rule; iterations += 1. Returns true while some undecoded position < stop remains.
bool flash_commit(FlashSlot& slot, const FlashDecision& d, int32_t eos_id);

/// True while some undecoded position (full_pos[nd:]) lies below the slot's stop (§D.9).
bool flash_has_work(const FlashSlot& slot);

/// After a commit that left work: re-ranks full_pos[0 : nd − last_committed] by importance
/// ascending (stable), `scores` = the slot's [max_length] a_t values indexed by slot-relative
/// position, then prepares the next queries (flash_rank_decoded, flash_prepare_queries).
void flash_rerank(FlashSlot& slot, std::span<const float> scores, const GenerateOptions& o);

/// The re-rank alone: full_pos[0 : n_old] sorted by scores[position] ascending, ties in their
/// current order (a stable sort; reference §D.7, "re-rank older decoded positions"). Throws Error(kInvalidArgument)
/// when scores does not hold one value per slot position or n_old is outside [0, |full_pos|].
void flash_rank_decoded(FlashSlot& slot, std::span<const float> scores, int64_t n_old);

// ------------------------------------------------------------------------------ run

struct FlashVerification;  // flash_verify.h
struct FlashVerifyTile;    // flash_verify.h

/// Per-slot view of one iteration, given to the observer after a natural decision and before it is
/// applied. Phase 1 (every iteration): the main-pass decision; the observer may replace the commit
/// by filling forced_positions / forced_tokens (slot-relative positions; see flash_force).
/// Phase 2 (verify on, every slot with a verify tile): the verification; with override_acceptance the
/// observer replaces the accepted set by forced_positions (candidates, possibly none) with
/// forced_tokens (see flash_verify_commit).
struct FlashStep {
  int64_t forward = 0;                 ///< index of the main pass in the run
  int64_t slot = 0;
  int phase = 1;                       ///< 1: main-pass decision; 2: verification
  const FlashSlot* state = nullptr;    ///< before this phase's commit
  const FlashDecision* decision = nullptr;            ///< the phase-1 decision (both phases)
  const FlashVerification* verification = nullptr;    ///< phase 2 only
  std::span<const float> importance;   ///< this pass's a_t of the slot ([max_length], slot-relative)
  std::vector<int32_t> forced_positions;
  std::vector<int32_t> forced_tokens;
  bool override_acceptance = false;    ///< phase 2: forced_positions replace the accepted set even when empty
};
using FlashStepObserver = std::function<void(FlashStep&)>;

/// Result of one request.
struct FlashRequestResult {
  int64_t request = 0, slot = 0, prompt_len = 0, seqlen_k = 0;
  /// Fixed: x[P : stop) (all decoded; ends with the finishing EOS if any). reference_quirks: the
  /// released count-based slice x[P : nd] (may hold MASK ids and tokens past the stop).
  std::vector<int32_t> output_ids;
  std::vector<int32_t> canvas;                    ///< final x[P : seqlen_k) (MASK = never decoded)
  std::vector<std::vector<int32_t>> iterations;   ///< committed positions per iteration, relative to P, ascending
  std::vector<std::vector<int32_t>> verified;     ///< verify on: the subset of each iteration accepted by verification
  int64_t nfe = 0;                  ///< iterations the request was active (the released n_steps)
  int64_t forward_passes = 0;       ///< main + verify passes the request took part in (nfe without verify)
  int64_t candidates = 0;           ///< Flash-Verify candidates tried (Σ S over its iterations)
  int64_t accepted = 0;             ///< Flash-Verify candidates accepted
  int64_t num_tokens = 0;           ///< ours: decoded positions in [P, stop) = stop − P
  int64_t num_tokens_reference = 0; ///< released: nd − P (counts decoded EOS padding / tokens past the stop)
  int64_t stop_rel = 0;             ///< stop − P (predicted_length relative to P)
  int64_t eos_rel = -1;             ///< finishing EOS position − P; -1 = none decoded
  double tokens_per_iteration() const noexcept { return nfe > 0 ? static_cast<double>(num_tokens) / nfe : 0.0; }
};

/// The host phases of FlashCacheDenoiser::step, in step order (FlashRunStats::phase_seconds).
/// Default mode without an observer, one iteration is: the main pass's plan and forward call (host
/// work; the CUDA backend only queues, the CPU backend also computes), the wait for its selection
/// and importance (device time), phase 1 (decisions, commits, verify tile plans), the verify
/// pass's batch and forward call, the early re-rank (runs while the verify pass runs on the
/// device), the wait for the verify selection, acceptance and phase-2 commits, then continue
/// (events, the re-rank when not done early, next queries, finishing slots).
enum class FlashPhase : int {
  kMainCall = 0,
  kMainWait,
  kDecide,
  kVerifyBatch,
  kVerifyCall,
  kEarlyRerank,
  kVerifyWait,
  kAccept,
  kContinue,
};
inline constexpr size_t kFlashPhases = 9;
/// The phase's name as step_phases() reports it ("main forward call", ...).
const char* flash_phase_name(FlashPhase p) noexcept;

/// Adds the wall time since the previous lap to a FlashPhase (FlashRunStats::phase_seconds).
class FlashPhaseClock {
 public:
  explicit FlashPhaseClock(std::array<double, kFlashPhases>& seconds) : seconds_(seconds) {}
  void lap(FlashPhase p) {
    const auto now = std::chrono::steady_clock::now();
    seconds_[static_cast<size_t>(p)] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  std::array<double, kFlashPhases>& seconds_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

/// Counters of a run.
struct FlashRunStats {
  int64_t forwards = 0;       ///< main passes
  int64_t query_rows = 0;     ///< query rows over all main passes
  int64_t verify_forwards = 0;    ///< verify passes (forward passes = forwards + verify_forwards)
  int64_t verify_query_rows = 0;  ///< query rows over all verify passes
  int64_t candidates = 0;     ///< Σ Flash-Verify candidates tried
  int64_t accepted = 0;       ///< Σ Flash-Verify candidates accepted
  int64_t nfe = 0;            ///< Σ per-request NFE
  int64_t num_tokens = 0;     ///< Σ num_tokens (ours)
  int64_t num_tokens_reference = 0;  ///< Σ num_tokens_reference (released)
  int64_t max_num_tokens = 0; ///< Σ gen_length
  int64_t admitted = 0;       ///< requests admitted to a slot (their FlashRequestResult::request indices)
  int64_t n_slots = 0;        ///< slots used (min(options.n_slots, requests))
  int64_t max_length = 0;     ///< L_max (host-side slot rows)
  int64_t store_stride = 0;   ///< K/V store rows per slot (flash_slot_length)
  size_t kv_bytes = 0;        ///< K/V store bytes of this rank (the slots' rows and the padding row)
  size_t pool_bytes = 0;      ///< every device buffer of the pool (flash_pool_bytes().total())
  /// Backend free memory (bytes) at the end of generate, while the K/V cache and every workspace are
  /// still allocated: the run's footprint for peak-memory accounting (the cache is freed on return).
  size_t free_bytes_at_end = 0;
  /// Host wall seconds (steady clock) of each FlashPhase, summed over every step.
  std::array<double, kFlashPhases> phase_seconds{};
};

struct FlashCacheResult {
  std::vector<FlashRequestResult> requests;  ///< in prompt order
  FlashRunStats stats;
};

/// The Flash-Cache (+ Flash-Verify) denoiser over a pool of slots (denoiser.h). The pool's flat
/// K/V cache has n_slots × store_stride rows per layer; host slot rows are L_max long with
/// reference_quirks (the released layout, where decoded EOS padding moves windows), otherwise the
/// request's own flash_max_length(P, G, bm), so a slot's windows never depend on the other
/// requests of the pool (batch invariance).
class FlashCacheDenoiser : public Denoiser {
 public:
  /// Validates the options against the model (params.h validate; Error(kInvalidArgument) naming the
  /// parameter) and the tiling (key_tile > 0, importance_first_layer >= 0); no pool yet (generate()
  /// sizes one for its prompts).
  FlashCacheDenoiser(Backend& backend, const Model& model, GenerateOptions options, const FlashTiling& t = {});
  /// With a pool of pool.n_slots slots for prompt + gen_length <= pool.max_total_length: the K/V
  /// cache, the importance scores and every workspace are allocated now. Validates options.decode
  /// only (the requests bring their own parameters). Throws Error(kOutOfMemory) naming the slot
  /// count that would fit when the K/V cache exceeds the backend's free memory,
  /// Error(kInvalidArgument) when L_max exceeds the model's RoPE table.
  FlashCacheDenoiser(Backend& backend, const Model& model, GenerateOptions options, const SlotPool& pool,
                     const FlashTiling& t = {});

  const GenerateOptions& options() const noexcept { return opt_; }
  const FlashTiling& tiling() const noexcept { return tiling_; }
  /// Counters since the pool was made (forwards, query rows, verify passes, finished requests' sums).
  const FlashRunStats& stats() const noexcept { return stats_; }

  /// Runs every prompt to completion with continuous batching (requests enter slots in order; a
  /// finished slot takes the next request before the next iteration): a pool of min(n_slots,
  /// prompts) slots for the longest prompt + gen_length, then admit / step / release. Throws
  /// Error(kOutOfMemory) as the pool constructor and Error(kInvalidArgument) for no prompts or a bad
  /// prompt (empty, mask id, id outside the vocabulary, too long for the model).
  FlashCacheResult generate(const std::vector<std::vector<int32_t>>& prompts, const FlashStepObserver& observer = {});

  // The slot contract (denoiser.h).
  int64_t n_slots() const noexcept override { return static_cast<int64_t>(slots_.size()); }
  void check_request(std::span<const int32_t> prompt, const SlotParams& p) const override;
  void admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) override;
  std::vector<SlotStep> step() override { return step(FlashStepObserver{}); }
  /// One iteration with an observer (teacher forcing, traces; see FlashStep).
  std::vector<SlotStep> step(const FlashStepObserver& observer);
  void release(int64_t slot) override;
  bool active(int64_t slot) const noexcept override;
  std::span<const int32_t> canvas(int64_t slot) const override;
  SlotOutput output(int64_t slot) const override;
  int64_t model_passes() const noexcept override { return passes_; }
  /// stats().phase_seconds by name, every FlashPhase in order.
  std::vector<StepPhase> step_phases() const override;
  /// The finished request of `slot` in this denoiser's own terms (valid after its finishing step,
  /// until release). Throws Error(kInvalidArgument) for a slot without a finished request.
  const FlashRequestResult& result(int64_t slot) const;

 private:
  void allocate_pool(const SlotPool& pool);
  // The phases of step(), in order.
  /// One active slot's part of an iteration.
  struct SlotPhase {
    bool active = false, work = false;
    int64_t k1 = 0;                  // phase-1 commits
    FlashDecision decision;          // phase 1's
    std::vector<int32_t> committed;  // this iteration's commits (slot-relative)
    std::vector<int32_t> verified;   // the verified subset
    std::string error;               // non-finite logits: the slot fails alone (SlotStep::error)
  };
  /// The main pass: one forward call per slot group (flash_forward_groups), the window rows'
  /// predictions appended to x0 / conf in slot order, the importance scores in scores_. Returns the
  /// query rows.
  int64_t main_pass(FlashPhaseClock& clock, std::vector<int32_t>& x0, std::vector<double>& conf);
  /// The TokenLogprobs of slot j's commits this iteration at slot-relative `positions`: from the
  /// main pass's window rows (window_logprobs_[j]), phase 1's commits and Flash-Verify's accepted
  /// drafts alike (a draft's row is the window row that proposed it; docs/decisions.md).
  std::vector<TokenLogprob> commit_logprobs(size_t j, const SlotPhase& st, std::span<const int32_t> positions) const;
  /// Phase 1: per active slot, the decision (the observer may force it) and its commit; with verify,
  /// the slots' verify tiles.
  void decide(const FlashStepObserver& observer, int64_t forward, std::span<const int32_t> x0,
              std::span<const double> conf, std::vector<SlotPhase>& phases, std::vector<FlashVerifyTile>& tiles);
  /// Phase 2: the verify pass over `tiles`, the early re-rank of the continuing slots (ranked[j]),
  /// acceptance and commit.
  void verify(const FlashStepObserver& observer, int64_t forward, FlashPhaseClock& clock,
              const std::vector<FlashVerifyTile>& tiles, std::vector<SlotPhase>& phases, std::vector<int64_t>& ranked);
  /// The iteration's SlotSteps; continuing slots are re-ranked and get their next queries, finished
  /// ones their final record.
  std::vector<SlotStep> continue_slots(std::vector<SlotPhase>& phases, const std::vector<int64_t>& ranked);
  /// The slot's importance scores of this pass ([full_pos.size()], slot-relative positions).
  std::span<const float> slot_scores(size_t j) const;
  /// The slot's FlashSlot: running or (after its finishing step) finished.
  const FlashSlot& slot_state(int64_t slot) const;
  void finish_slot(size_t j);

  Backend& backend_;
  const Model& model_;
  GenerateOptions opt_;
  FlashTiling tiling_;
  int64_t bm_ = 0;  // opt_.decode.effective_block_length()
  // The pool (allocate_pool).
  int64_t L_ = 0;   // L_max: host slot rows (reference_quirks) and the RoPE bound
  int64_t Ls_ = 0;  // K/V store rows per slot
  int64_t pool_total_ = 0;
  KvStore kv_;
  Tensor scores_dev_;               // F32 [n_slots·Ls + 1] a_t by store row (zeroed after each pass), in sel_buf_
  std::vector<float> store_scores_; // host copy of scores_dev_
  std::vector<float> scores_;       // per slot [L_max]: a_t by slot-relative position (past Ls always 0)
  std::vector<FlashSlot> slots_;    // running requests (request < 0: none)
  std::vector<FlashSlot> done_;     // a finished request's final state until release (request < 0: none)
  std::vector<FlashRequestResult> results_;  // per slot: the running / finished request's record
  FlashRunStats stats_;
  int64_t passes_ = 0;  // forward calls (slot groups) + verify passes
  // The main and verify passes' workspaces, carved from one buffer (ws_buf_: the larger of the two
  // layouts): an iteration's verify pass runs after its main pass's outputs left for sel_buf_ and
  // the host, and the next main pass after the verify pass's left for vsel_buf_.
  Buffer ws_buf_;
  ForwardWorkspace ws_;
  // The main pass's device outputs in one buffer, [x0 | conf | scores] (256-byte aligned parts), so
  // that one copy (one host synchronisation) brings an iteration's selection and importance back.
  Buffer sel_buf_;
  Tensor x0_, conf_;
  size_t conf_offset_ = 0, scores_offset_ = 0;
  std::vector<std::byte> sel_host_;  // host image of sel_buf_
  std::vector<LogprobReader> window_logprobs_;  // per slot asking for logprobs: its window's logits rows
  /// Copies x0_ / conf_ rows [0, R) (and scores_dev_ when with_scores) to the host in one copy;
  /// appends the rows to x0 / conf and fills store_scores_.
  void fetch_selection(int64_t R, bool with_scores, std::vector<int32_t>& x0, std::vector<double>& conf);
  /// The first `bytes` (a multiple of 4) of the device buffer `buf` into `host`, one copy_to_host.
  void copy_prefix(const Buffer& buf, size_t bytes, std::vector<std::byte>& host);
  // Verify pass: its workspace (in ws_buf_), selection outputs and the logit gather of p(draft), in
  // one buffer [x0 | conf | ℓ_draft, ℓ_argmax | drafts] (256-byte aligned parts): the first three come
  // back in one copy.
  ForwardWorkspace vws_;
  Buffer vsel_buf_;
  Tensor vx0_, vconf_, vval_, vdrafts_;
  size_t vconf_offset_ = 0, vval_offset_ = 0;  // vconf_ / vval_ in vsel_buf_
  std::vector<std::byte> vsel_host_;           // host image of vsel_buf_'s x0 | conf | values
};

}  // namespace flashdllm
