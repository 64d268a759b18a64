// Flash-Verify: self-verifying parallel decoding on top of Flash-Cache (reference-algorithms.md §D.8,
// §F.1, §F.5–F.8, §F.10; VILA-Lab/Flash-dLLM llada/generate.py `generate_with_Flash_dLLM(verify=True)`
// and llada/flash_cache_triton.py `_flash_verify_*`). The decode loop lives in FlashCacheDenoiser
// (flash_cache.cpp, options.decode.verify; its verify pass in flash_verify.cpp); this file holds
// its typed, unit-tested pieces.
//
// One iteration per active slot (positions slot-relative):
//  1. Draft = the Flash-Cache main pass (a_t included). Commit the confident set exactly as without
//     verification (flash_decide / flash_commit: confidence >= ε, at least one). The window's argmax
//     tokens are the drafts. n_valid = window entries that may be decoded (see
//     flash_verify_valid_count); S = clamp(n_valid − k1, 0, cap) candidates = the next S window
//     entries in draft-confidence order, cap = max_candidates (released: block_length / 2);
//     T = 2·bm − 2·S kept rows = the last T decoded entries of full_pos (the newest commits, then the
//     best-ranked older ones), so a tile has 2·bm rows as upstream (with source rows, below: T =
//     max(k1, 2·bm − 3·S), still 2·bm rows for S <= bm / 2); verify_kept = commits: T = k1,
//     only the phase-1 commits (by default the decoded positions whose cached K/V is still of the
//     [MASK] state; not so with reference_quirks pinning or track_num 0), k1 + 2·S rows (params.h VerifyKept,
//     docs/decisions.md).
//  2. Verify pass (model_verify_forward): query rows [kept | candidates with their drafts | the same
//     candidates undecoded ([MASK]; an EOS-padding candidate, possible only with reference_quirks,
//     keeps its padding token as in the released code)] at the candidates' own RoPE positions, both
//     views at the same positions; keys = the slot's cached K/V minus
//     the tile's positions, plus the tile's fresh K/V under the isolation mask of §D.8
//     (verify_may_attend in core/verify_mask.h). The pass never writes the KV cache (§F.7): accepted
//     tokens get fresh K/V when a later main pass queries them.
//     Shifted-logit models (ModelConfig::logit_shift, Dream: position p is predicted by output row
//     p − 1, logits_source in block_decoding.h): M_i's row is then the prediction of c_i + 1, not of
//     c_i. The prediction of c_i in M_i's view ("view i": drafts of the candidates k < i filled in,
//     the others undecoded) is the output of position c_i − 1 in view i, which no row of the tile
//     computes (c_i − 1 is a kept, cached or prompt position, or a candidate c_k whose view-i token
//     is draft_k for k < i and its undecoded state for k > i). So the tile gets S source rows R_i
//     after the mask rows: position c_i − 1, its view-i token (flash_verify_source_token), attending
//     exactly like M_i; nobody attends to them (the view-i key of c_i − 1 already is a cached, kept,
//     D_k or M_k column). Their output rows are the logit rows. Where the cached and kept K/V are
//     those of view i (one layer: they depend on token and position only) this is a full forward of
//     the view-i canvas read at row c_i − 1 (tests/denoise/test_dream_verify.cpp), exactly as M_i is
//     the view-i row c_i without a shift; with more layers both share the released approximation.
//     Without a shift there are no source rows: the tile of the released code, unchanged.
//  3. Acceptance on the mask rows (under the logit shift: the source rows), in candidate order,
//     stopping at the first rejection (flash_verify_accept): product rule (released, default): Π_{k<=i} p_M,k(draft_k)
//     >= γ; paper rule: argmax p_M,i == draft_i and max p_M,i >= γ. Candidates past the stop are rejected (probability
//     0), which also applies a stop found by phase 1 of the same iteration (§F.10). Accepted drafts are committed
//     (flash_verify_commit) with the EOS rule of §D.7.
//  4. Continue / finish / refill as Flash-Cache. Pinning (§F.5): by default every token committed by
//     the iteration (phase 1 and 2) is pinned into the next tracked set, as without verification
//     (their cached K/V is the stale mask-state one). reference_quirks: only the verified ones are
//     pinned and the phase-1 commits are re-ranked by a_t with the older tokens (released code).
//
// Handled where the released code fails or misbehaves (both modes):
//  * a window shorter than block_length (fewer undecoded positions left in the slot row: the
//    released code reads block_length logit rows and crashes, "shape mismatch ... [16] ... [11]");
//    only the window's own rows are used;
//  * nd < T (short prompt, §D.11): the released slice full_pos[nd − T : nd] wraps to an empty or
//    wrong range; here kept = full_pos[max(0, nd − T) : nd] (fewer than T kept rows).
// Default mode only (reference_quirks reproduces the released behaviour):
//  * keys of the verify tile = every position < seqlen_k outside the tile (the main pass's context);
//    the released gather list full_pos[0 : nd − T] ++ full_pos[nd + S : seqlen_k] can differ from
//    that once decoding reaches seqlen_k (decoded EOS padding past seqlen_k, §F.11);
//  * slots without candidates (S = 0), or whose phase 1 already finished them, get no verify tile
//    (the released code recomputes 2·bm kept rows for nothing), and no verify pass runs when no slot
//    has candidates.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "denoise/flash_cache.h"

namespace flashdllm {

/// Candidate cap S_max: max_candidates when > 0, else block_length / 2 (released code).
int64_t flash_verify_cap(const GenerateOptions& o) noexcept;

/// The most query rows a slot's verify tile can have: 2·bm, plus S_max source rows on a
/// shifted-logit model (released kept rule: max(k1, 2·bm − 3·S) + 3·S <= 2·bm + S_max; commits:
/// k1 + 3·S <= bm + 2·S_max, both <= 2·bm + S_max as S_max <= bm).
int64_t flash_verify_max_rows(const GenerateOptions& o, bool logit_shift) noexcept;

/// n_valid of a phase-1 decision, counted on the slot state *before* its commit (§F.10): window
/// entries below the stop; reference_quirks: every entry until an EOS was decoded (EOS padding is
/// decodable there, §F.11). Throws Error(kInvalidArgument) if the decision is for another window.
int64_t flash_verify_valid_count(const FlashSlot& before_commit, const FlashDecision& d, const GenerateOptions& o);

/// The verification tile of one slot, planned after the phase-1 commit.
struct FlashVerifyTile {
  int64_t slot = 0;                 ///< slot index in the run
  std::vector<int32_t> kept;        ///< T' = min(T, nd) kept positions: full_pos[max(0, nd − T) : nd]
  std::vector<int32_t> candidates;  ///< S positions in draft-confidence order (= full_pos[nd : nd + S])
  std::vector<int32_t> drafts;      ///< their draft tokens (main-pass argmax)
  std::vector<int32_t> keys;        ///< cached key positions (see the file comment for the two modes)
  int64_t kept_budget = 0;          ///< T before the short-prompt clamp: 2·bm − 2·S (released) or k1 (commits);
                                    ///< max(k1, 2·bm − 3·S) (released) with source rows
  bool source_rows = false;         ///< one source row per candidate (the slot's logit shift, see the file comment)
  int64_t rows() const noexcept {
    return static_cast<int64_t>(kept.size() + (source_rows ? 3 : 2) * candidates.size());
  }
};

/// Plans the tile of `slot` (state after flash_commit of the phase-1 decision `d`, which committed
/// k1 = d.count entries) with S = clamp(n_valid − k1, 0, flash_verify_cap(o)) candidates. The drafts
/// are d.tokens of the candidate entries; source_rows = slot.logit_shift. Throws Error(kInvalidArgument) when the
/// slot's newest entries are not the decision's order (commit not applied) or n_valid is outside [0, |W|].
FlashVerifyTile flash_verify_plan_slot(const FlashSlot& slot, int64_t slot_index, const FlashDecision& d,
                                       int64_t n_valid, const GenerateOptions& o);

/// The verify pass of an iteration over `tiles` (in order): per tile rows [kept | drafts | masks]
/// with tokens x[kept], the drafts, x[candidates] (the undecoded state: [MASK] for canvas positions;
/// for EOS-padding candidates, possible only with reference_quirks, the padding token, exactly as
/// the released code); positions kept, candidates, candidates; with tile.source_rows then S source
/// rows R_i at position c_i − 1 with token flash_verify_source_token; key rows slot·store_stride +
/// key position; one VerifyTile each (n_src = S or 0); logit rows = the source rows (shifted) or
/// the mask rows of every tile (Σ S rows, tile order). Throws Error(kInvalidArgument) for no tiles,
/// an empty tile, an inactive / unknown slot, a key position >= store_stride or a candidate at
/// position 0 of a tile with source rows.
VerifyBatch flash_verify_batch(const std::vector<FlashSlot>& slots, const std::vector<FlashVerifyTile>& tiles,
                               int64_t store_stride);

/// The token of source row R_i (position c_i − 1) in mask row M_i's view: draft_k if c_i − 1 is
/// candidate c_k with k < i, else x[c_i − 1] (a decoded or prompt token, or candidate c_k with k > i
/// in its undecoded state). Throws Error(kInvalidArgument) for i outside the candidates or c_i < 1.
int32_t flash_verify_source_token(const FlashSlot& slot, const FlashVerifyTile& tile, size_t i);

/// Acceptance (§D.8), a prefix length in [0, S]:
///  * forced > 0 (benchmarks): the first min(forced, S) candidates, stopping at a blocked one;
///  * kProduct: #{i : Π_{k<=i} c_k >= γ} with c_k = blocked[k] ? 0 : p_draft[k] (running product in
///    double, non-increasing, so a prefix) — the released rule;
///  * kPaper: accept candidate i while !blocked[i], argmax[i] == drafts[i] and p_max[i] >= γ.
/// p_draft = mask-view probability of the draft token, p_max / argmax = the mask view's max and
/// argmax; blocked = candidate at or past the stop. Throws Error(kInvalidArgument) for sizes that
/// differ or γ outside (0, 1].
int64_t flash_verify_accept(std::span<const double> p_draft, std::span<const double> p_max,
                            std::span<const int32_t> argmax, std::span<const int32_t> drafts,
                            std::span<const uint8_t> blocked, VerifyRule rule, double gamma, int64_t forced = 0);

/// Blocked flags of a tile's candidates on the slot state after phase 1: position >= stop
/// (reference_quirks: only once an EOS was decoded, as the released code zeroes them).
std::vector<uint8_t> flash_verify_blocked(const FlashSlot& slot, const FlashVerifyTile& tile, const GenerateOptions& o);

/// Phase-2 view of one slot (given to the observer).
struct FlashVerification {
  const FlashVerifyTile* tile = nullptr;
  std::vector<double> p_draft;   ///< mask-view p(draft) per candidate (float64 softmax of the logits)
  std::vector<double> p_max;     ///< mask-view max probability
  std::vector<int32_t> argmax;   ///< mask-view argmax
  std::vector<uint8_t> blocked;  ///< candidate at/past the stop (after phase 1's EOS rule)
  int64_t count = 0;             ///< accepted: tile->candidates[0 : count]
};

/// Commits the accepted candidates (§D.8 phase 2): `accepted` (distinct positions among
/// tile.candidates, in commit order; usually the first k2 candidates) get `tokens`; full_pos[nd : nd+S]
/// becomes accepted, then the other candidates in their order; nd += k2; the EOS rule of §D.7;
/// accepted += k2. Pinning: last_committed = k1 + k2 (pin_all_new) or k2 (released, §F.5), k1 = the
/// phase-1 count of this iteration. Returns flash_has_work(slot). Throws Error(kInvalidArgument) when
/// the tile's candidates are not full_pos[nd : nd + S], for positions outside them, duplicates or
/// size mismatches.
bool flash_verify_commit(FlashSlot& slot, const FlashVerifyTile& tile, std::span<const int32_t> accepted,
                         std::span<const int32_t> tokens, int64_t k1, int32_t eos_id, bool pin_all_new);

}  // namespace flashdllm
