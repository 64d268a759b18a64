// Tokenizer::Impl's loading of tokenizer.json: normalizer, pre-tokenizer, BPE model, added tokens,
// post-processor and decoder, each checked and named in its errors (tokenizer.h lists what is
// supported).
#include <algorithm>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "io/tokenizer_impl.h"

namespace flashdllm {

using namespace tokenizer_detail;  // the pipeline's components (tokenizer_impl.h)

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
    const uint64_t key =
        (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
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
        TOK_CHECK(
            id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < std::numeric_limits<int32_t>::max(),
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
      TOK_CHECK(
          it["SpecialToken"].is_object() && it["SpecialToken"].contains("id") && it["SpecialToken"]["id"].is_string(),
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

}  // namespace flashdllm
