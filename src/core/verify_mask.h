// The in-tile isolation mask of Flash-Verify, shared by the CPU backend and the CUDA kernels (the
// kernels call it from device code: --expt-relaxed-constexpr).
#pragma once

#include <cstdint>

namespace flashdllm {

/// The in-tile isolation mask of Flash-Verify (reference §D.8), rows = queries, columns = keys,
/// both in tile order [kept T | drafts D_0..D_{S−1} | masks M_0..M_{S−1}]; true = may attend:
///  * every row sees every kept column;
///  * kept rows see no draft and every mask (the all-masked state);
///  * D_i sees D_k for k <= i and M_k for k > i ("candidates <= i filled in");
///  * M_i sees D_k for k < i and M_k for k >= i (drafts of earlier candidates only, never its own).
/// So every row sees exactly one view of each candidate, and a draft and a mask of the same position
/// never see each other. row, col in [0, n_kept + 2·n_cand).
constexpr bool verify_may_attend(int64_t n_kept, int64_t n_cand, int64_t row, int64_t col) noexcept {
  if (col < n_kept) return true;
  const bool col_draft = col < n_kept + n_cand;
  const int64_t k = col_draft ? col - n_kept : col - n_kept - n_cand;
  if (row < n_kept) return !col_draft;
  const bool row_draft = row < n_kept + n_cand;
  const int64_t i = row_draft ? row - n_kept : row - n_kept - n_cand;
  if (row_draft) return col_draft ? k <= i : k > i;
  return col_draft ? k < i : k >= i;
}

}  // namespace flashdllm
