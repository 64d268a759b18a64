// The OpenAI API surface of `flashdllm serve`, without any HTTP: request bodies parsed into typed
// requests (every field checked, unsupported ones refused), and the response, chunk and error
// objects as the `openai` client expects them (https://platform.openai.com/docs/api-reference:
// completions, chat completions, models, errors). Pure functions, so the parser is unit-tested and
// fuzzed on its own (tests/server, tests/fuzz).
//
// Deviations from OpenAI (docs/serving.md): `temperature` defaults to 0 (greedy, the method's
// setting); `max_tokens` defaults to the server's --default-max-tokens for both endpoints; `n` is
// at most ParseLimits::max_n (sample j of a prompt seeded seed + j; usage counts each prompt once);
// `best_of`, `echo`, `suffix`, penalties, `logit_bias`, `tools`, `tool_choice`, `service_tier` are
// refused unless they ask for nothing (`metadata`, `store`, `user` are accepted, unused); `logprobs`
// / `top_logprobs` report the committed tokens' log-probabilities (TokenLogprob); `response_format`
// json_object / json_schema is validated and retried, not constrained; roles `developer` (= system)
// and `tool`;
// extensions: `threshold` (ε), `steps` (quota decoding) and `stream_canvas` (the live denoising
// events).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashdllm/engine.h"

namespace flashdllm::server {

/// An OpenAI error: the HTTP status and the body's fields ({"error": {message, type, param, code}}).
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  ///< the request field at fault ("" = null)
  std::string code;   ///< "" = null
};

/// The error object for `e` (the body of the HTTP response).
nlohmann::json error_body(const ApiError& e);
/// An Error of the engine as an API error: kInvalidArgument -> 400 (param when known), kUnavailable
/// -> 429 (queue full) or 503 (shutting down), everything else -> 500.
ApiError api_error_of(const Error& e, std::string param = {});
/// The request field of a decoding parameter, by its canonical key (Error::field(), set by
/// params.cpp's validation): gen_length -> "max_tokens"; steps, threshold, temperature, seed and
/// stop keep their names; any other key (an engine setting, not a request field) -> "".
std::string api_param_of(std::string_view key);

/// 400 context_length_exceeded (param max_tokens): a prompt of `prompt_tokens` tokens (`at_least`:
/// a lower bound from its bytes, the prompt not tokenised) and a canvas of `canvas` positions
/// (max_tokens rounded up to the block) beyond `max_model_len`.
ApiError context_length_error(int64_t max_model_len, int64_t prompt_tokens, int64_t canvas, int64_t max_tokens,
                              bool at_least);

/// What the parser needs to know of the server.
struct ParseLimits {
  std::string model_id;              ///< the served model's id; another `model` is a 404
  int64_t default_max_tokens = 128;  ///< max_tokens when the request has none
  int64_t max_prompts = 64;          ///< completions: prompts in one request
  int64_t max_n = 128;               ///< `n`: choices per prompt (OpenAI's own bound)
  int64_t max_stop = 16;             ///< stop strings
  /// JSON values a body may hold (arrays, objects and scalars; json_value_limit), refused past it
  /// before the rest is parsed.
  int64_t max_json_values = int64_t{1} << 16;
  /// The context (max_model_len) and the tokenizer's most bytes per token (Engine::
  /// max_bytes_per_token; 0 = no bound): a text prompt or the messages' text of more than
  /// (max_model_len - 1) x max_bytes_per_token bytes makes at least max_model_len tokens, leaving
  /// no room for one generated token: 400 context_length_exceeded before anything is copied or
  /// tokenised.
  int64_t max_model_len = 0;
  size_t max_bytes_per_token = 0;
};

/// The JSON values a request needs at most: max_prompts prompts of max_model_len token ids each,
/// plus 4096 for the other fields; at least 2^16 (chat messages), at most 2^22. A tree value costs
/// 16-80 bytes, so this bounds a request's parse to ~5 MB on the embedded model (max_model_len 256)
/// and ~21 MB on LLaDA-8B at 4096.
int64_t json_value_limit(int64_t max_prompts, int64_t max_model_len);

/// What `response_format` asks of the answer (OpenAI chat completions): nothing, a JSON value
/// (json_object: an object), or a JSON value valid under a schema (json_schema; server/json_schema.h
/// says which subset is checked). The engine cannot constrain a canvas (docs/decisions.md): the
/// server validates the answer and draws it again, up to max_attempts in all (docs/serving.md).
struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema } kind = Kind::kText;
  std::string name;       ///< json_schema.name
  nlohmann::json schema;  ///< json_schema.schema (checked when parsed)
  bool strict = false;    ///< json_schema.strict (validated the same either way)
};

/// Whether `text` (a whole answer) meets `rf`: nullopt when it does (always for text), else why not
/// ("the answer is not JSON: ...", "... not an object", "... does not match the schema at /a: ...").
std::optional<std::string> check_answer_format(const ResponseFormat& rf, const std::string& text);

/// A parsed /v1/completions or /v1/chat/completions request.
struct ApiRequest {
  bool chat = false;
  std::string model;
  std::vector<GenerateRequest> prompts;  ///< completions: one per prompt (raw text or ids, no chat template)
  std::vector<ChatMessage> messages;     ///< chat: the conversation (rendered by the checkpoint's template)
  SamplingParams params;                 ///< gen_length = max_tokens
  /// Choices per prompt in [1, max_n]: n independent requests of each prompt, choice index
  /// prompt * n + j, request j seeded params.seed + j (temperature 0: n equal choices).
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;            ///< stream_options.include_usage
  bool stream_canvas = false;            ///< extension: canvas events per iteration (SSE event "canvas")
  /// chat `response_format` (text when absent). Not with stream (400): the answer is checked whole.
  ResponseFormat response_format;
};

/// Parses a completions (chat = false) or chat completions body. Errors name the field: invalid
/// JSON, a missing or mistyped field, values out of range, unsupported fields or values (400),
/// another model (404).
std::variant<ApiRequest, ApiError> parse_request(std::string_view body, bool chat, const ParseLimits& limits);

/// usage: prompt_tokens, completion_tokens (the answers' tokens), total_tokens.
nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

/// A committed token's log-probability as a response shows it (TokenLogprob, request.h, with the
/// ids decoded): its text (one token decoded alone; "" for a special token; a piece of a multi-byte
/// character decodes to U+FFFD), its natural-log probability and its row's top alternatives.
struct LogprobEntry {
  std::string token;
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

/// The entries of `lps`, each id (and each alternative) decoded alone by `decode`; an id < 0 (no
/// logprob recorded) is "".
std::vector<LogprobEntry> logprob_entries_of(const std::vector<TokenLogprob>& lps,
                                             const std::function<std::string(int32_t)>& decode);

/// Chat's `logprobs` object of a choice or chunk: {"content": [{token, logprob, bytes (the token
/// text's UTF-8 bytes), top_logprobs: [{token, logprob, bytes}]}], "refusal": null}.
nlohmann::json chat_logprobs(const std::vector<LogprobEntry>& entries);
/// Completions' `logprobs` object: {tokens, token_logprobs, top_logprobs (one {token: logprob}
/// object per token), text_offset (each token's character offset in the choice's text, from
/// `offset0`: a stream's offset of the chunk)}.
nlohmann::json completion_logprobs(const std::vector<LogprobEntry>& entries, int64_t offset0 = 0);

/// One choice of a finished request, as the response needs it.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;  ///< "stop" | "length" | "content_filter" (response_format not met)
  int64_t prompt_tokens = 0, completion_tokens = 0;
  bool with_logprobs = false;  ///< the request asked: `logprobs` is an object, else null
  std::vector<LogprobEntry> logprobs;
  /// response_format json_object / json_schema: the choice's extension object "response_format":
  /// {"valid": bool, "attempts": n, "error": the last answer's problem (only when not valid)}.
  nlohmann::json format_check;
};

/// The non-streamed response objects ("text_completion" / "chat.completion").
nlohmann::json completion_response(const std::string& id, int64_t created, const std::string& model,
                                   const std::vector<ChoiceResult>& choices, int64_t n);
/// usage: prompt_tokens of each prompt once (n choices of a prompt share it, as OpenAI counts
/// them), the completion tokens of every choice. `n`: choices per prompt (choice i has prompt i / n).
nlohmann::json chat_response(const std::string& id, int64_t created, const std::string& model,
                             const std::vector<ChoiceResult>& choices, int64_t n);

/// Streamed chunks. A text delta (finish_reason null) or the final chunk of a choice (text "" /
/// empty delta, finish_reason set); chat's first chunk of a choice carries the role.
/// `logprobs` (null when absent): the chunk's logprobs object (chat_logprobs / completion_logprobs).
nlohmann::json completion_chunk(const std::string& id, int64_t created, const std::string& model, int64_t index,
                                const std::string& text, const std::string& finish_reason,
                                const nlohmann::json& logprobs = nullptr);
nlohmann::json chat_chunk(const std::string& id, int64_t created, const std::string& model, int64_t index,
                          const std::optional<std::string>& content, bool role, const std::string& finish_reason,
                          const nlohmann::json& logprobs = nullptr);
/// The usage chunk of stream_options.include_usage: no choices, usage set.
nlohmann::json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                           int64_t prompt_tokens, int64_t completion_tokens);
/// A live-denoising event (extension): the iteration, the positions committed by it with their
/// tokens and text, the stable prefix length, and (first event) the canvas length.
nlohmann::json canvas_event(const std::string& id, int64_t index, const RequestEvent& ev,
                            const std::vector<std::string>& token_texts, int64_t canvas_length);

/// "data: <json>\n\n".
std::string sse(const nlohmann::json& j);
/// "event: <name>\ndata: <json>\n\n".
std::string sse_event(const std::string& name, const nlohmann::json& j);

/// /v1/models, and /v1/models/{id} of the served model.
nlohmann::json models_response(const std::string& model_id, int64_t created);
nlohmann::json model_response(const std::string& model_id, int64_t created);
/// 404 model_not_found (param model) for a model other than the served one.
ApiError model_not_found(const std::string& requested, const std::string& served);

}  // namespace flashdllm::server
