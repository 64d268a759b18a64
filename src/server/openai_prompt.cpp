// Prompts and chat messages of OpenAI requests (openai_parse.h).
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "server/openai_parse.h"

namespace flashdllm::server::parse_detail {
namespace {

using nlohmann::json;

/// One prompt entry of token ids; nullopt when `v` is not an array of integers in [0, 2^31).
std::optional<std::vector<int32_t>> token_ids(const json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& t : v) {
    const auto i = as_int(t);
    if (!i || *i < 0 || *i > std::numeric_limits<int32_t>::max()) return std::nullopt;
    ids.push_back(static_cast<int32_t>(*i));
  }
  return ids;
}

/// 400 context_length_exceeded when `bytes` of prompt text prove at least max_model_len tokens
/// (ParseLimits::max_bytes_per_token): nothing is left for the answer, whatever max_tokens.
std::optional<ApiError> text_too_long(size_t bytes, const char* param, const ParseLimits& limits) {
  const size_t per_token = limits.max_bytes_per_token;
  if (per_token == 0 || limits.max_model_len <= 0) return std::nullopt;
  const auto least = static_cast<int64_t>((bytes + per_token - 1) / per_token);
  if (least < limits.max_model_len) return std::nullopt;
  return bad(param,
             fmt::format("'{}' holds {} bytes of text: at least {} tokens (a token of this model's tokenizer "
                         "covers at most {} bytes), more than this model's context of {} tokens (max_model_len) "
                         "leaves room for. Shorten the prompt.",
                         param, bytes, least, per_token, limits.max_model_len),
             "context_length_exceeded");
}

/// The bytes of a message's content (a string or text parts; 0 for anything else, refused later).
size_t content_bytes(const json& msg) {
  auto it = msg.find("content");
  if (it == msg.end()) return 0;
  if (it->is_string()) return it->get_ref<const std::string&>().size();
  size_t n = 0;
  if (it->is_array())
    for (const json& part : *it)
      if (part.is_object())
        if (auto t = part.find("text"); t != part.end() && t->is_string()) n += t->get_ref<const std::string&>().size();
  return n;
}

}  // namespace

std::optional<ApiError> parse_prompt(const json& p, const ParseLimits& limits, std::vector<GenerateRequest>& out) {
  std::optional<ApiError> too_long;  // a text prompt its bytes prove longer than the context
  auto text = [&](const json& s) {
    const auto& str = s.get_ref<const std::string&>();
    if (!too_long) too_long = text_too_long(str.size(), "prompt", limits);
    if (too_long) return;
    GenerateRequest r;
    r.prompt = str;
    r.chat = false;  // completions take the prompt as it is (no chat template)
    out.push_back(std::move(r));
  };
  auto ids = [&](std::vector<int32_t> v) {
    GenerateRequest r;
    r.prompt_ids = std::move(v);
    r.chat = false;
    out.push_back(std::move(r));
  };
  if (p.is_string()) {
    text(p);
    return too_long;
  }
  if (!p.is_array())
    return bad("prompt",
               fmt::format("'prompt' must be a string, an array of strings, an array of token ids or an array "
                           "of token-id arrays, got {}",
                           kind_of(p)));
  if (p.empty()) return bad("prompt", "'prompt' is an empty array");
  if (p.front().is_number()) {
    auto v = token_ids(p);
    if (!v) return bad("prompt", "'prompt' as token ids must hold integers in [0, 2^31)");
    ids(std::move(*v));
    return std::nullopt;
  }
  if (static_cast<int64_t>(p.size()) > limits.max_prompts)
    return bad("prompt",
               fmt::format("'prompt' holds {} prompts; at most {} per request", p.size(), limits.max_prompts));
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].is_string()) {
      text(p[i]);
      if (too_long) return too_long;
    } else if (auto v = token_ids(p[i])) {
      if (v->empty()) return bad("prompt", fmt::format("'prompt[{}]' is an empty token-id array", i));
      ids(std::move(*v));
    } else {
      return bad("prompt", fmt::format("'prompt[{}]' must be a string or an array of token ids in [0, 2^31), got {}", i,
                                       kind_of(p[i])));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& m, const ParseLimits& limits, std::vector<ChatMessage>& out) {
  if (!m.is_array() || m.empty()) return bad("messages", "'messages' must be a non-empty array of messages");
  size_t text_bytes = 0;
  for (const json& msg : m)
    if (msg.is_object()) text_bytes += content_bytes(msg);
  if (auto e = text_too_long(text_bytes, "messages", limits)) return e;
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!msg.is_object()) return bad(at, fmt::format("'{}' must be an object, got {}", at, kind_of(msg)));
    for (const auto& [k, v] : msg.items())
      if (k != "role" && k != "content" && k != "name" && k != "tool_call_id" && k != "tool_calls")
        return bad(at + "." + k, fmt::format("'{}.{}' is not supported (a message has role, content, name; a tool "
                                             "message tool_call_id)",
                                             at, k));
    if (!msg.contains("role") || !msg["role"].is_string())
      return bad(at + ".role", fmt::format("'{}.role' must be a string", at));
    std::string role = msg["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      return bad(at + ".role",
                 fmt::format("'{}.role' must be system, developer, user, assistant or tool, got '{}'", at, role));
    if (role == "developer") role = "system";  // OpenAI's newer name for the system message
    for (const char* k : {"name", "tool_call_id"})
      if (msg.contains(k) && !msg[k].is_string())
        return bad(at + "." + k, fmt::format("'{}.{}' must be a string", at, k));
    if (msg.contains("tool_call_id") && role != "tool")
      return bad(at + ".tool_call_id", fmt::format("'{}.tool_call_id' belongs to a tool message", at));
    // Tool calls cannot be made here (no tools are offered): an assistant message may carry none.
    if (msg.contains("tool_calls") &&
        !(msg["tool_calls"].is_null() || (msg["tool_calls"].is_array() && msg["tool_calls"].empty())))
      return bad(at + ".tool_calls", fmt::format("'{}.tool_calls' is not supported (this server offers no tools)", at));
    ChatMessage cm;
    cm.role = role;
    if (!msg.contains("content")) return bad(at + ".content", fmt::format("'{}.content' is required", at));
    const json& c = msg["content"];
    if (c.is_null() && role == "assistant") {
      // An assistant turn without text (OpenAI sends content null beside tool calls): empty.
    } else if (c.is_string()) {
      cm.content = c.get<std::string>();
    } else if (c.is_array()) {
      for (size_t k = 0; k < c.size(); ++k) {
        const json& part = c[k];
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string() || part.size() != 2)
          return bad(at + ".content",
                     fmt::format("'{}.content[{}]' must be {{\"type\": \"text\", \"text\": ...}} (only "
                                 "text parts are supported)",
                                 at, k));
        cm.content += part["text"].get<std::string>();
      }
    } else {
      return bad(at + ".content",
                 fmt::format("'{}.content' must be a string or an array of text parts, got {}", at, kind_of(c)));
    }
    out.push_back(std::move(cm));
  }
  return std::nullopt;
}

}  // namespace flashdllm::server::parse_detail
