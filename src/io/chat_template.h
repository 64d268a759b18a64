// The LLaDA chat template (reference §A.5), read from `tokenizer_config.json`.
//
// LLaDA's template is a short Jinja program. We do not embed a Jinja interpreter: the renderer
// below is hard-wired to LLaDA's template semantics and is only used when the checkpoint's
// `chat_template` text equals (after whitespace normalisation) the known LLaDA template; any
// other template is rejected with a clear error suggesting --raw. tests/python checks this
// renderer against jinja2 rendering of the template text itself.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "flashdllm/request.h"  // ChatMessage

namespace flashdllm {

class ChatTemplate {
 public:
  /// Reads `chat_template` and `bos_token` from a tokenizer_config.json. Throws Error(kIo) if
  /// unreadable, Error(kInvalidCheckpoint) naming the file if `chat_template` is missing or is not
  /// the LLaDA template.
  static ChatTemplate from_tokenizer_config(const std::filesystem::path& path);
  /// The LLaDA template with the given BOS string (for tests and checkpoints without a config).
  static ChatTemplate llada(std::string bos_token);

  /// Renders messages: per message "<|start_header_id|>" + role + "<|end_header_id|>\n\n" +
  /// trim(content) + "<|eot_id|>", BOS before the first, then always the assistant header
  /// (the template has no add_generation_prompt switch). trim is Python's str.strip() (Jinja's
  /// `trim`): Unicode whitespace incl. U+001C..U+001F, not U+180E / U+200B / U+FEFF. With no
  /// messages the result is the assistant header alone (no BOS). Roles are copied verbatim.
  std::string render(const std::vector<ChatMessage>& messages) const;

  const std::string& bos_token() const noexcept { return bos_token_; }

 private:
  std::string bos_token_;
};

/// What a checkpoint directory holds as its chat template: the template, or why there is none.
struct ChatTemplateLookup {
  std::optional<ChatTemplate> chat;
  std::string error;  ///< why `chat` is empty (names the directory or file)
  /// The directory's tokenizer_config.json asks for a template this build cannot use, or cannot be
  /// read as a JSON object — unlike having none (no such file, or no / a null `chat_template`
  /// field: a base model, whose prompts go as they are).
  bool unusable = false;
};
/// Looks for `model_dir`/tokenizer_config.json (ChatTemplate::from_tokenizer_config). Never throws
/// for the file's content; the reason goes to `error`.
ChatTemplateLookup find_chat_template(const std::filesystem::path& model_dir);

}  // namespace flashdllm
