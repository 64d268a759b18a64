// The in-tile isolation mask of Flash-Verify, shared by the CPU backend and the CUDA kernels (the
// kernels call it from device code: --expt-relaxed-constexpr).
#pragma once

#include <cstdint>

namespace flashdllm {

/// I32 per VerifyTile table row (backend.h): q_start, q_end, k_start, k_end, n_cand, n_src.
inline constexpr int kVerifyTileInts = 6;

/// Whether a verify tile of `rows` query rows can hold n_cand candidates and n_src source rows:
/// n_cand >= 0, 0 <= n_src <= n_cand and 2·n_cand + n_src <= rows (the kept count T is the rest).
constexpr bool verify_tile_groups_valid(int64_t rows, int64_t n_cand, int64_t n_src) noexcept {
  return n_cand >= 0 && n_src >= 0 && n_src <= n_cand && 2 * n_cand + n_src <= rows;
}

/// The in-tile isolation mask of Flash-Verify (reference §D.8), rows = queries, columns = keys,
/// both in tile order [kept T | drafts D_0..D_{S−1} | masks M_0..M_{S−1} | sources R_0..R_{n_src−1}];
/// true = may attend:
///  * every row sees every kept column;
///  * kept rows see no draft and every mask (the all-masked state);
///  * D_i sees D_k for k <= i and M_k for k > i ("candidates <= i filled in");
///  * M_i sees D_k for k < i and M_k for k >= i (drafts of earlier candidates only, never its own);
///  * R_i (only on a shifted-logit model, n_src = S, else none) sees exactly what M_i sees: it is
///    the query of position c_i − 1 in M_i's view, whose output row predicts c_i under the logit
///    shift (logits_source, denoise/block_decoding.h); no row sees a source column (its key in that
///    view already is a kept, draft, mask or cached column).
/// So every row sees exactly one view of each candidate, and a draft and a mask of the same position
/// never see each other. row, col in [0, n_kept + 2·n_cand + n_src) (a column past the masks is a
/// source column, whatever n_src; n_src = 0 is the unshifted tile of the released code).
constexpr bool verify_may_attend(int64_t n_kept, int64_t n_cand, int64_t row, int64_t col) noexcept {
  if (col >= n_kept + 2 * n_cand) return false;  // source columns: queries only
  if (col < n_kept) return true;
  const bool col_draft = col < n_kept + n_cand;
  const int64_t k = col_draft ? col - n_kept : col - n_kept - n_cand;
  if (row < n_kept) return !col_draft;
  const bool row_draft = row < n_kept + n_cand;
  // M_i and R_i: i = (row − n_kept − n_cand) mod n_cand.
  int64_t i = row_draft ? row - n_kept : row - n_kept - n_cand;
  if (i >= n_cand) i -= n_cand;
  if (row_draft) return col_draft ? k <= i : k > i;
  return col_draft ? k < i : k >= i;
}

}  // namespace flashdllm
