// Hugging Face `tokenizer.json` byte-level BPE tokenizer (the kind LLaDA ships), in C++.
//
// Supported (anything else is rejected with Error(kInvalidCheckpoint) naming the file and field):
//  * normalizer: null, NFC (utf8proc), or a Sequence of those
//  * pre_tokenizer: ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern), Split with a
//    Regex or String pattern and behavior Isolated / Removed / MergedWithPrevious /
//    MergedWithNext / Contiguous (invert supported), Digits (individual_digits), and a Sequence
//    of these. Regexes run on PCRE2 with UTF and Unicode properties.
//  * model: BPE (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges, byte_fallback off)
//  * added_tokens: matched in the raw text before pre-tokenization, longest match first, each as a
//    single id (special or not; honours lstrip / rstrip / single_word / normalized flags)
//  * post_processor: null, ByteLevel, or TemplateProcessing (single template: $A plus special
//    tokens, e.g. a BOS) applied when `add_special_tokens` is true
//  * decoder: ByteLevel
// Parity with the HF `tokenizers` package is tested on >= 2000 strings (tests/python).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashdllm {

class Tokenizer {
 public:
  /// Loads `path` (a tokenizer.json). Throws Error(kIo) if unreadable, Error(kInvalidCheckpoint)
  /// naming the file and JSON field for unsupported or malformed content.
  static Tokenizer from_file(const std::filesystem::path& path);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Encodes UTF-8 text. Added/special tokens written literally in the text become single ids.
  /// `add_special_tokens` applies the post-processor template (as HF `tokenizer(text)` does).
  /// Invalid UTF-8 is encoded byte by byte (same as HF after lossless byte-level mapping).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;

  /// Decodes ids to UTF-8 (ByteLevel decoder; invalid byte sequences become U+FFFD as in HF).
  /// `skip_special_tokens` drops added tokens flagged special. Throws Error(kInvalidArgument)
  /// for ids outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  /// Id of a token string (vocabulary or added token), if any.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// Token string of an id ("" if unknown).
  std::string id_to_token(int32_t id) const;
  /// 1 + the largest id known to the tokenizer.
  int32_t vocab_size() const noexcept;
  /// True for added tokens flagged `special`.
  bool is_special(int32_t id) const noexcept;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashdllm
