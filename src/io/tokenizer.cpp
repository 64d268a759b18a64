// Hugging Face `tokenizer.json` byte-level BPE, reimplemented to match the `tokenizers` package.
//
// Encoding pipeline (huggingface/tokenizers `TokenizerImpl::encode_single_sequence`):
//   1. added tokens with `normalized: false` are cut out of the raw text (leftmost-longest match,
//      honouring lstrip / rstrip / single_word); each becomes one id;
//   2. every other segment is normalized (NFC), then added tokens with `normalized: true` are cut
//      out of the normalized segments the same way;
//   3. the pre-tokenizers run in order on each remaining segment (Split / Digits / ByteLevel);
//      empty pieces are dropped after every step;
//   4. the BPE model turns each piece into ids: initial symbols are the piece's characters, then
//      the pair with the lowest merge rank is merged first, leftmost on ties (a min-heap, as in
//      `tokenizers/src/models/bpe/word.rs`); results of short pieces are cached;
//   5. with add_special_tokens, the post-processor template (e.g. a BOS) is applied.
// Decoding maps ids to token strings, drops special tokens if asked, turns byte-level characters
// back into bytes and replaces invalid UTF-8 by U+FFFD per maximal invalid subpart (Rust's
// `String::from_utf8_lossy`, which HF uses).
//
// Regexes: HF compiles Split patterns with Oniguruma (Ruby syntax); we use PCRE2 with UTF, UCP and
// MULTILINE (Ruby's ^ and $ are line anchors) on a rewritten pattern in which the escapes whose
// meaning differs between the two engines (\s \S \w \W \h \H, inline option m) carry Oniguruma's
// meaning. Matches are iterated with Oniguruma/Rust rules (an empty match right after the previous
// match is skipped). Known remaining difference: PCRE2 10.42 knows Unicode 14, HF's Oniguruma a
// newer Unicode, so characters assigned after Unicode 14 are not \p{L} / \p{N} here.
//
// Added-token ids follow HF's loader, not the `id` field of the file: a token already in the BPE
// vocabulary keeps that id, otherwise it gets the next free id after the vocabulary (a mismatch
// with the file's `id` is logged). This is what makes LLaDA's layout (special tokens at
// 126080..126348) load identically in both.
#include "io/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>

#include "core/check.h"
#include "core/log.h"
#include "io/file.h"

namespace flashdllm {
namespace {

using json = nlohmann::json;

// ------------------------------------------------------------------------------------------------
// UTF-8
// ------------------------------------------------------------------------------------------------

/// One step of UTF-8 decoding at a byte position. For an invalid sequence, `len` is the length of
/// its maximal invalid subpart (Unicode §3.9 / WHATWG / Rust `from_utf8_lossy`), at least 1.
struct Utf8Step {
  char32_t cp;
  uint32_t len;
  bool valid;
};

Utf8Step utf8_step(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1, true};
  uint32_t need = 0;
  char32_t cp = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0xFFFD, 1, false};
  }
  for (uint32_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {0xFFFD, k, false};
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < lo || b > hi) return {0xFFFD, k, false};
    lo = 0x80;
    hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, true};
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    if (!st.valid) return false;
    i += st.len;
  }
  return true;
}

/// Rust `String::from_utf8_lossy`: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Step st = utf8_step(bytes, i);
    if (st.valid) {
      out.append(bytes.substr(i, st.len));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.len;
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Unicode character classes used outside the regex engine
// ------------------------------------------------------------------------------------------------

/// Unicode White_Space (the 25 code points of Rust's and Oniguruma's \s).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

/// Rust `char::is_numeric`: general category Nd, Nl or No.
bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

/// Rust regex \w (Alphabetic, M, Nd, Pc, Join_Control), used by added tokens' `single_word`.
/// Alphabetic is approximated as L + Nl + the So letters with Other_Alphabetic (circled and squared
/// Latin letters); its other Other_Alphabetic members are marks, already covered by M.
bool is_word_char(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      break;
  }
  return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
         (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
}

// ------------------------------------------------------------------------------------------------
// GPT-2 byte <-> unicode alphabet (ByteLevel pre-tokenizer and decoder)
// ------------------------------------------------------------------------------------------------

struct ByteAlphabet {
  std::array<std::string, 256> byte_to_utf8;  // UTF-8 of the character standing for each byte
  std::array<int16_t, 0x144> cp_to_byte;      // code point -> byte, -1 if not in the alphabet

  ByteAlphabet() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      utf8_append(byte_to_utf8[b], cp);
      cp_to_byte[cp] = static_cast<int16_t>(b);
    }
  }
  int byte_of(char32_t cp) const { return cp < cp_to_byte.size() ? cp_to_byte[cp] : -1; }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

std::string byte_level_map(std::string_view s) {
  const auto& a = byte_alphabet();
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char b : s) out += a.byte_to_utf8[b];
  return out;
}

// ------------------------------------------------------------------------------------------------
// Regex (PCRE2 with Oniguruma semantics for the escapes that differ)
// ------------------------------------------------------------------------------------------------

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

/// Rewrites an Oniguruma (Ruby syntax) pattern into a PCRE2 pattern with the same meaning for the
/// constructs tokenizers use. Throws Error(kInvalidCheckpoint) naming `where` for constructs whose
/// meaning cannot be carried over (nested classes, class intersection, \W or \H inside a class).
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
        case 's':
          append_class(out, kSpaceItems, in_class, false);
          break;
        case 'S':
          // PCRE2's \S lacks U+180E, which Oniguruma's \S has.
          if (in_class) {
            out += "\\S\\x{180E}";
          } else {
            append_class(out, kSpaceItems, false, true);
          }
          break;
        case 'w':
          append_class(out, kWordItems, in_class, false);
          break;
        case 'W':
          if (in_class) unsupported("\\W inside a character class");
          append_class(out, kWordItems, false, true);
          break;
        case 'h':
          append_class(out, kHexItems, in_class, false);
          break;
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

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* c) const noexcept { pcre2_code_free(c); }
};

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

class Regex {
 public:
  /// Compiles an Oniguruma-syntax pattern. Throws Error(kInvalidCheckpoint) naming `where`.
  Regex(std::string_view onig_pattern, const std::string& where) : source_(onig_pattern) {
    const std::string translated = translate_onig_pattern(onig_pattern, where);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_compile_context* cctx = pcre2_compile_context_create(nullptr);
    FDLLM_CHECK(cctx != nullptr, ErrorCode::kOutOfMemory, "{}: cannot allocate a PCRE2 compile context", where);
    pcre2_set_newline(cctx, PCRE2_NEWLINE_LF);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_MATCH_INVALID_UTF, &err,
                                     &err_off, cctx);
    pcre2_compile_context_free(cctx);
    FDLLM_CHECK_CKPT(code != nullptr, "{}: cannot compile regex {:?}: {} (at offset {} of the PCRE2 form {:?})", where,
                     std::string(onig_pattern), pcre2_message(err), static_cast<size_t>(err_off), translated);
    code_.reset(code);
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if unavailable
  }

  /// Non-overlapping matches (start, end) in byte offsets, iterated like Oniguruma's / Rust's
  /// find_iter: the search resumes at the previous match end, and an empty match ending where the
  /// previous match ended is skipped by advancing one character.
  void find_iter(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
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

 private:
  std::string source_;
  std::unique_ptr<pcre2_code, Pcre2CodeDeleter> code_;
};

// ------------------------------------------------------------------------------------------------
// Splitting (tokenizers `NormalizedString::split` and `Pattern::find_matches`)
// ------------------------------------------------------------------------------------------------

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t start, end;
  bool flag;  // is_match for find_matches; should_remove after the behavior is applied
};

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
                       std::vector<std::string>& out) {
  std::vector<Span> splits;  // flag = should_remove
  splits.reserve(matches.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (auto m : matches) splits.push_back({m.start, m.end, false});
      break;
    case SplitBehavior::kRemoved:
      splits = std::move(matches);
      break;
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

// ------------------------------------------------------------------------------------------------
// Pipeline components
// ------------------------------------------------------------------------------------------------

// GPT-2's pattern, used by ByteLevel when use_regex is true (tokenizers pre_tokenizers/byte_level.rs).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct SplitStep {
  std::shared_ptr<const Regex> regex;
  SplitBehavior behavior;
  bool invert;
};
struct DigitsStep {
  bool individual_digits;
};
struct ByteLevelStep {
  bool add_prefix_space;
  bool use_regex;
};
using PreTokenizerStep = std::variant<SplitStep, DigitsStep, ByteLevelStep>;

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  bool operator==(const AddedToken&) const = default;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

/// Byte trie for leftmost-longest matching of added tokens (aho-corasick MatchKind::LeftmostLongest).
class TokenTrie {
 public:
  void insert(std::string_view s, int32_t id) {
    if (s.empty()) return;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    uint32_t node = 0;
    for (unsigned char b : s) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        ids_.push_back(-1);
        it = edges_.emplace(key, static_cast<uint32_t>(ids_.size() - 1)).first;
      }
      node = it->second;
    }
    if (ids_[node] < 0) ids_[node] = id;  // first pattern wins among identical ones
  }
  bool empty() const { return edges_.empty(); }

  /// Leftmost match at or after `from`, longest among those starting there: {start, end, id}.
  std::optional<std::tuple<size_t, size_t, int32_t>> find(std::string_view s, size_t from) const {
    for (size_t i = from; i < s.size(); ++i) {
      if (!first_byte_[static_cast<unsigned char>(s[i])]) continue;
      uint32_t node = 0;
      size_t best_end = 0;
      int32_t best_id = -1;
      for (size_t j = i; j < s.size(); ++j) {
        const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[j]));
        if (it == edges_.end()) break;
        node = it->second;
        if (ids_[node] >= 0) {
          best_end = j + 1;
          best_id = ids_[node];
        }
      }
      if (best_id >= 0) return std::make_tuple(i, best_end, best_id);
    }
    return std::nullopt;
  }

 private:
  std::unordered_map<uint64_t, uint32_t> edges_;  // (node << 8 | byte) -> child node
  std::vector<int32_t> ids_{-1};                  // node -> token id (-1: not a token end); node 0 = root
  std::array<bool, 256> first_byte_{};
};

/// A segment of the input: text still to be processed (id < 0) or an extracted added token.
struct Segment {
  std::string text;
  int32_t id = -1;
};

/// Post-processor template item: a run of fixed special ids, or the encoded sequence ($A).
struct TemplateItem {
  bool is_sequence = false;
  std::vector<int32_t> ids;
};

}  // namespace

// ------------------------------------------------------------------------------------------------
// Tokenizer::Impl
// ------------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string file;  // for messages

  // normalizer
  bool nfc = false;

  // pre-tokenizer
  std::vector<PreTokenizerStep> pre_steps;
  std::shared_ptr<const Regex> gpt2_regex;  // compiled only if a ByteLevel step uses it

  // BPE model
  StringMap<int32_t> vocab;
  std::vector<std::string> vocab_r;  // id -> token (model vocabulary)
  std::vector<uint8_t> vocab_has;    // id -> known in the model vocabulary
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;  // (a << 32 | b) -> (rank, new id)
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  bool ignore_merges = false;

  // added vocabulary
  StringMap<int32_t> added_map;                   // content -> id
  std::unordered_map<int32_t, AddedToken> added_r;  // id -> token
  std::unordered_set<std::string> special_set;      // contents of special tokens
  TokenTrie raw_trie, normalized_trie;

  // post-processor: a list of templates applied in order when add_special_tokens
  std::vector<std::vector<TemplateItem>> templates;

  int32_t max_id = -1;

  // BPE cache for short pieces (HF caches pieces shorter than 256 bytes)
  static constexpr size_t kCacheMaxPieceBytes = 256;
  static constexpr size_t kCacheCapacity = 1 << 17;
  mutable std::mutex cache_mu;
  mutable StringMap<std::vector<int32_t>> cache;

  // --- loading -----------------------------------------------------------------------------------
  void load(const json& root);
  void load_normalizer(const json& j, const std::string& path);
  void load_pre_tokenizer(const json& j, const std::string& path);
  void load_model(const json& j);
  void load_added_tokens(const json& j);
  void load_post_processor(const json& j, const std::string& path);
  void load_decoder(const json& j);

  // --- encoding ----------------------------------------------------------------------------------
  std::string normalize(std::string_view s) const;
  std::vector<Segment> split_added(std::vector<Segment> segments, const TokenTrie& trie) const;
  std::vector<std::string> pre_tokenize(std::string_view s) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const {
    if (auto it = added_map.find(token); it != added_map.end()) return it->second;
    if (auto it = vocab.find(token); it != vocab.end()) return it->second;
    return std::nullopt;
  }
  const std::string* id_to_token(int32_t id) const {
    if (auto it = added_r.find(id); it != added_r.end()) return &it->second.content;
    if (id >= 0 && static_cast<size_t>(id) < vocab_has.size() && vocab_has[id]) return &vocab_r[id];
    return nullptr;
  }
};

namespace {

std::string join_path(const std::string& base, std::string_view key) {
  return base.empty() ? std::string(key) : base + "." + std::string(key);
}

const char* json_type_name(const json& j) { return j.type_name(); }

}  // namespace

// The helpers below name the file and the JSON field in every error.
#define TOK_CHECK(cond, field, ...) \
  FDLLM_CHECK_CKPT(cond, "{}: field '{}': {}", file, field, ::fmt::format(__VA_ARGS__))

void Tokenizer::Impl::load(const json& root) {
  TOK_CHECK(root.is_object(), "<root>", "expected a JSON object, got {}", json_type_name(root));
  if (auto it = root.find("version"); it != root.end()) {
    TOK_CHECK(it->is_string() && it->get<std::string>() == "1.0", "version", "unsupported version {}", it->dump());
  }
  for (const char* key : {"truncation", "padding"}) {
    if (auto it = root.find(key); it != root.end()) {
      TOK_CHECK(it->is_null(), key, "{} settings are not supported (must be null)", key);
    }
  }
  TOK_CHECK(root.contains("model"), "model", "missing");
  load_model(root.at("model"));
  load_normalizer(root.value("normalizer", json()), "normalizer");
  load_pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer");
  load_added_tokens(root.value("added_tokens", json::array()));
  load_post_processor(root.value("post_processor", json()), "post_processor");
  load_decoder(root.value("decoder", json()));
}

void Tokenizer::Impl::load_normalizer(const json& j, const std::string& path) {
  if (j.is_null()) return;
  TOK_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), path, "expected an object with a 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence") {
    const std::string sub = join_path(path, "normalizers");
    TOK_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), sub, "expected an array");
    for (size_t i = 0; i < j["normalizers"].size(); ++i) {
      load_normalizer(j["normalizers"][i], fmt::format("{}[{}]", sub, i));
    }
  } else {
    TOK_CHECK(false, join_path(path, "type"), "normalizer '{}' is not supported (supported: NFC, Sequence)", type);
  }
}

void Tokenizer::Impl::load_pre_tokenizer(const json& j, const std::string& path) {
  if (j.is_null()) return;
  TOK_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), path, "expected an object with a 'type'");
  const std::string type = j["type"].get<std::string>();
  auto get_bool = [&](const char* key, bool def) {
    if (!j.contains(key)) return def;
    TOK_CHECK(j[key].is_boolean(), join_path(path, key), "expected a boolean, got {}", json_type_name(j[key]));
    return j[key].get<bool>();
  };
  if (type == "Sequence") {
    const std::string sub = join_path(path, "pretokenizers");
    TOK_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), sub, "expected an array");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i) {
      load_pre_tokenizer(j["pretokenizers"][i], fmt::format("{}[{}]", sub, i));
    }
  } else if (type == "ByteLevel") {
    ByteLevelStep step{get_bool("add_prefix_space", true), get_bool("use_regex", true)};
    if (step.use_regex && !gpt2_regex) gpt2_regex = std::make_shared<Regex>(kGpt2Pattern, file + ": ByteLevel regex");
    pre_steps.emplace_back(step);
  } else if (type == "Digits") {
    pre_steps.emplace_back(DigitsStep{get_bool("individual_digits", false)});
  } else if (type == "Split") {
    const std::string ppath = join_path(path, "pattern");
    TOK_CHECK(j.contains("pattern") && j["pattern"].is_object() && j["pattern"].size() == 1, ppath,
              "expected {{\"Regex\": ...}} or {{\"String\": ...}}");
    const auto& pat = j["pattern"];
    std::string regex_source;
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      regex_source = pat["Regex"].get<std::string>();
    } else if (pat.contains("String") && pat["String"].is_string()) {
      const std::string lit = pat["String"].get<std::string>();
      TOK_CHECK(!lit.empty(), ppath + ".String", "an empty split string is not supported");
      regex_source = "\\Q" + lit + "\\E";
      TOK_CHECK(lit.find("\\E") == std::string::npos, ppath + ".String", "the literal may not contain \\E");
    } else {
      TOK_CHECK(false, ppath, "expected {{\"Regex\": string}} or {{\"String\": string}}");
    }
    const std::string bpath = join_path(path, "behavior");
    TOK_CHECK(j.contains("behavior") && j["behavior"].is_string(), bpath, "expected a string");
    const std::string b = j["behavior"].get<std::string>();
    SplitBehavior behavior = SplitBehavior::kIsolated;
    if (b == "Removed") {
      behavior = SplitBehavior::kRemoved;
    } else if (b == "Isolated") {
      behavior = SplitBehavior::kIsolated;
    } else if (b == "MergedWithPrevious") {
      behavior = SplitBehavior::kMergedWithPrevious;
    } else if (b == "MergedWithNext") {
      behavior = SplitBehavior::kMergedWithNext;
    } else if (b == "Contiguous") {
      behavior = SplitBehavior::kContiguous;
    } else {
      TOK_CHECK(false, bpath, "unknown behavior '{}'", b);
    }
    auto regex = std::make_shared<Regex>(regex_source, fmt::format("{}: field '{}'", file, ppath));
    pre_steps.emplace_back(SplitStep{std::move(regex), behavior, get_bool("invert", false)});
  } else {
    TOK_CHECK(false, join_path(path, "type"),
              "pre-tokenizer '{}' is not supported (supported: ByteLevel, Split, Digits, Sequence)", type);
  }
}

void Tokenizer::Impl::load_model(const json& m) {
  TOK_CHECK(m.is_object(), "model", "expected an object");
  TOK_CHECK(m.contains("type") && m["type"] == "BPE", "model.type", "only BPE models are supported, got {}",
            m.contains("type") ? m["type"].dump() : std::string("nothing"));
  auto null_or = [&](const char* key) -> const json* {
    if (!m.contains(key) || m[key].is_null()) return nullptr;
    return &m[key];
  };
  if (const json* d = null_or("dropout")) {
    TOK_CHECK(d->is_number() && d->get<double>() == 0.0, "model.dropout", "BPE dropout is not supported (got {})",
              d->dump());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = null_or(key)) {
      TOK_CHECK(v->is_string() && v->get<std::string>().empty(), std::string("model.") + key,
                "is not supported (got {})", v->dump());
    }
  }
  if (const json* v = null_or("byte_fallback")) {
    TOK_CHECK(v->is_boolean() && !v->get<bool>(), "model.byte_fallback", "byte_fallback is not supported");
  }
  if (const json* v = null_or("fuse_unk")) {
    TOK_CHECK(v->is_boolean(), "model.fuse_unk", "expected a boolean");
    fuse_unk = v->get<bool>();
  }
  if (const json* v = null_or("ignore_merges")) {
    TOK_CHECK(v->is_boolean(), "model.ignore_merges", "expected a boolean");
    ignore_merges = v->get<bool>();
  }

  TOK_CHECK(m.contains("vocab") && m["vocab"].is_object(), "model.vocab", "expected an object token -> id");
  const json& v = m["vocab"];
  vocab.reserve(v.size());
  int32_t max_vocab_id = -1;
  for (auto it = v.begin(); it != v.end(); ++it) {
    TOK_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 &&
                  it.value().get<int64_t>() < std::numeric_limits<int32_t>::max(),
              "model.vocab", "id of token {:?} must be a non-negative integer, got {}", it.key(), it.value().dump());
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    TOK_CHECK(id <= kMaxTokenId, "model.vocab", "id of token {:?} is {}, above the supported maximum {}", it.key(), id,
              kMaxTokenId);
    vocab.emplace(it.key(), id);
    max_vocab_id = std::max(max_vocab_id, id);
  }
  vocab_r.assign(static_cast<size_t>(max_vocab_id + 1), std::string());
  vocab_has.assign(static_cast<size_t>(max_vocab_id + 1), 0);
  for (const auto& [tok, id] : vocab) {
    TOK_CHECK(!vocab_has[id], "model.vocab", "id {} is used by two tokens ({:?} and {:?})", id, vocab_r[id], tok);
    vocab_r[id] = tok;
    vocab_has[id] = 1;
  }
  max_id = max_vocab_id;

  if (const json* u = null_or("unk_token")) {
    TOK_CHECK(u->is_string(), "model.unk_token", "expected a string");
    auto it = vocab.find(u->get<std::string>());
    TOK_CHECK(it != vocab.end(), "model.unk_token", "unk token {:?} is not in model.vocab", u->get<std::string>());
    unk_id = it->second;
  }

  TOK_CHECK(m.contains("merges") && m["merges"].is_array(), "model.merges", "expected an array");
  const json& ms = m["merges"];
  merges.reserve(ms.size());
  for (size_t rank = 0; rank < ms.size(); ++rank) {
    const json& e = ms[rank];
    std::string a, b;
    if (e.is_string()) {  // legacy "a b"
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      TOK_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                fmt::format("model.merges[{}]", rank), "expected \"left right\", got {:?}", s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      TOK_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
                fmt::format("model.merges[{}]", rank), "expected a pair of strings, got {}", e.dump());
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    const auto ia = vocab.find(a), ib = vocab.find(b), inew = vocab.find(a + b);
    TOK_CHECK(ia != vocab.end(), fmt::format("model.merges[{}]", rank), "token {:?} is not in model.vocab", a);
    TOK_CHECK(ib != vocab.end(), fmt::format("model.merges[{}]", rank), "token {:?} is not in model.vocab", b);
    TOK_CHECK(inew != vocab.end(), fmt::format("model.merges[{}]", rank), "merged token {:?} is not in model.vocab",
              a + b);
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) |
                         static_cast<uint32_t>(ib->second);
    merges[key] = {static_cast<uint32_t>(rank), inew->second};  // a repeated pair keeps its last rank, as in HF
  }
}

void Tokenizer::Impl::load_added_tokens(const json& arr) {
  TOK_CHECK(arr.is_array() || arr.is_null(), "added_tokens", "expected an array");
  if (arr.is_null()) return;
  std::vector<AddedToken> specials, classics;  // insertion order, as in tokenizers' AddedVocabulary
  const auto model_size = static_cast<int64_t>(vocab.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string field = fmt::format("added_tokens[{}]", i);
    const json& e = arr[i];
    TOK_CHECK(e.is_object() && e.contains("content") && e["content"].is_string(), field,
              "expected an object with a string 'content'");
    AddedToken t;
    t.content = e["content"].get<std::string>();
    auto flag = [&](const char* key, bool def) {
      if (!e.contains(key)) return def;
      TOK_CHECK(e[key].is_boolean(), field + "." + key, "expected a boolean");
      return e[key].get<bool>();
    };
    t.single_word = flag("single_word", false);
    t.lstrip = flag("lstrip", false);
    t.rstrip = flag("rstrip", false);
    t.normalized = flag("normalized", true);
    t.special = flag("special", false);

    if (t.special && !t.content.empty() && !special_set.count(t.content)) {
      specials.push_back(t);
      special_set.insert(t.content);
    }
    if (t.content.empty()) continue;
    bool duplicate = false;
    for (const auto& [id, tok] : added_r) duplicate = duplicate || tok == t;
    if (duplicate) continue;
    // tokenizers' AddedVocabulary::add_tokens: existing id, else the next id after the vocabulary.
    int64_t new_id;
    if (auto existing = token_to_id(t.content)) {
      new_id = *existing;
    } else if (added_map.empty()) {
      new_id = model_size;
    } else {
      int64_t max_added = -1;
      for (const auto& [c, id] : added_map) max_added = std::max<int64_t>(max_added, id);
      new_id = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
    }
    if (e.contains("id")) {
      TOK_CHECK(e["id"].is_number_integer(), field + ".id", "expected an integer");
      if (e["id"].get<int64_t>() != new_id) {
        logger().warn("{}: added token {:?} declares id {} but is assigned id {} (as Hugging Face tokenizers does)",
                      file, t.content, e["id"].get<int64_t>(), new_id);
      }
    }
    TOK_CHECK(new_id <= kMaxTokenId, field, "id {} is above the supported maximum {}", new_id, kMaxTokenId);
    const auto id32 = static_cast<int32_t>(new_id);
    added_map[t.content] = id32;
    added_r[id32] = t;
    if (!special_set.count(t.content)) classics.push_back(t);
    max_id = std::max(max_id, id32);
  }
  // Tries: specials then classics; non-normalized tokens match the raw text, normalized ones the
  // normalized text (their content is normalized too).
  for (const auto* list : {&specials, &classics}) {
    for (const auto& t : *list) {
      const int32_t id = *token_to_id(t.content);
      if (t.normalized) {
        normalized_trie.insert(normalize(t.content), id);
      } else {
        raw_trie.insert(t.content, id);
      }
    }
  }
}

void Tokenizer::Impl::load_post_processor(const json& j, const std::string& path) {
  if (j.is_null()) return;
  TOK_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), path, "expected an object with a 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return;  // only trims offsets; ids are unchanged
  if (type == "Sequence") {
    const std::string sub = join_path(path, "processors");
    TOK_CHECK(j.contains("processors") && j["processors"].is_array(), sub, "expected an array");
    for (size_t i = 0; i < j["processors"].size(); ++i) {
      load_post_processor(j["processors"][i], fmt::format("{}[{}]", sub, i));
    }
    return;
  }
  TOK_CHECK(type == "TemplateProcessing", join_path(path, "type"),
            "post-processor '{}' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)", type);
  const std::string spath = join_path(path, "special_tokens");
  StringMap<std::vector<int32_t>> specials;
  if (j.contains("special_tokens")) {
    TOK_CHECK(j["special_tokens"].is_object(), spath, "expected an object");
    for (auto it = j["special_tokens"].begin(); it != j["special_tokens"].end(); ++it) {
      const json& st = it.value();
      TOK_CHECK(st.is_object() && st.contains("ids") && st["ids"].is_array(), spath + "." + it.key(),
                "expected an object with an 'ids' array");
      std::vector<int32_t> ids;
      for (const auto& id : st["ids"]) {
        TOK_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                      id.get<int64_t>() < std::numeric_limits<int32_t>::max(),
                  spath + "." + it.key() + ".ids", "expected non-negative integers");
        ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
        max_id = std::max(max_id, ids.back());
      }
      specials.emplace(it.key(), std::move(ids));
    }
  }
  const std::string tpath = join_path(path, "single");
  TOK_CHECK(j.contains("single") && j["single"].is_array(), tpath, "expected an array");
  std::vector<TemplateItem> items;
  for (size_t i = 0; i < j["single"].size(); ++i) {
    const json& it = j["single"][i];
    const std::string ipath = fmt::format("{}[{}]", tpath, i);
    if (it.contains("Sequence")) {
      TOK_CHECK(it["Sequence"].is_object() && it["Sequence"].value("id", "") == "A", ipath,
                "only the sequence $A may appear in a single template");
      items.push_back({true, {}});
    } else if (it.contains("SpecialToken")) {
      TOK_CHECK(it["SpecialToken"].is_object() && it["SpecialToken"].contains("id") &&
                    it["SpecialToken"]["id"].is_string(),
                ipath, "expected {{\"SpecialToken\": {{\"id\": string}}}}");
      const std::string name = it["SpecialToken"]["id"].get<std::string>();
      auto found = specials.find(name);
      TOK_CHECK(found != specials.end(), ipath, "special token {:?} is not listed in {}", name, spath);
      items.push_back({false, found->second});
    } else {
      TOK_CHECK(false, ipath, "expected a Sequence or SpecialToken item");
    }
  }
  templates.push_back(std::move(items));
}

void Tokenizer::Impl::load_decoder(const json& j) {
  TOK_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), "decoder",
            "a ByteLevel decoder is required, got {}", j.dump());
  TOK_CHECK(j["type"] == "ByteLevel", "decoder.type", "decoder '{}' is not supported (supported: ByteLevel)",
            j["type"].get<std::string>());
}

#undef TOK_CHECK

// --- encoding ------------------------------------------------------------------------------------

std::string Tokenizer::Impl::normalize(std::string_view s) const {
  if (!nfc || s.empty()) return std::string(s);
  auto nfc_valid = [](std::string_view v, std::string& out) {
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(v.data()),
                                            static_cast<utf8proc_ssize_t>(v.size()), &dst,
                                            static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) {
      FDLLM_FAIL(ErrorCode::kInternal, "tokenizer: NFC normalization failed: {}", utf8proc_errmsg(n));
    }
    out.append(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
    std::free(dst);
  };
  std::string out;
  out.reserve(s.size());
  if (is_valid_utf8(s)) {
    nfc_valid(s, out);
    return out;
  }
  // Invalid UTF-8 (cannot come from HF, whose input is a str): normalize the valid runs only.
  size_t run = 0, i = 0;
  while (i < s.size()) {
    const Utf8Step st = utf8_step(s, i);
    if (!st.valid) {
      if (i > run) nfc_valid(s.substr(run, i - run), out);
      out.append(s.substr(i, st.len));
      run = i + st.len;
    }
    i += st.len;
  }
  if (s.size() > run) nfc_valid(s.substr(run), out);
  return out;
}

std::vector<Segment> Tokenizer::Impl::split_added(std::vector<Segment> segments, const TokenTrie& trie) const {
  if (trie.empty()) return segments;
  std::vector<Segment> out;
  out.reserve(segments.size());
  for (auto& seg : segments) {
    if (seg.id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::string_view s = seg.text;
    size_t start_offset = 0;  // end of the last accepted match
    size_t search = 0;
    while (auto m = trie.find(s, search)) {
      auto [start, stop, id] = *m;
      search = stop;
      const AddedToken& tok = added_r.at(id);
      if (tok.single_word) {
        bool start_ok = true, stop_ok = true;
        if (start > 0) {  // last character before the match must not be a word character
          size_t k = start - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          const Utf8Step st = utf8_step(s, k);
          start_ok = !(st.valid && k + st.len == start && is_word_char(st.cp));
        }
        if (stop < s.size()) {
          const Utf8Step st = utf8_step(s, stop);
          stop_ok = !(st.valid && is_word_char(st.cp));
        }
        if (!start_ok || !stop_ok) continue;
      }
      if (tok.lstrip) {  // swallow the whitespace run before the token (not before start_offset)
        size_t k = start;
        while (k > start_offset) {
          size_t b = k - 1;
          while (b > start_offset && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
          const Utf8Step st = utf8_step(s, b);
          if (!(st.valid && b + st.len == k && is_white_space(st.cp))) break;
          k = b;
        }
        start = k;
      }
      if (tok.rstrip) {
        while (stop < s.size()) {
          const Utf8Step st = utf8_step(s, stop);
          if (!(st.valid && is_white_space(st.cp))) break;
          stop += st.len;
        }
        // The match iterator still resumes at the end of the token itself, as in HF.
      }
      if (start_offset < start) out.push_back({std::string(s.substr(start_offset, start - start_offset)), -1});
      out.push_back({std::string(), id});
      start_offset = stop;
    }
    if (start_offset < s.size()) out.push_back({std::string(s.substr(start_offset)), -1});
  }
  return out;
}

std::vector<std::string> Tokenizer::Impl::pre_tokenize(std::string_view s) const {
  std::vector<std::string> pieces;
  if (s.empty()) return pieces;
  pieces.emplace_back(s);
  std::vector<std::string> next;
  for (const auto& step : pre_steps) {
    next.clear();
    if (const auto* sp = std::get_if<SplitStep>(&step)) {
      for (const auto& p : pieces) {
        auto spans = regex_find_matches(*sp->regex, p);
        if (sp->invert) {
          for (auto& m : spans) m.flag = !m.flag;
        }
        split_by_behavior(p, std::move(spans), sp->behavior, next);
      }
    } else if (const auto* dg = std::get_if<DigitsStep>(&step)) {
      for (const auto& p : pieces) {
        split_by_behavior(p, char_find_matches(p, is_numeric),
                          dg->individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, next);
      }
    } else {
      const auto& bl = std::get<ByteLevelStep>(step);
      for (auto& p : pieces) {
        if (bl.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
        if (bl.use_regex) {
          split_by_behavior(p, regex_find_matches(*gpt2_regex, p), SplitBehavior::kIsolated, next);
        } else {
          next.push_back(std::move(p));
        }
      }
      for (auto& p : next) p = byte_level_map(p);
    }
    pieces.swap(next);
  }
  return pieces;
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges) {
    if (auto it = vocab.find(piece); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() < kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bpe_merge_word(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() >= kCacheCapacity) cache.clear();
    cache.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void Tokenizer::Impl::bpe_merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t len;  // bytes covered; 0 once merged into its left neighbour
  };
  std::vector<Symbol> syms;
  syms.reserve(w.size());
  auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(syms.size());
    if (n > 0) syms.back().next = n;
    syms.push_back({id, n - 1, -1, len});
  };
  // Initial symbols: one per character; characters missing from the vocabulary become unk (fused
  // if fuse_unk) or are dropped when there is no unk token, as in tokenizers' BPE::merge_word.
  bool unk_pending = false;
  uint32_t unk_len = 0;
  for (size_t i = 0; i < w.size();) {
    const uint32_t len = utf8_step(w, i).len;
    const auto it = vocab.find(w.substr(i, len));
    if (it != vocab.end()) {
      if (unk_pending) add(*unk_id, unk_len);
      unk_pending = false;
      add(it->second, len);
    } else if (unk_id) {
      if (unk_pending && fuse_unk) {
        unk_len += len;
      } else {
        if (unk_pending) add(*unk_id, unk_len);
        unk_pending = true;
        unk_len = len;
      }
    }
    i += len;
  }
  if (unk_pending) add(*unk_id, unk_len);

  struct Merge {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<uint32_t, int32_t>* {
    const auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<>> queue;
  for (size_t i = 0; i + 1 < syms.size(); ++i) {
    if (const auto* m = lookup(syms[i].id, syms[i + 1].id)) {
      queue.push({m->first, static_cast<int32_t>(i), m->second});
    }
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const Symbol right = syms[cur.next];
    const auto* m = lookup(cur.id, right.id);
    if (!m || m->second != top.new_id) continue;  // stale entry
    const int32_t right_pos = cur.next;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    syms[right_pos].len = 0;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const auto* pm = lookup(syms[cur.prev].id, cur.id)) queue.push({pm->first, cur.prev, pm->second});
    }
    if (cur.next >= 0) {
      if (const auto* nm = lookup(cur.id, syms[cur.next].id)) queue.push({nm->first, top.pos, nm->second});
    }
  }
  for (const auto& s : syms) {
    if (s.len != 0) out.push_back(s.id);
  }
}

// ------------------------------------------------------------------------------------------------
// Tokenizer
// ------------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  const json root = read_json_file(path);
  auto impl = std::make_unique<Impl>();
  impl->file = path.string();
  try {
    impl->load(root);
  } catch (const json::exception& e) {  // a type mismatch the explicit checks did not anticipate
    FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "{}: unexpected content: {}", path.string(), e.what());
  }
  logger().debug("tokenizer {}: {} vocab entries, {} merges, {} added tokens, {} pre-tokenizer steps", impl->file,
                 impl->vocab.size(), impl->merges.size(), impl->added_r.size(), impl->pre_steps.size());
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<Segment> segments;
  segments.push_back({std::string(text), -1});
  segments = m.split_added(std::move(segments), m.raw_trie);
  for (auto& seg : segments) {
    if (seg.id < 0) seg.text = m.normalize(seg.text);
  }
  segments = m.split_added(std::move(segments), m.normalized_trie);

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    for (const auto& piece : m.pre_tokenize(seg.text)) m.bpe(piece, ids);
  }
  if (add_special_tokens) {
    for (const auto& tmpl : m.templates) {
      std::vector<int32_t> out;
      out.reserve(ids.size() + 4);
      for (const auto& item : tmpl) {
        if (item.is_sequence) {
          out.insert(out.end(), ids.begin(), ids.end());
        } else {
          out.insert(out.end(), item.ids.begin(), item.ids.end());
        }
      }
      ids.swap(out);
    }
  }
  return ids;
}

bool Tokenizer::append_token_bytes(int32_t id, bool skip_special_tokens, std::string& bytes) const {
  const Impl& m = *impl_;
  const std::string* tok = m.id_to_token(id);
  if (tok == nullptr) return false;
  if (skip_special_tokens && m.special_set.count(*tok)) return true;
  // ByteLevel decoder: map each character back to its byte; a token with any character outside
  // the byte alphabet (e.g. an added token) contributes its UTF-8 bytes unchanged.
  const auto& alphabet = byte_alphabet();
  const size_t mark = bytes.size();
  for (size_t k = 0; k < tok->size();) {
    const Utf8Step st = utf8_step(*tok, k);
    const int b = st.valid ? alphabet.byte_of(st.cp) : -1;
    if (b < 0) {
      bytes.resize(mark);
      bytes += *tok;
      return true;
    }
    bytes.push_back(static_cast<char>(b));
    k += st.len;
  }
  return true;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  TextStream text(*this, skip_special_tokens);
  text.append(ids);
  return text.text();
}

TextStream::TextStream(const Tokenizer& tokenizer, bool skip_special_tokens, bool drop_unknown_ids)
    : tok_(&tokenizer), skip_special_(skip_special_tokens), drop_unknown_(drop_unknown_ids) {}

void TextStream::append(std::span<const int32_t> ids) {
  std::string bytes = tail_;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (tok_->append_token_bytes(ids[i], skip_special_, bytes) || drop_unknown_) continue;
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "decode: ids[{}] = {} is not in the vocabulary of {} (vocab_size {})", i,
               ids[i], tok_->impl_->file, tok_->impl_->max_id + 1);
  }
  // Settle everything up to the last ASCII byte: its text is final.
  size_t cut = bytes.size();
  while (cut > 0 && static_cast<unsigned char>(bytes[cut - 1]) >= 0x80) --cut;
  text_.resize(settled_text_);
  if (cut > 0) {
    text_ += utf8_lossy(std::string_view(bytes).substr(0, cut));
    settled_text_ = text_.size();
  }
  tail_ = bytes.substr(cut);
  text_ += utf8_lossy(tail_);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* t = impl_->id_to_token(id);
  return t ? *t : std::string();
}

int32_t Tokenizer::vocab_size() const noexcept { return impl_->max_id + 1; }

bool Tokenizer::is_special(int32_t id) const noexcept {
  const std::string* t = impl_->id_to_token(id);
  return t != nullptr && impl_->special_set.count(*t) > 0;
}

}  // namespace flashdllm
