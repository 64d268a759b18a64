// Hugging Face `tokenizer.json` byte-level BPE tokenizer (the kind LLaDA ships), in C++.
//
// Supported (anything else is rejected with Error(kInvalidCheckpoint) naming the file and field):
//  * normalizer: null, NFC (utf8proc), or a Sequence of those
//  * pre_tokenizer: ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern), Split with a
//    Regex or String pattern and behavior Isolated / Removed / MergedWithPrevious /
//    MergedWithNext / Contiguous (invert supported), Digits (individual_digits), and a Sequence
//    of these. Regexes run on PCRE2 with UTF and Unicode properties.
//  * model: BPE (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges, unk_token /
//    fuse_unk; byte_fallback off, dropout null, no subword prefix / suffix)
//  * added_tokens: matched in the raw text before pre-tokenization, longest match first, each as a
//    single id (special or not; honours lstrip / rstrip / single_word / normalized flags)
//  * post_processor: null, ByteLevel, or TemplateProcessing (single template: $A plus special
//    tokens, e.g. a BOS) applied when `add_special_tokens` is true, or a Sequence of those
//  * decoder: ByteLevel
//  * truncation / padding: must be null
// Parity with the HF `tokenizers` package is tested on >= 2000 strings (tests/python).
//
// Semantics follow `tokenizers` (0.2x), not the file's wording, where the two differ:
//  * added-token ids are assigned as HF's loader does: a token already in model.vocab keeps that
//    id, otherwise it gets the next id after the vocabulary; the `id` field is only checked
//    (a mismatch is logged). LLaDA's specials at 126080..126348 therefore need to be in
//    model.vocab or directly follow a 126080-entry vocabulary, exactly as for HF.
//  * Split regexes are Oniguruma (Ruby syntax) patterns in HF. They are rewritten for PCRE2 so that
//    \s \S \w \W \h \H, ^ $ and (?m) keep Oniguruma's meaning; nested classes and && are rejected.
//
// Known, documented differences from HF (both outside LLaDA's pre-tokenizer's reach in practice):
//  * PCRE2 10.42 knows Unicode 14: characters assigned later are not \p{L} / \p{N} here.
//  * HF's NFC uses Unicode 9.0 tables, so it leaves combining marks added since unordered; we
//    apply standard NFC (utf8proc). tests/python excludes exactly those strings for NFC variants.
//
// Thread safety: a loaded Tokenizer is immutable apart from an internal, locked BPE cache; encode
// and decode may be called concurrently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace flashdllm {

/// The largest token id a tokenizer.json may use: ids index dense tables (id -> token), so a file
/// must not make the loader allocate what one huge id claims. 2^24 - 1 is 130x LLaDA's 126,464.
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;

class Tokenizer {
 public:
  /// Loads `path` (a tokenizer.json). Throws Error(kIo) if unreadable, Error(kInvalidCheckpoint)
  /// naming the file and JSON field for unsupported or malformed content (an id above kMaxTokenId
  /// included).
  static Tokenizer from_file(const std::filesystem::path& path);
  /// Loads a Qwen2-family tokenizer saved in the "slow" format: `dir`/vocab.json, merges.txt and
  /// tokenizer_config.json (Qwen2Tokenizer, Qwen2TokenizerFast or DreamTokenizer in
  /// `tokenizer_class`; Dream-v0 ships no tokenizer.json). The pipeline is the one transformers'
  /// Qwen2Converter builds for the fast tokenizer: NFC, the Qwen2 Split regex then ByteLevel
  /// (add_prefix_space from the config, default false), BPE over the merges, ByteLevel decoder, and
  /// the config's `added_tokens_decoder` as added tokens with their flags. Throws Error(kIo) for
  /// an unreadable file, Error(kInvalidCheckpoint) naming the file and field for another
  /// tokenizer_class, a malformed merges line, or an added token whose id is not the one HF would
  /// give it (the next id after the vocabulary, in id order).
  static Tokenizer from_qwen2_files(const std::filesystem::path& dir);
  /// The tokenizer of a checkpoint directory: tokenizer.json if there is one, else the Qwen2 slow
  /// files if vocab.json and merges.txt are there, else nullopt (errors as above).
  static std::optional<Tokenizer> from_model_dir(const std::filesystem::path& dir);
  /// The file from_model_dir reads first, for messages: dir/tokenizer.json when it exists, else
  /// dir/vocab.json (the Qwen2 slow files).
  static std::filesystem::path model_dir_source(const std::filesystem::path& dir);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Encodes UTF-8 text into token ids (int32, in [0, vocab_size())). Added/special tokens written
  /// literally in the text become single ids. `add_special_tokens` applies the post-processor
  /// template (as HF `tokenizer(text)` does). Invalid UTF-8 never throws: bytes that are not part
  /// of a valid character match no regex class and go through the byte-level BPE as single bytes.
  /// Speed: ~20 ms for the 1319 GSM8K test questions on one core (BPE results are cached).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;

  /// Decodes ids to UTF-8 (ByteLevel decoder; each maximal invalid byte subsequence becomes one
  /// U+FFFD, as HF's `String::from_utf8_lossy`). `skip_special_tokens` drops added tokens flagged
  /// special. Throws Error(kInvalidArgument) naming the position for an id that maps to no token
  /// (negative, >= vocab_size(), or an unused id such as 4096..126079 in a sparse layout); HF
  /// silently drops such ids instead.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  /// Id of a token string (vocabulary or added token), if any.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  /// Token string of an id ("" if unknown).
  std::string id_to_token(int32_t id) const;
  /// 1 + the largest id known to the tokenizer.
  int32_t vocab_size() const noexcept;
  /// True for added tokens flagged `special`.
  bool is_special(int32_t id) const noexcept;
  /// The most bytes of input text one token of encode() can stand for, so that a text of B bytes
  /// encodes to at least ceil(B / max_bytes_per_token()) tokens; 0 when this tokenizer gives no
  /// such bound (a Split step that removes text, an added token with lstrip / rstrip, a fused unk,
  /// or no unk token and a vocabulary that cannot spell every byte: the BPE drops such text).
  /// It is the longest token's bytes (an added token: its UTF-8 content; 4 with an unk token, one
  /// character's most), times 9 with the NFC normalizer: NFC shortens UTF-8 text at most 3x through
  /// decomposition (U+1FEF -> "`") and 3x through composition (U+0390 from 6 bytes), measured over
  /// every code point with Python's unicodedata. Used to refuse a prompt too long for a context
  /// before tokenising it (encoding holds ~86 bytes per byte of text). O(vocab_size()) per call.
  size_t max_bytes_per_token() const;

 private:
  friend class TextStream;
  /// Appends the ByteLevel bytes of `id` to `bytes` (nothing for a skipped special token). Returns
  /// false, appending nothing, for an id that maps to no token.
  bool append_token_bytes(int32_t id, bool skip_special_tokens, std::string& bytes) const;
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  /// Loads a parsed tokenizer.json; `file` names it in errors.
  static Tokenizer from_json(const nlohmann::json& root, std::string file);
  std::unique_ptr<Impl> impl_;
};

/// Tokenizer::decode of a growing id sequence (a streamed answer), incrementally: after every
/// append, text() equals decode(every id appended so far, skip_special_tokens), in time linear in
/// the new ids' bytes plus the bytes since the last ASCII byte. (UTF-8 decoding restarts after any
/// ASCII byte, which no multi-byte sequence or invalid subpart can contain, so the text up to it
/// never changes; a later token's bytes may still complete a character begun after it.)
class TextStream {
 public:
  /// `tokenizer` must outlive the stream. drop_unknown_ids: an id that maps to no token is skipped
  /// (as the engine does for LM-head rows the tokenizer lacks) instead of rejected.
  TextStream(const Tokenizer& tokenizer, bool skip_special_tokens, bool drop_unknown_ids = false);
  /// Appends ids. Throws Error(kInvalidArgument) for an id that maps to no token unless
  /// drop_unknown_ids (the stream is then unchanged).
  void append(std::span<const int32_t> ids);
  /// The decoded text of every id appended so far.
  const std::string& text() const noexcept { return text_; }

 private:
  const Tokenizer* tok_;
  bool skip_special_, drop_unknown_;
  std::string tail_;         // bytes after the last ASCII byte (their text may still change)
  std::string text_;         // text of the settled bytes, then of tail_
  size_t settled_text_ = 0;  // text_[0, settled_text_) is the settled bytes' text
};

}  // namespace flashdllm
