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
//
// Files: tokenizer_text.* (UTF-8, character classes, the byte alphabet), tokenizer_regex.* (PCRE2
// with Oniguruma semantics, splitting), tokenizer_impl.h (the components and Tokenizer::Impl),
// tokenizer_load.cpp, tokenizer_encode.cpp, and this file (the public API, decoding).
#include "io/tokenizer.h"

#include <algorithm>
#include <string>
#include <variant>

#include "core/check.h"
#include "core/log.h"
#include "io/file.h"
#include "io/tokenizer_impl.h"

namespace flashdllm {

using namespace tokenizer_detail;  // the pipeline's components (tokenizer_impl.h)

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  return from_json(read_json_file(path), path.string());
}

Tokenizer Tokenizer::from_json(const json& root, std::string file) {
  auto impl = std::make_unique<Impl>();
  impl->file = std::move(file);
  try {
    impl->load(root);
  } catch (const json::exception& e) {  // a type mismatch the explicit checks did not anticipate
    FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "{}: unexpected content: {}", impl->file, e.what());
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

size_t Tokenizer::max_bytes_per_token() const {
  const Impl& m = *impl_;
  for (const auto& step : m.pre_steps)
    if (const auto* split = std::get_if<tokenizer_detail::SplitStep>(&step);
        split && split->behavior == tokenizer_detail::SplitBehavior::kRemoved)
      return 0;
  for (const auto& [id, tok] : m.added_r)
    if (tok.lstrip || tok.rstrip) return 0;
  if (m.unk_id && m.fuse_unk) return 0;
  if (!m.unk_id) {
    // Without an unk token the BPE drops what its vocabulary cannot spell ("axa" -> [aa]): only a
    // ByteLevel pipeline whose vocabulary holds all 256 byte symbols drops nothing.
    const bool byte_level = std::any_of(m.pre_steps.begin(), m.pre_steps.end(), [](const auto& step) {
      return std::holds_alternative<tokenizer_detail::ByteLevelStep>(step);
    });
    if (!byte_level) return 0;
    for (const std::string& symbol : tokenizer_detail::byte_alphabet().byte_to_utf8)
      if (m.vocab.find(symbol) == m.vocab.end()) return 0;
  }
  size_t longest = m.unk_id ? 4 : 1;
  std::string bytes;
  for (int32_t id = 0; id <= m.max_id; ++id) {
    bytes.clear();
    if (append_token_bytes(id, /*skip_special_tokens=*/false, bytes)) longest = std::max(longest, bytes.size());
  }
  return m.nfc ? 9 * longest : longest;
}

bool Tokenizer::is_special(int32_t id) const noexcept {
  const std::string* t = impl_->id_to_token(id);
  return t != nullptr && impl_->special_set.count(*t) > 0;
}

}  // namespace flashdllm
