// The OpenAI API's output options (openai.h): the logprobs objects of responses and chunks, and
// response_format: its parsing (openai_parse.h) and the check of an answer against it.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "io/file.h"
#include "server/json_schema.h"
#include "server/openai.h"
#include "server/openai_parse.h"

namespace flashdllm::server {
namespace parse_detail {

using nlohmann::json;

/// response_format: {"type": "text"} | {"type": "json_object"} | {"type": "json_schema",
/// "json_schema": {"name", "schema", "strict", "description"}}; the schema within json_schema.h's
/// subset. Not with stream: an answer is validated whole before it is sent.
std::optional<ApiError> parse_response_format(const json* v, bool stream, ResponseFormat& rf) {
  if (!v) return std::nullopt;
  if (!v->is_object())
    return bad("response_format", fmt::format("'response_format' must be an object, got {}", kind_of(*v)));
  const auto type = v->find("type");
  if (type == v->end() || !type->is_string())
    return bad("response_format.type", "'response_format.type' must be 'text', 'json_object' or 'json_schema'");
  const std::string t = type->get<std::string>();
  for (const auto& [k, x] : v->items())
    if (k != "type" && !(k == "json_schema" && t == "json_schema"))
      return bad("response_format." + k, fmt::format("'response_format.{}' is not allowed with type '{}'", k, t));
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    rf.kind = ResponseFormat::Kind::kJsonObject;
  } else if (t == "json_schema") {
    rf.kind = ResponseFormat::Kind::kJsonSchema;
    const auto js = v->find("json_schema");
    if (js == v->end() || !js->is_object())
      return bad("response_format.json_schema", "'response_format.json_schema' must be an object {name, schema}");
    for (const auto& [k, x] : js->items()) {
      const std::string at = "response_format.json_schema." + k;
      if (k == "name" && x.is_string() && !x.get<std::string>().empty() && x.get<std::string>().size() <= 64)
        rf.name = x.get<std::string>();
      else if (k == "strict" && x.is_boolean())
        rf.strict = x.get<bool>();
      else if (k == "description" && x.is_string())
        continue;
      else if (k == "schema" && x.is_object())
        rf.schema = x;
      else if (k == "name" || k == "strict" || k == "description" || k == "schema")
        return bad(at, fmt::format("'{}' must be {}", at,
                                   k == "name"     ? "a string of 1 to 64 characters"
                                   : k == "strict" ? "true or false"
                                   : k == "schema" ? "an object (a JSON schema)"
                                                   : "a string"));
      else
        return bad(at, fmt::format("unsupported field '{}'", at));
    }
    if (rf.name.empty())
      return bad("response_format.json_schema.name", "'response_format.json_schema.name' is required");
    if (rf.schema.is_null()) rf.schema = json::object();  // OpenAI: absent = any JSON
    if (auto p = check_schema(rf.schema)) {
      const std::string at =
          p->path.empty() ? "response_format.json_schema.schema" : "response_format.json_schema.schema." + p->path;
      return bad(at, fmt::format("'{}': {}", at, p->message), "invalid_json_schema");
    }
  } else {
    return bad("response_format.type",
               fmt::format("'response_format.type' must be 'text', 'json_object' or 'json_schema', got '{}'", t));
  }
  if (stream)
    return bad("response_format",
               "'response_format' json_object / json_schema cannot be streamed by this server: "
               "an answer is validated whole (and drawn again when invalid) before it is sent");
  return std::nullopt;
}

}  // namespace parse_detail

using nlohmann::json;

namespace {

json utf8_bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

/// A logprob as JSON: finite, or null (a non-finite row; the request failed before any answer).
json logprob_value(float lp) { return std::isfinite(lp) ? json(lp) : json(nullptr); }

}  // namespace

std::vector<LogprobEntry> logprob_entries_of(const std::vector<TokenLogprob>& lps,
                                             const std::function<std::string(int32_t)>& decode) {
  std::vector<LogprobEntry> out;
  out.reserve(lps.size());
  for (const TokenLogprob& t : lps) {
    LogprobEntry e;
    e.token = t.token >= 0 ? decode(t.token) : "";
    e.logprob = t.logprob;
    for (const TopLogprob& a : t.top) e.top.emplace_back(decode(a.token), a.logprob);
    out.push_back(std::move(e));
  }
  return out;
}

nlohmann::json chat_logprobs(const std::vector<LogprobEntry>& entries) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    json top = json::array();
    for (const auto& [tok, lp] : e.top)
      top.push_back({{"token", tok}, {"logprob", logprob_value(lp)}, {"bytes", utf8_bytes(tok)}});
    content.push_back({{"token", e.token},
                       {"logprob", logprob_value(e.logprob)},
                       {"bytes", utf8_bytes(e.token)},
                       {"top_logprobs", top}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

nlohmann::json completion_logprobs(const std::vector<LogprobEntry>& entries, int64_t offset0) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  int64_t offset = offset0;
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.token);
    lps.push_back(logprob_value(e.logprob));
    json top = json::object();
    for (const auto& [tok, lp] : e.top)
      if (!top.contains(tok)) top[tok] = logprob_value(lp);  // two ids of one text: the more probable
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(e.token.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

std::optional<std::string> check_answer_format(const ResponseFormat& rf, const std::string& text) {
  if (rf.kind == ResponseFormat::Kind::kText) return std::nullopt;
  // The answer is untrusted text: the bounded parser (linear, depth and size bounds).
  JsonLimits jl;
  jl.max_depth = 64;
  jl.max_values = int64_t{1} << 20;
  JsonParse parsed = parse_json_bounded(text, jl);
  if (parsed.failure == JsonFailure::kTooDeep) return "the answer nests JSON deeper than 64 levels";
  if (parsed.failure != JsonFailure::kNone)
    return fmt::format("the answer is not JSON{}", parsed.detail.empty() ? "" : ": " + parsed.detail);
  if (rf.kind == ResponseFormat::Kind::kJsonObject)
    return parsed.value.is_object() ? std::nullopt : std::optional<std::string>("the answer is JSON but not an object");
  if (auto e = validate_json(parsed.value, rf.schema)) return "the answer does not match the schema " + *e;
  return std::nullopt;
}

}  // namespace flashdllm::server
