#!/usr/bin/env bash
# Checks that the lines a change touches follow .clang-format; the rest of the tree is left as it is
# (it predates .clang-format and is not reformatted wholesale). Of the edits clang-format wants, only
# those overlapping a changed line are reported (scripts/check_format.py).
#   scripts/check_format.sh [BASE]         BASE: commit to compare with (default: the merge base with
#                                          main; on main itself, or without a main branch, HEAD~1);
#                                          uncommitted and untracked files count as changed
#   scripts/check_format.sh --fix [BASE]   reformat the changed lines in the working tree instead
# Exit status 1, printing what clang-format wants, when a changed line is off. C, C++, CUDA files only.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=()
if [[ "${1:-}" == "--fix" ]]; then fix=(--fix); shift; fi
base="${1:-${FLASHDLLM_FORMAT_BASE:-}}"
if [[ -z "$base" ]] && git rev-parse -q --verify MERGE_HEAD >/dev/null; then
  base=MERGE_HEAD  # a merge in progress: what it brings in is not this branch's change
fi
if [[ -z "$base" ]]; then
  base=$(git merge-base HEAD main 2>/dev/null || true)
  if [[ -z "$base" || "$base" == "$(git rev-parse HEAD)" ]]; then
    base=$(git rev-parse --verify -q HEAD~1 || git rev-parse HEAD)
  fi
fi
command -v clang-format >/dev/null || { echo "[format] clang-format not found (apt-get install clang-format)" >&2; exit 2; }
python3 scripts/check_format.py "$(git rev-parse "$base")" "${fix[@]}"
echo "[format] changed lines since $(git rev-parse --short "$base") checked"
