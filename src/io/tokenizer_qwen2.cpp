// Qwen2-family tokenizers saved in the "slow" format (vocab.json + merges.txt +
// tokenizer_config.json), turned into the tokenizer.json that transformers' Qwen2Converter
// (convert_slow_tokenizer.py) builds from them, then loaded as any tokenizer.json. Dream-v0 ships
// only these files (its DreamTokenizer is Qwen2Tokenizer under another name). The parity test
// (tests/python/test_tokenizer_parity.py) builds the same pipeline with HF `tokenizers`.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/file.h"
#include "io/tokenizer.h"

namespace flashdllm {
namespace {

using json = nlohmann::json;

// transformers' tokenization_qwen2.PRETOKENIZE_REGEX (the Split of Qwen2Converter).
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Classes[] = {"Qwen2Tokenizer", "Qwen2TokenizerFast", "DreamTokenizer"};

/// merges.txt as Qwen2Tokenizer reads it: each line stripped, a first line "#version..." and empty
/// lines skipped, the rest exactly two space-separated symbols.
json read_merges(const std::filesystem::path& path) {
  const std::string text = read_regular_file(path);
  json merges = json::array();
  size_t line_no = 0;
  for (size_t pos = 0; pos <= text.size(); ++line_no) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    std::string_view line = std::string_view(text).substr(pos, eol - pos);
    pos = eol + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || (line_no == 0 && line.starts_with("#version"))) continue;
    const size_t sp = line.find(' ');
    FDLLM_CHECK_CKPT(sp != std::string_view::npos && sp > 0 && line.find(' ', sp + 1) == std::string_view::npos,
                     "{}: line {}: expected two symbols separated by one space", path.string(), line_no + 1);
    merges.push_back(json::array({std::string(line.substr(0, sp)), std::string(line.substr(sp + 1))}));
  }
  return merges;
}

/// The config's added_tokens_decoder as tokenizer.json `added_tokens`, in id order.
json added_tokens(const json& cfg, const std::string& file) {
  json out = json::array();
  const auto it = cfg.find("added_tokens_decoder");
  if (it == cfg.end() || it->is_null()) return out;
  FDLLM_CHECK_CKPT(it->is_object(), "{}: field 'added_tokens_decoder' must be an object", file);
  std::vector<std::pair<long long, json>> byid;
  for (const auto& [key, tok] : it->items()) {
    long long id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
    }
    FDLLM_CHECK_CKPT(id >= 0 && id <= kMaxTokenId,
                     "{}: field 'added_tokens_decoder': key '{}' is not a token id in [0, {}]", file, key, kMaxTokenId);
    FDLLM_CHECK_CKPT(tok.is_object() && tok.contains("content") && tok["content"].is_string(),
                     "{}: field 'added_tokens_decoder.{}' must be an object with a string 'content'", file, key);
    json t = {{"id", id}, {"content", tok["content"]}};
    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized", "special"}) {
      const auto f = tok.find(flag);
      FDLLM_CHECK_CKPT(f == tok.end() || f->is_boolean(), "{}: field 'added_tokens_decoder.{}.{}' must be a boolean",
                       file, key, flag);
      // AddedToken defaults: normalized = not special.
      t[flag] = f != tok.end()                           ? f->get<bool>()
                : std::string_view(flag) == "normalized" ? !tok.value("special", false)
                                                         : false;
    }
    byid.emplace_back(id, std::move(t));
  }
  std::sort(byid.begin(), byid.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [id, t] : byid) out.push_back(std::move(t));
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_qwen2_files(const std::filesystem::path& dir) {
  const std::string config_file = (dir / "tokenizer_config.json").string();
  const json cfg = read_json_file(dir / "tokenizer_config.json");
  FDLLM_CHECK_CKPT(cfg.is_object(), "{}: expected a JSON object", config_file);
  const std::string cls =
      cfg.value("tokenizer_class", json()).is_string() ? cfg["tokenizer_class"].get<std::string>() : "";
  FDLLM_CHECK_CKPT(std::find(std::begin(kQwen2Classes), std::end(kQwen2Classes), cls) != std::end(kQwen2Classes),
                   "{}: field 'tokenizer_class' is '{}'; without a tokenizer.json only the Qwen2 family's vocab.json + "
                   "merges.txt are read (Qwen2Tokenizer, Qwen2TokenizerFast, DreamTokenizer)",
                   config_file, cls);
  const auto aps = cfg.find("add_prefix_space");
  FDLLM_CHECK_CKPT(aps == cfg.end() || aps->is_boolean() || aps->is_null(),
                   "{}: field 'add_prefix_space' must be a boolean", config_file);
  const bool add_prefix_space = aps != cfg.end() && aps->is_boolean() && aps->get<bool>();

  json root = {
      {"version", "1.0"},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", std::string(kQwen2Pattern)}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       {{"type", "ByteLevel"},
                                        {"add_prefix_space", add_prefix_space},
                                        {"trim_offsets", false},
                                        {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", read_json_file(dir / "vocab.json")},
        {"merges", read_merges(dir / "merges.txt")}}},
      {"added_tokens", added_tokens(cfg, config_file)}};
  Tokenizer tok = from_json(root, fmt::format("{} (vocab.json, merges.txt, tokenizer_config.json)", dir.string()));
  // HF gives an added token outside the vocabulary the next free id; the slow tokenizer uses the
  // config's id. They must agree, or the ids the model was trained on are not the ones we produce.
  for (const json& t : root["added_tokens"]) {
    const auto id = tok.token_to_id(t["content"].get<std::string>());
    FDLLM_CHECK_CKPT(id && *id == t["id"].get<int64_t>(),
                     "{}: field 'added_tokens_decoder': token {} has id {} but loads as {} (added tokens must follow "
                     "the vocabulary in id order)",
                     config_file, t["content"].dump(), t["id"].get<int64_t>(), id ? std::to_string(*id) : "none");
  }
  return tok;
}

std::optional<Tokenizer> Tokenizer::from_model_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / "tokenizer.json", ec)) return from_file(dir / "tokenizer.json");
  if (std::filesystem::exists(dir / "vocab.json", ec) && std::filesystem::exists(dir / "merges.txt", ec))
    return from_qwen2_files(dir);
  return std::nullopt;
}

std::filesystem::path Tokenizer::model_dir_source(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::exists(dir / "tokenizer.json", ec) ? dir / "tokenizer.json" : dir / "vocab.json";
}

}  // namespace flashdllm
