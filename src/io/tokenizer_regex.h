// Internal to the tokenizer (src/io/tokenizer*.cpp): HF's Split patterns (Oniguruma, Ruby syntax)
// run on PCRE2 with Oniguruma's meaning for the escapes that differ, and the splitting of a text by
// a pattern's or a predicate's matches (tokenizers `Pattern::find_matches`, `NormalizedString::split`).
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/tokenizer_text.h"

namespace flashdllm::tokenizer_detail {

/// Rewrites an Oniguruma (Ruby syntax) pattern into a PCRE2 pattern with the same meaning for the
/// constructs tokenizers use. Throws Error(kInvalidCheckpoint) naming `where` for constructs whose
/// meaning cannot be carried over (nested classes, class intersection, \W or \H inside a class).
std::string translate_onig_pattern(std::string_view p, const std::string& where);

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* c) const noexcept { pcre2_code_free(c); }
};

class Regex {
 public:
  /// Compiles an Oniguruma-syntax pattern. Throws Error(kInvalidCheckpoint) naming `where`.
  Regex(std::string_view onig_pattern, const std::string& where);

  /// Non-overlapping matches (start, end) in byte offsets, iterated like Oniguruma's / Rust's
  /// find_iter: the search resumes at the previous match end, and an empty match ending where the
  /// previous match ended is skipped by advancing one character.
  void find_iter(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  std::string source_;
  std::unique_ptr<pcre2_code, Pcre2CodeDeleter> code_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t start, end;
  bool flag;  // is_match for find_matches; should_remove after the behavior is applied
};

/// Covers `s` with alternating non-match / match spans (tokenizers `Pattern::find_matches`).
std::vector<Span> regex_find_matches(const Regex& re, std::string_view s);

/// find_matches for a per-character predicate: each matching character is its own match.
template <typename Pred>
std::vector<Span> char_find_matches(std::string_view s, Pred pred) {
  if (s.empty()) return {{0, 0, false}};
  std::vector<Span> spans;
  size_t last = 0;
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    if (st.valid && pred(st.cp)) {
      if (last < i) spans.push_back({last, i, false});
      spans.push_back({i, i + st.len, true});
      last = i + st.len;
    }
    i += st.len;
  }
  if (s.size() > last) spans.push_back({last, s.size(), false});
  return spans;
}

/// Applies a delimiter behavior and appends the kept, non-empty pieces of `s` to `out`.
void split_by_behavior(std::string_view s, std::vector<Span> matches, SplitBehavior behavior,
                       std::vector<std::string>& out);

}  // namespace flashdllm::tokenizer_detail
