// The tokenizer's regexes and splitting (tokenizer_regex.h).
#include "io/tokenizer_regex.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace flashdllm::tokenizer_detail {

// ------------------------------------------------------------------------------------------------
// Regex (PCRE2 with Oniguruma semantics for the escapes that differ)
// ------------------------------------------------------------------------------------------------

namespace {

// Members of Oniguruma's \s (Unicode White_Space); PCRE2's \s also has U+180E.
constexpr std::string_view kSpaceItems =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's \w: Letter | Mark | Decimal_Number | Connector_Punctuation.
constexpr std::string_view kWordItems = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
// Oniguruma (Ruby syntax) \h is a hexadecimal digit, not horizontal space.
constexpr std::string_view kHexItems = "0-9a-fA-F";

/// Appends class items: bare inside a class, else wrapped as [items] or [^items].
void append_class(std::string& out, std::string_view items, bool in_class, bool negate) {
  if (!in_class) out += negate ? "[^" : "[";
  out += items;
  if (!in_class) out += ']';
}

}  // namespace

std::string translate_onig_pattern(std::string_view p, const std::string& where) {
  auto unsupported = [&](std::string_view what) {
    FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "{}: regex {} is not supported (pattern: {})", where, what, p);
  };
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      switch (e) {
        case 's': append_class(out, kSpaceItems, in_class, false); break;
        case 'S':
          // PCRE2's \S lacks U+180E, which Oniguruma's \S has.
          if (in_class) {
            out += "\\S\\x{180E}";
          } else {
            append_class(out, kSpaceItems, false, true);
          }
          break;
        case 'w': append_class(out, kWordItems, in_class, false); break;
        case 'W':
          if (in_class) unsupported("\\W inside a character class");
          append_class(out, kWordItems, false, true);
          break;
        case 'h': append_class(out, kHexItems, in_class, false); break;
        case 'H':
          if (in_class) unsupported("\\H inside a character class");
          append_class(out, kHexItems, false, true);
          break;
        case 'Q': {  // \Q...\E: literal text, copied untouched
          const size_t end = p.find("\\E", i + 2);
          const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
          out.append(p.substr(i, stop - i));
          i = stop;
          continue;
        }
        default:
          out.push_back(c);
          out.push_back(e);
          break;
      }
      i += 2;
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:]
          const size_t end = p.find(":]", i + 2);
          if (end == std::string_view::npos) unsupported("unterminated POSIX class");
          out.append(p.substr(i, end + 2 - i));
          i = end + 2;
          continue;
        }
        unsupported("nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') unsupported("character class intersection (&&)");
      if (c == ']') in_class = false;
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
      if (i < p.size() && p[i] == ']') out.push_back(p[i++]);  // leading ] is a literal
      continue;
    }
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      // Inline options: Ruby's (?m) is PCRE2's (?s) (dot matches newline).
      size_t j = i + 2;
      while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ':' || p[j] == ')')) {
        out += "(?";
        for (size_t k = i + 2; k < j; ++k) out.push_back(p[k] == 'm' ? 's' : p[k]);
        i = j;
        continue;
      }
    }
    out.push_back(c);
    ++i;
  }
  return out;
}

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

/// Per-thread PCRE2 scratch (match data, JIT stack). pcre2_match_data may not be shared.
struct Pcre2Scratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  Pcre2Scratch() {
    md = pcre2_match_data_create(1, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (mctx && jit_stack) pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
  }
  ~Pcre2Scratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(mctx);
    pcre2_match_data_free(md);
  }
  Pcre2Scratch(const Pcre2Scratch&) = delete;
  Pcre2Scratch& operator=(const Pcre2Scratch&) = delete;
};

Pcre2Scratch& pcre2_scratch() {
  thread_local Pcre2Scratch scratch;
  if (!scratch.md || !scratch.mctx) FDLLM_FAIL(ErrorCode::kOutOfMemory, "tokenizer: cannot allocate PCRE2 match data");
  return scratch;
}

}  // namespace

Regex::Regex(std::string_view onig_pattern, const std::string& where) : source_(onig_pattern) {
  const std::string translated = translate_onig_pattern(onig_pattern, where);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_compile_context* cctx = pcre2_compile_context_create(nullptr);
  FDLLM_CHECK(cctx != nullptr, ErrorCode::kOutOfMemory, "{}: cannot allocate a PCRE2 compile context", where);
  pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_MATCH_INVALID_UTF, &err, &err_off, cctx);
  pcre2_compile_context_free(cctx);
  FDLLM_CHECK_CKPT(code != nullptr, "{}: cannot compile regex {:?}: {} (at offset {} of the PCRE2 form {:?})", where,
                   std::string(onig_pattern), pcre2_message(err), static_cast<size_t>(err_off), translated);
  code_.reset(code);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
}

void Regex::find_iter(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  Pcre2Scratch& scratch = pcre2_scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(code_.get(), subject, s.size(), pos, 0, scratch.md, scratch.mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_.get(), subject, s.size(), pos, PCRE2_NO_JIT, scratch.md, scratch.mctx);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    FDLLM_CHECK(rc >= 0, ErrorCode::kUnsupported, "tokenizer: regex {:?} failed on a {}-byte piece: {}", source_,
                s.size(), pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.md);
    const size_t start = ov[0], end = ov[1];
    if (start == end && have_last && last_end == end) {
      pos += pos < s.size() ? utf8_step(s, pos).len : 1;
      continue;
    }
    out.emplace_back(start, end);
    pos = end;
    have_last = true;
    last_end = end;
  }
}

// ------------------------------------------------------------------------------------------------
// Splitting (tokenizers `NormalizedString::split` and `Pattern::find_matches`)
// ------------------------------------------------------------------------------------------------

/// Covers `s` with alternating non-match / match spans (tokenizers `Pattern::find_matches`).
std::vector<Span> regex_find_matches(const Regex& re, std::string_view s) {
  if (s.empty()) return {{0, 0, false}};
  std::vector<std::pair<size_t, size_t>> found;
  re.find_iter(s, found);
  std::vector<Span> spans;
  spans.reserve(found.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [a, b] : found) {
    if (prev != a) spans.push_back({prev, a, false});
    spans.push_back({a, b, true});
    prev = b;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), false});
  return spans;
}

/// Applies a delimiter behavior and appends the kept, non-empty pieces of `s` to `out`.
void split_by_behavior(std::string_view s, std::vector<Span> matches, SplitBehavior behavior,
                       std::vector<std::string>& out) {
  std::vector<Span> splits;  // flag = should_remove
  splits.reserve(matches.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto m : matches) splits.push_back({m.start, m.end, false});
      break;
    case SplitBehavior::kRemoved: splits = std::move(matches); break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (const auto& m : matches) {
        if (m.flag == previous && !splits.empty()) {
          splits.back().end = m.end;
        } else {
          splits.push_back({m.start, m.end, false});
        }
        previous = m.flag;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (const auto& m : matches) {
        if (m.flag && !previous && !splits.empty()) {
          splits.back().end = m.end;
        } else {
          splits.push_back({m.start, m.end, false});
        }
        previous = m.flag;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->flag && !previous && !splits.empty()) {
          splits.back().start = it->start;
        } else {
          splits.push_back({it->start, it->end, false});
        }
        previous = it->flag;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  for (const auto& sp : splits) {
    if (!sp.flag && sp.end > sp.start) out.emplace_back(s.substr(sp.start, sp.end - sp.start));
  }
}

}  // namespace flashdllm::tokenizer_detail
