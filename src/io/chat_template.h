// Chat templates: the checkpoint's own `chat_template` (tokenizer_config.json), rendered with a
// Jinja engine (io/jinja.h, minja) as Hugging Face transformers' `apply_chat_template` renders it
// (reference-algorithms.md §A.5 for LLaDA's). tests/python/test_chat_template.py checks renderings
// of the real templates (LLaDA-8B-Instruct, Dream-v0-Instruct-7B, the small model's) against jinja2.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashdllm/request.h"  // ChatMessage

namespace flashdllm {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  /// Reads `chat_template` and the special tokens from a tokenizer_config.json and parses the
  /// template. `chat_template` is a string, or a list of {"name", "template"} objects of which
  /// the one named "default" is used (as transformers does without tools). The template gets the
  /// variables transformers passes: the special tokens bos_token, eos_token, unk_token, sep_token,
  /// pad_token, cls_token, mask_token (each a string or an {"content": ...} object; absent or null
  /// ones stay undefined) and additional_special_tokens (a list). Throws Error(kIo) if unreadable,
  /// Error(kInvalidCheckpoint) naming the file and field if `chat_template` is missing, of another
  /// type, has no "default", or does not parse (jinja::Template::parse).
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& path);
  /// LLaDA-8B-Instruct's template text (built in: data/llada-8b-instruct/tokenizer_config.json)
  /// with the given BOS string, for tests and fuzzing.
  static ChatTemplate llada(std::string bos_token);

  /// Renders `messages` (each {"role", "content"}, roles copied verbatim) with
  /// add_generation_prompt, tools = documents = None. For LLaDA's template: per message
  /// "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>", BOS
  /// before the first, then always the assistant header. Throws Error(kInvalidArgument) naming
  /// the template's file for a render error (e.g. the template's raise_exception on roles it does
  /// not accept) or a cost bound (jinja::Template::render).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;

  /// The bos_token the template sees ("" if the config has none).
  const std::string& bos_token() const noexcept { return bos_token_; }

 private:
  std::shared_ptr<const jinja::Template> template_;
  nlohmann::ordered_json specials_;  // the special-token variables (an object)
  std::string bos_token_;
};

/// What a checkpoint directory holds as its chat template: the template, or why there is none.
struct ChatTemplateLookup {
  std::optional<ChatTemplate> chat;
  std::string error;  ///< why `chat` is empty (names the directory or file)
  /// The directory's tokenizer_config.json has a template this build cannot use (it does not
  /// parse, or the field is malformed), or cannot be read as a JSON object — unlike having none
  /// (no such file, or no / a null `chat_template` field: a base model, whose prompts go as they are).
  bool unusable = false;
};
/// Looks for `model_dir`/tokenizer_config.json (ChatTemplate::from_tokenizer_config). Never throws
/// for the file's content; the reason goes to `error`.
ChatTemplateLookup find_chat_template(const std::filesystem::path& model_dir);

}  // namespace flashdllm
