// LLaDA chat template renderer (reference-algorithms.md §A.5).
//
// The renderer is hard-wired to the Jinja program below (the `chat_template` of
// GSAI-ML/LLaDA-8B-Instruct's tokenizer_config.json, copied in data/llada-8b-instruct/). A
// checkpoint's template is accepted only if it equals this text after whitespace normalisation
// (whitespace inside Jinja tags and outside string literals is dropped; everything else, including
// text between tags and string literals, must match exactly). tests/python/test_chat_template.py
// renders the real template text with jinja2 and compares it with render().
#include "io/chat_template.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/check.h"
#include "io/file.h"

namespace flashdllm {
namespace {

using json = nlohmann::json;

constexpr std::string_view kHeaderStart = "<|start_header_id|>";
constexpr std::string_view kHeaderEnd = "<|end_header_id|>\n\n";
constexpr std::string_view kEndOfTurn = "<|eot_id|>";

// LLaDA-8B-Instruct's chat template, verbatim (the two "\n\n" are newline characters).
constexpr std::string_view kLladaTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/// Drops whitespace inside {% %}, {{ }} and {# #} that is outside quoted string literals; keeps
/// template text between tags and string literals byte for byte.
std::string normalize_template_whitespace(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  size_t i = 0;
  while (i < t.size()) {
    const bool opens = t[i] == '{' && i + 1 < t.size() && (t[i + 1] == '%' || t[i + 1] == '{' || t[i + 1] == '#');
    if (!opens) {
      out.push_back(t[i++]);
      continue;
    }
    const char kind = t[i + 1];
    const char close_first = kind == '{' ? '}' : kind;  // "}}", "%}", "#}"
    out.append(t.substr(i, 2));
    i += 2;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '\'' || c == '"') {  // string literal, with backslash escapes
        out.push_back(c);
        ++i;
        while (i < t.size() && t[i] != c) {
          if (t[i] == '\\' && i + 1 < t.size()) out.push_back(t[i++]);
          out.push_back(t[i++]);
        }
        if (i < t.size()) out.push_back(t[i++]);
      } else if (is_ascii_space(c)) {
        ++i;
      } else if (c == close_first && i + 1 < t.size() && t[i + 1] == '}') {
        out.push_back(c);
        out.push_back('}');
        i += 2;
        break;
      } else {
        out.push_back(c);
        ++i;
      }
    }
  }
  return out;
}

/// Python's str.isspace() (what Jinja's `trim` filter strips): bidi class WS, B or S, or Zs.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/// Decodes the code point starting at byte i if it is valid UTF-8 (returns its length, 0 if invalid).
size_t decode_at(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t len;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  const char32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

/// Python str.strip() on UTF-8 text (invalid bytes count as non-space).
std::string_view python_strip(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    char32_t cp = 0;
    const size_t len = decode_at(s, begin, cp);
    if (len == 0 || !is_python_space(cp)) break;
    begin += len;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t k = end - 1;
    while (k > begin && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80 && end - k < 4) --k;
    char32_t cp = 0;
    const size_t len = decode_at(s, k, cp);
    if (len == 0 || k + len != end || !is_python_space(cp)) break;
    end = k;
  }
  return s.substr(begin, end - begin);
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_config(const std::filesystem::path& path) {
  const json cfg = read_json_file(path, /*reject_duplicate_keys=*/true);
  FDLLM_CHECK_CKPT(cfg.is_object(), "{}: expected a JSON object", path.string());
  FDLLM_CHECK_CKPT(cfg.contains("chat_template"),
                   "{}: field 'chat_template' is missing; pass the prompt with --raw to skip chat templating",
                   path.string());
  const json& tmpl = cfg["chat_template"];
  FDLLM_CHECK_CKPT(tmpl.is_string(),
                   "{}: field 'chat_template' must be a string (named template lists are not supported), got {}; "
                   "pass the prompt with --raw to skip chat templating",
                   path.string(), tmpl.type_name());
  FDLLM_CHECK_CKPT(normalize_template_whitespace(tmpl.get<std::string>()) ==
                       normalize_template_whitespace(kLladaTemplate),
                   "{}: field 'chat_template' is not the LLaDA chat template, the only one this build renders; "
                   "pass the prompt with --raw to skip chat templating",
                   path.string());

  std::string bos;
  if (auto it = cfg.find("bos_token"); it != cfg.end() && !it->is_null()) {
    if (it->is_string()) {
      bos = it->get<std::string>();
    } else {
      FDLLM_CHECK_CKPT(it->is_object() && it->contains("content") && (*it)["content"].is_string(),
                       "{}: field 'bos_token' must be a string or an object with a string 'content'", path.string());
      bos = (*it)["content"].get<std::string>();
    }
  }
  return llada(std::move(bos));
}

ChatTemplateLookup find_chat_template(const std::filesystem::path& model_dir) {
  ChatTemplateLookup r;
  const std::filesystem::path path = model_dir / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    r.error = fmt::format("'{}' has no tokenizer_config.json with a chat template", model_dir.string());
    return r;
  }
  try {
    r.chat.emplace(ChatTemplate::from_tokenizer_config(path));
    return r;
  } catch (const Error& e) {
    r.error = e.what();
  }
  try {  // none declared (a base model), or one this build cannot use?
    const json cfg = read_json_file(path);
    const auto it = cfg.is_object() ? cfg.find("chat_template") : cfg.end();
    r.unusable = !cfg.is_object() || (it != cfg.end() && !it->is_null());
  } catch (const Error&) {
    r.unusable = true;
  }
  return r;
}

ChatTemplate ChatTemplate::llada(std::string bos_token) {
  ChatTemplate t;
  t.bos_token_ = std::move(bos_token);
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == 0) out += bos_token_;
    out += kHeaderStart;
    out += messages[i].role;
    out += kHeaderEnd;
    out += python_strip(messages[i].content);
    out += kEndOfTurn;
  }
  out += kHeaderStart;
  out += "assistant";
  out += kHeaderEnd;
  return out;
}

}  // namespace flashdllm
