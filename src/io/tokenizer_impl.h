// Internal to the tokenizer (src/io/tokenizer*.cpp): the pipeline's components and
// Tokenizer::Impl, the loaded tokenizer. Loading is tokenizer_load.cpp, encoding (normalizer,
// added tokens, pre-tokenizers, BPE merges) tokenizer_encode.cpp, the public API and decoding
// tokenizer.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/tokenizer.h"
#include "io/tokenizer_regex.h"

namespace flashdllm {
namespace tokenizer_detail {

using json = nlohmann::json;

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

}  // namespace tokenizer_detail

/// The loaded tokenizer.json (see tokenizer.h); immutable after load apart from the locked BPE cache.
struct Tokenizer::Impl {
  using json = tokenizer_detail::json;
  using AddedToken = tokenizer_detail::AddedToken;
  using PreTokenizerStep = tokenizer_detail::PreTokenizerStep;
  using Regex = tokenizer_detail::Regex;
  using Segment = tokenizer_detail::Segment;
  using TemplateItem = tokenizer_detail::TemplateItem;
  using TokenTrie = tokenizer_detail::TokenTrie;
  template <typename V>
  using StringMap = tokenizer_detail::StringMap<V>;

  std::string file;  // for messages

  // normalizer
  bool nfc = false;

  // pre-tokenizer
  std::vector<PreTokenizerStep> pre_steps;
  std::shared_ptr<const Regex> gpt2_regex;  // compiled only if a ByteLevel step uses it

  // BPE model
  StringMap<int32_t> vocab;
  std::vector<std::string> vocab_r;                                   // id -> token (model vocabulary)
  std::vector<uint8_t> vocab_has;                                     // id -> known in the model vocabulary
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;  // (a << 32 | b) -> (rank, new id)
  std::optional<int32_t> unk_id;
  bool fuse_unk = false;
  bool ignore_merges = false;

  // added vocabulary
  StringMap<int32_t> added_map;                     // content -> id
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

}  // namespace flashdllm
