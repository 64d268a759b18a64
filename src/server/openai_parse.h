// Request parsing of the OpenAI API surface (openai.h), shared by its files: openai.cpp (the body
// and its fields) and openai_prompt.cpp (prompts and chat messages). Internal to src/server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai.h"

namespace flashdllm::server::parse_detail {

/// A 400 invalid_request_error naming `param` ("" = null) and `code` ("" = null).
ApiError bad(std::string param, std::string message, std::string code = {});
/// A JSON value's type in the words of the API ("a string", "an integer", ...).
std::string kind_of(const nlohmann::json& v);
/// An integer that fits int64, else nullopt.
std::optional<int64_t> as_int(const nlohmann::json& v);

/// prompt: a string, an array of strings, an array of token ids or an array of token-id arrays (at
/// most limits.max_prompts); text whose bytes alone pass the context is refused (text_too_long).
std::optional<ApiError> parse_prompt(const nlohmann::json& p, const ParseLimits& limits,
                                     std::vector<GenerateRequest>& out);
/// messages: a non-empty array of {role, content, name, tool_call_id, tool_calls} (docs/serving.md).
std::optional<ApiError> parse_messages(const nlohmann::json& m, const ParseLimits& limits,
                                       std::vector<ChatMessage>& out);

/// response_format (absent: nullptr): {"type": "text"} | {"type": "json_object"} | {"type":
/// "json_schema", "json_schema": {name, schema, strict, description}}, the schema within
/// json_schema.h's subset (400 invalid_json_schema naming response_format.json_schema.schema.<path>
/// otherwise). Not with stream (an answer is validated whole before it is sent).
std::optional<ApiError> parse_response_format(const nlohmann::json* v, bool stream, ResponseFormat& rf);

}  // namespace flashdllm::server::parse_detail
