// Chat templates from tokenizer_config.json, rendered on io/jinja (see chat_template.h).
#include "io/chat_template.h"

#include <string_view>
#include <utility>

#include "core/check.h"
#include "io/file.h"
#include "io/jinja.h"

namespace flashdllm {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// LLaDA-8B-Instruct's chat template, verbatim (the two "\n\n" are newline characters).
constexpr std::string_view kLladaTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";

// transformers' SpecialTokensMixin.SPECIAL_TOKENS_ATTRIBUTES with a single token each.
constexpr std::string_view kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                                  "pad_token", "cls_token", "mask_token"};

/// A special token's text: a string, or an AddedToken object {"content": ...}.
std::string token_text(const json& v, const std::string& file, std::string_view field) {
  if (v.is_string()) return v.get<std::string>();
  FDLLM_CHECK_CKPT(v.is_object() && v.contains("content") && v["content"].is_string(),
                   "{}: field '{}' must be a string or an object with a string 'content'", file, field);
  return v["content"].get<std::string>();
}

/// The template text of the `chat_template` field: a string, or the "default" of a named list.
std::string template_text(const json& tmpl, const std::string& file) {
  if (tmpl.is_string()) return tmpl.get<std::string>();
  FDLLM_CHECK_CKPT(tmpl.is_array(),
                   "{}: field 'chat_template' must be a string or a list of {{\"name\", \"template\"}} objects, got {}",
                   file, tmpl.type_name());
  for (const json& t : tmpl) {
    FDLLM_CHECK_CKPT(t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("template") &&
                         t["template"].is_string(),
                     "{}: field 'chat_template': each entry of the list must be an object with string 'name' and "
                     "'template'",
                     file);
    if (t["name"] == "default") return t["template"].get<std::string>();
  }
  FDLLM_FAIL(ErrorCode::kInvalidCheckpoint,
             "{}: field 'chat_template' lists named templates but none named 'default'; pass the prompt with --raw "
             "to skip chat templating",
             file);
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_config(const std::filesystem::path& path) {
  const std::string file = path.string();
  const json cfg = read_json_file(path, /*reject_duplicate_keys=*/true);
  FDLLM_CHECK_CKPT(cfg.is_object(), "{}: expected a JSON object", file);
  FDLLM_CHECK_CKPT(cfg.contains("chat_template") && !cfg["chat_template"].is_null(),
                   "{}: field 'chat_template' is missing; pass the prompt with --raw to skip chat templating", file);
  ChatTemplate t;
  t.specials_ = ojson::object();
  for (const std::string_view key : kSpecialTokenKeys) {
    const auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    t.specials_[std::string(key)] = token_text(*it, file, key);
  }
  if (auto it = cfg.find("additional_special_tokens"); it != cfg.end() && !it->is_null()) {
    FDLLM_CHECK_CKPT(it->is_array(), "{}: field 'additional_special_tokens' must be a list", file);
    ojson list = ojson::array();
    for (const json& v : *it) list.push_back(token_text(v, file, "additional_special_tokens"));
    t.specials_["additional_special_tokens"] = std::move(list);
  }
  if (t.specials_.contains("bos_token")) t.bos_token_ = t.specials_["bos_token"].get<std::string>();
  t.template_ = std::make_shared<const jinja::Template>(
      jinja::Template::parse(template_text(cfg["chat_template"], file), fmt::format("{} field 'chat_template'", file)));
  return t;
}

ChatTemplate ChatTemplate::llada(std::string bos_token) {
  ChatTemplate t;
  t.specials_ = ojson{{"bos_token", bos_token}};
  t.bos_token_ = std::move(bos_token);
  t.template_ =
      std::make_shared<const jinja::Template>(jinja::Template::parse(kLladaTemplate, "the built-in LLaDA template"));
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  ojson vars = specials_;
  ojson& list = vars["messages"] = ojson::array();
  for (const ChatMessage& m : messages) list.push_back(ojson{{"role", m.role}, {"content", m.content}});
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  return template_->render(vars);
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
    const auto cfg = read_json_file(path);
    const auto it = cfg.is_object() ? cfg.find("chat_template") : cfg.end();
    r.unusable = !cfg.is_object() || (it != cfg.end() && !it->is_null());
  } catch (const Error&) {
    r.unusable = true;
  }
  return r;
}

}  // namespace flashdllm
