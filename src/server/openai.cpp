// The OpenAI API surface (openai.h): request parsing and response objects.
#include "server/openai.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "io/file.h"
#include "server/openai_parse.h"

namespace flashdllm::server {
namespace parse_detail {

using nlohmann::json;

ApiError bad(std::string param, std::string message, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

/// A JSON value's type in the words of the API ("a string", "an integer", ...).
std::string kind_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

}  // namespace parse_detail

namespace {

using nlohmann::json;
// Nesting levels a request body may have (json_nesting_depth): far above what the API needs.
constexpr int kMaxNesting = 32;

using namespace parse_detail;

/// The fields each endpoint takes (the OpenAI fields we implement or refuse by value, and our
/// extensions); anything else is an unsupported field.
const std::set<std::string>& fields(bool chat) {
  static const std::set<std::string> common = {"model",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "n",
                                               "stream",
                                               "stream_options",
                                               "stop",
                                               "seed",
                                               "logprobs",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "logit_bias",
                                               "user",
                                               "threshold",
                                               "steps",
                                               "stream_canvas",
                                               "top_k",
                                               "metadata",
                                               "store",
                                               "service_tier"};
  static const std::set<std::string> completion = [] {
    std::set<std::string> s = common;
    for (const char* f : {"prompt", "best_of", "echo", "suffix", "response_format"}) s.insert(f);
    return s;
  }();
  static const std::set<std::string> chat_fields = [] {
    std::set<std::string> s = common;
    for (const char* f : {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                          "parallel_tool_calls", "response_format"})
      s.insert(f);
    return s;
  }();
  return chat ? chat_fields : completion;
}

}  // namespace

nlohmann::json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ApiError api_error_of(const Error& e, std::string param) {
  ApiError a;
  a.message = e.what();
  a.param = std::move(param);
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
      a.status = 400;
      break;
    case ErrorCode::kUnavailable: {
      const bool full = a.message.find("queue is full") != std::string::npos;
      a.status = full ? 429 : 503;
      a.type = full ? "rate_limit_error" : "server_error";
      a.code = full ? "queue_full" : "unavailable";
      a.param.clear();
      break;
    }
    default:
      a.status = 500;
      a.type = "server_error";
      a.param.clear();
      break;
  }
  return a;
}

ApiError context_length_error(int64_t max_model_len, int64_t prompt_tokens, int64_t canvas, int64_t max_tokens,
                              bool at_least) {
  ApiError e;
  e.message = fmt::format(
      "This model's context is {} tokens (max_model_len), but the request needs {}{}: {}{} prompt tokens and {} "
      "for max_tokens {}{}. Shorten the prompt or lower max_tokens.",
      max_model_len, at_least ? "at least " : "", prompt_tokens + canvas, at_least ? "at least " : "", prompt_tokens,
      canvas, max_tokens, canvas != max_tokens ? fmt::format(" (rounded up to the block length: {})", canvas) : "");
  if (at_least) e.message += " (The prompt was not tokenised: its length in bytes proves it too long.)";
  e.param = "max_tokens";
  e.code = "context_length_exceeded";
  return e;
}

int64_t json_value_limit(int64_t max_prompts, int64_t max_model_len) {
  constexpr int64_t kFloor = int64_t{1} << 16, kCeiling = int64_t{1} << 22;
  if (max_prompts <= 0 || max_model_len <= 0) return kFloor;
  if (max_model_len > kCeiling / max_prompts) return kCeiling;
  return std::clamp<int64_t>(max_prompts * max_model_len + 4096, kFloor, kCeiling);
}

std::string api_param_of(std::string_view key) {
  // The SamplingParams keys a request sets (parse_request below); the rest are the engine's.
  static constexpr std::pair<std::string_view, const char*> kRequestFields[] = {{"gen_length", "max_tokens"},
                                                                                {"steps", "steps"},
                                                                                {"threshold", "threshold"},
                                                                                {"temperature", "temperature"},
                                                                                {"seed", "seed"},
                                                                                {"stop", "stop"},
                                                                                {"top_p", "top_p"},
                                                                                {"top_k", "top_k"},
                                                                                {"logprobs", "logprobs"}};
  for (const auto& [k, api] : kRequestFields)
    if (k == key) return api;
  return {};
}

namespace {

/// The body as a JSON object whose every key the endpoint takes, or the 400 that says why not.
std::variant<json, ApiError> parse_body(std::string_view body, bool chat, const ParseLimits& limits) {
  // nlohmann's parser ends a document at a NUL byte and ignores what follows: a body holding one is
  // not one JSON text, whatever the bytes after it.
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos)
    return bad("", fmt::format("the request body is not valid JSON (a NUL byte at offset {})", nul));
  // One linear pass (parse_json_bounded) with bounded nesting and values: a body of 8 MB of
  // "[[[[..." cost ~250 MB to parse, 600 KB of `{}` objects 12.9 s through the callback parser; a
  // request has at most 6 levels (body, messages, message, content parts, part, image_url). A key
  // given twice is refused rather than read as its last value (a proxy or log reading the first
  // would see another request).
  JsonLimits jl;
  jl.reject_duplicate_keys = true;
  jl.max_depth = kMaxNesting;
  jl.max_values = limits.max_json_values;
  JsonParse parsed = parse_json_bounded(body, jl);
  switch (parsed.failure) {
    case JsonFailure::kNone: break;
    case JsonFailure::kDuplicateKey:
      return bad("", fmt::format("the request body holds a duplicate key '{}'", parsed.detail));
    case JsonFailure::kTooDeep:
      return bad("", fmt::format("the request body nests arrays and objects deeper than {} levels", kMaxNesting),
                 "json_too_deep");
    case JsonFailure::kTooManyValues:
      return bad("",
                 fmt::format("the request body holds more than {} JSON values (this server's limit: "
                             "every prompt of a request filled with token ids, plus room for the other fields)",
                             limits.max_json_values),
                 "json_too_many_values");
    case JsonFailure::kSyntax: return bad("", "the request body is not valid JSON (UTF-8 text)");
  }
  json j = std::move(parsed.value);
  if (!j.is_object()) return bad("", fmt::format("the request body must be a JSON object, got {}", kind_of(j)));
  const auto& allowed = fields(chat);
  for (const auto& [k, v] : j.items())
    if (!allowed.count(k)) return bad(k, fmt::format("unsupported field '{}'", k));
  return j;
}

/// Typed reads of a request body's optional fields: absent and null mean the default. Each read
/// returns nothing (absent), the value, or the 400 naming the field; they check the JSON type only
/// (the values' ranges are params.cpp's, validate_fields).
class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}
  const json* get(const char* f) const {
    auto it = j_.find(f);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  /// An integer that fits int64 (a larger one is refused as out of range, not as "not an integer").
  std::variant<std::monostate, int64_t, ApiError> integer(const char* f) const {
    const json* v = get(f);
    if (!v) return std::monostate{};
    if (v->is_number_unsigned() && !as_int(*v))
      return bad(f, fmt::format("'{}' must be in [1, 2^63), got {}", f, v->dump()));
    const auto i = as_int(*v);
    if (!i) return bad(f, fmt::format("'{}' must be an integer, got {}", f, kind_of(*v)));
    return *i;
  }
  std::variant<std::monostate, double, ApiError> number(const char* f) const {
    const json* v = get(f);
    if (!v) return std::monostate{};
    if (!v->is_number()) return bad(f, fmt::format("'{}' must be a number, got {}", f, kind_of(*v)));
    return v->get<double>();
  }
  std::variant<std::monostate, bool, ApiError> boolean(const char* f) const {
    const json* v = get(f);
    if (!v) return std::monostate{};
    if (!v->is_boolean()) return bad(f, fmt::format("'{}' must be true or false, got {}", f, kind_of(*v)));
    return v->get<bool>();
  }
  /// Refused unless it asks for nothing: `ok(v)` says whether value v is the no-op.
  template <class Ok>
  std::optional<ApiError> only(const char* f, Ok ok, const char* what) const {
    const json* v = get(f);
    if (v && !ok(*v)) return bad(f, fmt::format("'{}' is not supported ({})", f, what));
    return std::nullopt;
  }

 private:
  const json& j_;
};

/// Stores a read field into `out` (when present); returns its error.
template <class T, class U>
std::optional<ApiError> read_into(std::variant<std::monostate, T, ApiError> v, U& out) {
  if (auto* e = std::get_if<ApiError>(&v)) return *e;
  if (auto* x = std::get_if<T>(&v)) out = *x;
  return std::nullopt;
}

/// model: a string naming the served model (another one is a 404).
std::optional<ApiError> parse_model(const Fields& f, const ParseLimits& limits, std::string& model) {
  const json* m = f.get("model");
  if (!m) return bad("model", "'model' is required");
  if (!m->is_string()) return bad("model", fmt::format("'model' must be a string, got {}", kind_of(*m)));
  model = m->get<std::string>();
  if (model != limits.model_id) return model_not_found(model, limits.model_id);
  return std::nullopt;
}

/// stop: a string or an array of at most limits.max_stop strings.
std::optional<ApiError> parse_stop(const Fields& f, const ParseLimits& limits, std::vector<std::string>& stop) {
  const json* v = f.get("stop");
  if (!v) return std::nullopt;
  auto add = [&](const json& s, const std::string& at) -> std::optional<ApiError> {
    if (!s.is_string()) return bad("stop", fmt::format("'{}' must be a string, got {}", at, kind_of(s)));
    stop.push_back(s.get<std::string>());
    return std::nullopt;
  };
  if (v->is_string()) return add(*v, "stop");
  if (!v->is_array())
    return bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}", kind_of(*v)));
  if (static_cast<int64_t>(v->size()) > limits.max_stop)
    return bad("stop", fmt::format("'stop' holds {} strings; at most {}", v->size(), limits.max_stop));
  for (size_t i = 0; i < v->size(); ++i)
    if (auto e = add((*v)[i], fmt::format("stop[{}]", i))) return e;
  return std::nullopt;
}

/// The decoding parameters of a request (params.h SamplingParams): max_tokens (chat also
/// max_completion_tokens, the newer name) = gen_length, temperature, threshold, steps, seed, stop;
/// their ranges are checked once, by params.cpp (validate_fields), the field at fault mapped to its
/// request field (api_param_of).
std::optional<ApiError> parse_sampling(const Fields& f, bool chat, const ParseLimits& limits, SamplingParams& p) {
  p.gen_length = limits.default_max_tokens;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (!chat && std::string_view(name) == "max_completion_tokens") continue;
    if (auto e = read_into(f.integer(name), p.gen_length)) return e;
  }
  if (auto e = read_into(f.number("temperature"), p.temperature)) return e;
  {
    std::optional<double> threshold;
    if (auto e = read_into(f.number("threshold"), threshold)) return e;
    p.threshold = threshold;
  }
  if (auto e = read_into(f.integer("steps"), p.steps)) return e;
  // Nucleus and top-k filtering (Dream's sampler; the engine refuses them for the others). top_k is
  // no OpenAI field, but clients of vLLM and Hugging Face send it; -1 and 0 mean "off" there.
  if (auto e = read_into(f.number("top_p"), p.top_p)) return e;
  if (auto e = read_into(f.integer("top_k"), p.top_k)) return e;
  if (p.top_k == -1) p.top_k = 0;
  if (const json* v = f.get("seed")) {
    if (v->is_number_unsigned())
      p.seed = v->get<uint64_t>();
    else if (v->is_number_integer())
      p.seed = static_cast<uint64_t>(v->get<int64_t>());
    else
      return bad("seed", fmt::format("'seed' must be an integer, got {}", kind_of(*v)));
  } else {
    // No seed: a fresh one per request, so that sampled answers differ from call to call as
    // OpenAI's do without a seed (greedy decoding, temperature 0, does not read it).
    std::random_device rd;
    p.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  if (auto e = parse_stop(f, limits, p.stop)) return e;
  try {
    validate_fields(p);
  } catch (const Error& e) {
    std::string param = api_param_of(e.field());
    // The API's own name for the field (the message uses the parameter's key).
    std::string message = param.empty() || param == e.field() ? e.what() : fmt::format("'{}': {}", param, e.what());
    return bad(std::move(param), std::move(message));
  }
  return std::nullopt;
}

/// stream, stream_options (only with stream), stream_canvas (only with stream), user.
std::optional<ApiError> parse_streaming(const Fields& f, ApiRequest& r) {
  if (auto e = read_into(f.boolean("stream"), r.stream)) return e;
  if (const json* v = f.get("stream_options")) {
    if (!v->is_object()) return bad("stream_options", fmt::format("'stream_options' must be an object, got {}", kind_of(*v)));
    if (!r.stream) return bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    for (const auto& [k, x] : v->items()) {
      if (k != "include_usage")
        return bad("stream_options." + k, fmt::format("'stream_options.{}' is not supported", k));
      if (!x.is_boolean())
        return bad("stream_options.include_usage", "'stream_options.include_usage' must be true or false");
      r.include_usage = x.get<bool>();
    }
  }
  if (auto e = read_into(f.boolean("stream_canvas"), r.stream_canvas)) return e;
  if (r.stream_canvas && !r.stream) return bad("stream_canvas", "'stream_canvas' needs 'stream': true");
  if (const json* v = f.get("user"); v && !v->is_string())
    return bad("user", fmt::format("'user' must be a string, got {}", kind_of(*v)));
  return std::nullopt;
}

bool is_one(const json& v) { return as_int(v) == 1; }
bool is_zero(const json& v) { return v.is_number() && v.get<double>() == 0.0; }
bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_empty(const json& v) { return (v.is_object() || v.is_array() || v.is_string()) && v.empty(); }

/// The fields both endpoints accept only with the value that asks for nothing.
std::optional<ApiError> refuse_common_options(const Fields& f) {
  if (auto e = f.only("presence_penalty", is_zero, "penalties must be 0")) return e;
  if (auto e = f.only("frequency_penalty", is_zero, "penalties must be 0")) return e;
  if (auto e = f.only("logit_bias", is_empty, "logit_bias must be empty")) return e;
  // Fields that change nothing of the answer: accepted with their documented types, not used.
  if (auto e = f.only(
          "metadata", [](const json& v) { return v.is_object(); }, "metadata must be an object"))
    return e;
  if (auto e = f.only(
          "store", [](const json& v) { return v.is_boolean(); }, "store must be true or false (nothing is stored)"))
    return e;
  return f.only(
      "service_tier", [](const json& v) { return v == "auto" || v == "default"; },
      "service_tier must be 'auto' or 'default' (one tier here)");
}

/// Chat's tool fields, accepted where they ask for nothing: no tools (an empty list), a tool
/// choice that calls none ("none", or "auto" with no tools), parallel_tool_calls of no tools.
std::optional<ApiError> refuse_tools(const Fields& f) {
  if (auto e = f.only("tools", is_empty, "this server offers no tool calling: tools must be empty")) return e;
  if (auto e = f.only(
          "tool_choice", [](const json& v) { return v == "none" || v == "auto"; },
          "this server offers no tool calling: tool_choice must be 'none' or 'auto' (with no tools)"))
    return e;
  return f.only(
      "parallel_tool_calls", [](const json& v) { return v.is_boolean(); }, "parallel_tool_calls must be a boolean");
}

/// The fields every endpoint shares, in the order their errors take precedence: model, then (after
/// the endpoint's prompt) the decoding parameters and the streaming fields.
std::optional<ApiError> parse_shared(const Fields& f, bool chat, const ParseLimits& limits, ApiRequest& r) {
  if (auto e = parse_sampling(f, chat, limits, r.params)) return e;
  if (auto e = read_into(f.integer("n"), r.n)) return e;
  if (r.n < 1 || r.n > limits.max_n)
    return bad("n", fmt::format("'n' must be in [1, {}] (choices per prompt), got {}", limits.max_n, r.n));
  if (auto e = parse_streaming(f, r)) return e;
  return refuse_common_options(f);
}

constexpr int64_t kMaxCompletionLogprobs = 5;  // OpenAI's bound of completions' logprobs

/// Chat's logprobs (true: the committed tokens' log-probabilities) and top_logprobs (alternatives
/// per token, in [0, 20]; OpenAI refuses it without logprobs).
std::optional<ApiError> parse_chat_logprobs(const Fields& f, SamplingParams& p) {
  bool want = false;
  int64_t top = 0;
  if (auto e = read_into(f.boolean("logprobs"), want)) return e;
  if (auto e = read_into(f.integer("top_logprobs"), top)) return e;
  if (top < 0 || top > SamplingParams::kMaxTopLogprobs)
    return bad("top_logprobs",
               fmt::format("'top_logprobs' must be in [0, {}], got {}", SamplingParams::kMaxTopLogprobs, top));
  if (top > 0 && !want) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  p.logprobs = want ? top : -1;
  return std::nullopt;
}

/// POST /v1/completions: prompt (a string, token ids, or a list of either), then the shared fields;
/// logprobs, best_of, echo, suffix only as no-ops.
std::variant<ApiRequest, ApiError> parse_completion(const Fields& f, const ParseLimits& limits) {
  ApiRequest r;
  r.chat = false;
  if (auto e = parse_model(f, limits, r.model)) return *e;
  const json* p = f.get("prompt");
  if (!p) return bad("prompt", "'prompt' is required");
  if (auto e = parse_prompt(*p, limits, r.prompts)) return *e;
  if (auto e = parse_shared(f, /*chat=*/false, limits, r)) return *e;
  // logprobs k in [0, 5] (OpenAI's bound): each token's log-probability and k alternatives.
  if (auto e = read_into(f.integer("logprobs"), r.params.logprobs)) return *e;
  if (f.get("logprobs") && (r.params.logprobs < 0 || r.params.logprobs > kMaxCompletionLogprobs))
    return bad("logprobs", fmt::format("'logprobs' must be in [0, {}] (alternatives per token), got {}",
                                       kMaxCompletionLogprobs, r.params.logprobs));
  if (auto e = f.only("best_of", is_one, "best_of must be 1")) return *e;
  if (auto e = f.only("echo", is_false, "echo must be false")) return *e;
  if (auto e = f.only("suffix", is_empty, "suffix must be empty")) return *e;
  // Not an OpenAI completions field; vLLM's servers take it there too.
  if (auto e = parse_response_format(f.get("response_format"), r.stream, r.response_format)) return *e;
  return r;
}

/// POST /v1/chat/completions: messages, then the shared fields; logprobs and top_logprobs only as
/// no-ops.
std::variant<ApiRequest, ApiError> parse_chat(const Fields& f, const ParseLimits& limits) {
  ApiRequest r;
  r.chat = true;
  if (auto e = parse_model(f, limits, r.model)) return *e;
  const json* m = f.get("messages");
  if (!m) return bad("messages", "'messages' is required");
  if (auto e = parse_messages(*m, limits, r.messages)) return *e;
  if (auto e = parse_shared(f, /*chat=*/true, limits, r)) return *e;
  if (auto e = parse_chat_logprobs(f, r.params)) return *e;
  if (auto e = refuse_tools(f)) return *e;
  if (auto e = parse_response_format(f.get("response_format"), r.stream, r.response_format)) return *e;
  return r;
}

}  // namespace

std::variant<ApiRequest, ApiError> parse_request(std::string_view body, bool chat, const ParseLimits& limits) {
  auto j = parse_body(body, chat, limits);
  if (auto* e = std::get_if<ApiError>(&j)) return *e;
  const Fields f(std::get<json>(j));
  return chat ? parse_chat(f, limits) : parse_completion(f, limits);
}

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {

/// The choices array of a response and its usage: each prompt's tokens once per n choices.
std::pair<json, json> choices_and_usage(const std::vector<ChoiceResult>& choices, int64_t n, bool chat) {
  json cs = json::array();
  int64_t pt = 0, ct = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}};
    if (c.with_logprobs) choice["logprobs"] = chat ? chat_logprobs(c.logprobs) : completion_logprobs(c.logprobs);
    if (!c.format_check.is_null()) choice["response_format"] = c.format_check;
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else
      choice["text"] = c.text;
    cs.push_back(std::move(choice));
    if (n <= 1 || i % static_cast<size_t>(n) == 0) pt += c.prompt_tokens;
    ct += c.completion_tokens;
  }
  return {std::move(cs), usage_json(pt, ct)};
}

}  // namespace

nlohmann::json completion_response(const std::string& id, int64_t created, const std::string& model,
                                   const std::vector<ChoiceResult>& choices, int64_t n) {
  auto [cs, usage] = choices_and_usage(choices, n, false);
  return {{"id", id},       {"object", "text_completion"}, {"created", created},
          {"model", model}, {"choices", std::move(cs)},    {"usage", std::move(usage)}};
}

nlohmann::json chat_response(const std::string& id, int64_t created, const std::string& model,
                             const std::vector<ChoiceResult>& choices, int64_t n) {
  auto [cs, usage] = choices_and_usage(choices, n, true);
  return {{"id", id},       {"object", "chat.completion"}, {"created", created},
          {"model", model}, {"choices", std::move(cs)},    {"usage", std::move(usage)}};
}

nlohmann::json completion_chunk(const std::string& id, int64_t created, const std::string& model, int64_t index,
                                const std::string& text, const std::string& finish_reason,
                                const nlohmann::json& logprobs) {
  json choice = {{"index", index}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
  if (!finish_reason.empty()) choice["finish_reason"] = finish_reason;
  return {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}, {"choices", json::array({choice})}};
}

nlohmann::json chat_chunk(const std::string& id, int64_t created, const std::string& model, int64_t index,
                          const std::optional<std::string>& content, bool role, const std::string& finish_reason,
                          const nlohmann::json& logprobs) {
  json delta = json::object();
  if (role) delta["role"] = "assistant";
  if (content) delta["content"] = *content;
  json choice = {{"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
  if (!finish_reason.empty()) choice["finish_reason"] = finish_reason;
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

nlohmann::json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                           int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

nlohmann::json canvas_event(const std::string& id, int64_t index, const RequestEvent& ev,
                            const std::vector<std::string>& token_texts, int64_t canvas_length) {
  json j = {{"id", id},
            {"object", "canvas"},
            {"index", index},
            {"iteration", ev.iteration},
            {"positions", ev.positions},
            {"tokens", ev.tokens},
            {"texts", token_texts},
            {"stable_tokens", ev.stable_tokens}};
  if (canvas_length > 0) j["canvas_length"] = canvas_length;
  if (ev.finished) j["finish_reason"] = finish_reason_name(ev.finish_reason);
  return j;
}

std::string sse(const nlohmann::json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string sse_event(const std::string& name, const nlohmann::json& j) {
  return "event: " + name + "\n" + sse(j);
}

nlohmann::json model_response(const std::string& model_id, int64_t created) {
  return {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "flashdllm"}};
}

nlohmann::json models_response(const std::string& model_id, int64_t created) {
  return {{"object", "list"}, {"data", json::array({model_response(model_id, created)})}};
}

ApiError model_not_found(const std::string& requested, const std::string& served) {
  ApiError e;
  e.status = 404;
  e.message = fmt::format("The model '{}' does not exist: this server serves '{}'", requested, served);
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

}  // namespace flashdllm::server
