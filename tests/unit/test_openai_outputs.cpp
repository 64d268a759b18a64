// The OpenAI output options without HTTP (src/server/openai_output.cpp, json_schema.cpp; issue 49
// item 4): logprobs / top_logprobs parsed into SamplingParams::logprobs, the response shapes of
// both endpoints, response_format parsed (bad schemas named by their path), and the JSON-Schema
// subset that checks an answer.
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/json_schema.h"
#include "server/openai.h"

namespace flashdllm::server {
namespace {

using nlohmann::json;

ParseLimits limits() {
  ParseLimits l;
  l.model_id = "m";
  return l;
}

json chat_body(json extra) {
  json b = {{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  if (!extra.is_null()) b.update(extra);
  return b;
}

ApiRequest parsed(const json& body, bool chat = true) {
  auto r = parse_request(body.dump(), chat, limits());
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body.dump() << ": " << e->message;
  return std::get<ApiRequest>(r);
}

ApiError refused(const json& body, bool chat = true) {
  auto r = parse_request(body.dump(), chat, limits());
  if (std::holds_alternative<ApiRequest>(r)) ADD_FAILURE() << body.dump() << " was accepted";
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(OpenAiLogprobs, FieldsSetTheOneRequestParameter) {
  EXPECT_EQ(parsed(chat_body({})).params.logprobs, -1);
  EXPECT_EQ(parsed(chat_body({{"logprobs", false}, {"top_logprobs", 0}})).params.logprobs, -1);
  EXPECT_EQ(parsed(chat_body({{"logprobs", true}})).params.logprobs, 0);
  EXPECT_EQ(parsed(chat_body({{"logprobs", true}, {"top_logprobs", 20}})).params.logprobs, 20);
  EXPECT_EQ(refused(chat_body({{"logprobs", true}, {"top_logprobs", 21}})).param, "top_logprobs");
  EXPECT_EQ(refused(chat_body({{"top_logprobs", 2}})).param, "top_logprobs");
  EXPECT_EQ(refused(chat_body({{"logprobs", 1}})).param, "logprobs");
  const json completion = {{"model", "m"}, {"prompt", "2 + 2 ="}};
  EXPECT_EQ(parsed(completion, false).params.logprobs, -1);
  json c = completion;
  c["logprobs"] = 5;
  EXPECT_EQ(parsed(c, false).params.logprobs, 5);
  c["logprobs"] = 0;
  EXPECT_EQ(parsed(c, false).params.logprobs, 0);
  c["logprobs"] = 6;
  EXPECT_EQ(refused(c, false).param, "logprobs");
  c["logprobs"] = true;
  EXPECT_EQ(refused(c, false).param, "logprobs");
}

std::vector<LogprobEntry> entries() {
  return {{"Hel", -0.25f, {{"Hel", -0.25f}, {"He", -2.0f}}}, {"lo", -0.5f, {{"lo", -0.5f}, {"p", -1.5f}}}};
}

TEST(OpenAiLogprobs, ChatAndCompletionShapes) {
  const json chat = chat_logprobs(entries());
  ASSERT_EQ(chat["content"].size(), 2u);
  EXPECT_TRUE(chat["refusal"].is_null());
  const json& first = chat["content"][0];
  EXPECT_EQ(first["token"], "Hel");
  EXPECT_FLOAT_EQ(first["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(first["bytes"], json::array({72, 101, 108}));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1]["token"], "He");
  EXPECT_EQ(first["top_logprobs"][1]["bytes"], json::array({72, 101}));

  const json cmp = completion_logprobs(entries(), 10);
  EXPECT_EQ(cmp["tokens"], json::array({"Hel", "lo"}));
  EXPECT_EQ(cmp["token_logprobs"].size(), 2u);
  EXPECT_EQ(cmp["text_offset"], json::array({10, 13}));
  EXPECT_FLOAT_EQ(cmp["top_logprobs"][1]["p"].get<float>(), -1.5f);

  ChoiceResult with;
  with.text = "Hello";
  with.finish_reason = "stop";
  with.with_logprobs = true;
  with.logprobs = entries();
  ChoiceResult without = with;
  without.with_logprobs = false;
  const json r = chat_response("id", 0, "m", {with, without}, 1);
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_TRUE(r["choices"][1]["logprobs"].is_null());
  const json cr = completion_response("id", 0, "m", {with}, 1);
  EXPECT_EQ(cr["choices"][0]["logprobs"]["text_offset"], json::array({0, 3}));
  EXPECT_EQ(chat_chunk("id", 0, "m", 0, "Hel", false, "", chat)["choices"][0]["logprobs"], chat);
  EXPECT_TRUE(chat_chunk("id", 0, "m", 0, "Hel", false, "")["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiLogprobs, EntriesDecodeEveryId) {
  std::vector<TokenLogprob> lps(2);
  lps[0] = {5, -0.1f, {{5, -0.1f}, {6, -3.0f}}};
  lps[1] = {-1, 0.0f, {}};  // no logprob recorded
  const auto e = logprob_entries_of(lps, [](int32_t id) { return std::string(1, 't').append(std::to_string(id)); });
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].token, "t5");
  EXPECT_EQ(e[0].top[1].first, "t6");
  EXPECT_EQ(e[1].token, "");
}

TEST(OpenAiResponseFormat, ParsedAndBadSchemasNamedByPath) {
  EXPECT_EQ(parsed(chat_body({{"response_format", {{"type", "text"}}}})).response_format.kind,
            ResponseFormat::Kind::kText);
  EXPECT_EQ(parsed(chat_body({{"response_format", {{"type", "json_object"}}}})).response_format.kind,
            ResponseFormat::Kind::kJsonObject);
  const json schema = {{"type", "object"},
                       {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"$ref", "#/$defs/B"}}}}},
                       {"required", {"a"}},
                       {"additionalProperties", false},
                       {"$defs", {{"B", {{"type", "array"}, {"items", {{"type", "string"}}}}}}}};
  const ApiRequest r = parsed(chat_body(
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}));
  EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(r.response_format.schema, schema);
  // Completions take it too (vLLM does).
  EXPECT_EQ(parsed({{"model", "m"}, {"prompt", "p"}, {"response_format", {{"type", "json_object"}}}}, false)
                .response_format.kind,
            ResponseFormat::Kind::kJsonObject);

  auto with_schema = [](json s) {
    return chat_body({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", s}}}}}});
  };
  ApiError e = refused(with_schema({{"type", "object"}, {"properties", {{"a", {{"pattern", "^x"}}}}}}));
  EXPECT_EQ(e.param, "response_format.json_schema.schema.properties.a.pattern");
  EXPECT_EQ(e.code, "invalid_json_schema");
  EXPECT_EQ(refused(with_schema({{"type", "decimal"}})).param, "response_format.json_schema.schema.type");
  EXPECT_EQ(refused(with_schema({{"$ref", "#/$defs/Nope"}})).param, "response_format.json_schema.schema.$ref");
  EXPECT_EQ(refused(with_schema({{"anyOf", json::array({{{"type", "string"}}, {{"minLength", -1}}})}})).param,
            "response_format.json_schema.schema.anyOf[1].minLength");
  EXPECT_EQ(refused(with_schema(42)).param, "response_format.json_schema.schema");
  EXPECT_EQ(refused(chat_body({{"response_format", {{"type", "json_schema"}}}})).param, "response_format.json_schema");
  EXPECT_EQ(refused(chat_body({{"response_format",
                                {{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}}}}}}))
                .param,
            "response_format.json_schema.name");
  EXPECT_EQ(refused(chat_body({{"response_format", {{"type", "yaml"}}}})).param, "response_format.type");
  EXPECT_EQ(refused(chat_body({{"response_format", "json"}})).param, "response_format");
  EXPECT_EQ(refused(chat_body({{"response_format", {{"type", "text"}, {"json_schema", json::object()}}}})).param,
            "response_format.json_schema");
  EXPECT_EQ(refused(chat_body({{"stream", true}, {"response_format", {{"type", "json_object"}}}})).param,
            "response_format");
  EXPECT_EQ(parsed(chat_body({{"stream", true}, {"response_format", {{"type", "text"}}}})).response_format.kind,
            ResponseFormat::Kind::kText);
  // A schema nested past the depth bound.
  json deep = {{"type", "array"}};
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_NE(refused(with_schema(deep)).message.find("deeper than"), std::string::npos);
}

std::optional<std::string> check(const json& schema, const std::string& text) {
  ResponseFormat rf;
  rf.kind = ResponseFormat::Kind::kJsonSchema;
  rf.schema = schema;
  EXPECT_FALSE(check_schema(schema)) << schema.dump();
  return check_answer_format(rf, text);
}

TEST(OpenAiResponseFormat, AnswersAreCheckedAgainstTheSubset) {
  ResponseFormat obj;
  obj.kind = ResponseFormat::Kind::kJsonObject;
  EXPECT_FALSE(check_answer_format(obj, R"( {"a": 1} )"));
  EXPECT_NE(check_answer_format(obj, "[1]")->find("not an object"), std::string::npos);
  EXPECT_NE(check_answer_format(obj, "The answer is 4")->find("not JSON"), std::string::npos);
  EXPECT_TRUE(check_answer_format(obj, R"({"a": 1} trailing)"));
  EXPECT_FALSE(check_answer_format(ResponseFormat{}, "anything"));

  const json person = {{"type", "object"},
                       {"properties",
                        {{"name", {{"type", "string"}, {"minLength", 2}, {"maxLength", 4}}},
                         {"age", {{"type", "integer"}, {"minimum", 0}, {"exclusiveMaximum", 150}}},
                         {"tags", {{"type", "array"}, {"items", {{"enum", {"a", "b"}}}}, {"maxItems", 2}}},
                         {"kind", {{"const", "p"}}},
                         {"score", {{"type", {"number", "null"}}, {"multipleOf", 0.5}}}}},
                       {"required", {"name", "age"}},
                       {"additionalProperties", false}};
  EXPECT_FALSE(check(person, R"({"name": "Ann", "age": 30, "tags": ["a"], "kind": "p", "score": 1.5})"));
  EXPECT_FALSE(check(person, R"({"name": "Ann", "age": 30.0, "score": null})")) << "30.0 is an integer";
  auto fails_with = [&](const std::string& text, const std::string& needle) {
    const auto e = check(person, text);
    ASSERT_TRUE(e) << text;
    EXPECT_NE(e->find(needle), std::string::npos) << *e;
  };
  fails_with(R"({"name": "Ann"})", "'age' is missing");
  fails_with(R"({"name": "Ann", "age": 30.5})", "at /age");
  fails_with(R"({"name": "A", "age": 1})", "minLength");
  fails_with(R"({"name": "Annabel", "age": 1})", "maxLength");
  fails_with(R"({"name": "Ann", "age": 150})", "exclusiveMaximum");
  fails_with(R"({"name": "Ann", "age": -1})", "minimum");
  fails_with(R"({"name": "Ann", "age": 1, "tags": ["c"]})", "at /tags/0");
  fails_with(R"({"name": "Ann", "age": 1, "tags": ["a", "a", "b"]})", "maxItems");
  fails_with(R"({"name": "Ann", "age": 1, "kind": "q"})", "const");
  fails_with(R"({"name": "Ann", "age": 1, "score": 0.3})", "multipleOf");
  fails_with(R"({"name": "Ann", "age": 1, "x": 0})", "'x' is not allowed");
  fails_with(R"({"name": "Ann", "age": 1, "score": "1"})", "not of type");
  // Code points, not bytes: "Zoë" is 3 characters (4 bytes).
  EXPECT_FALSE(check(person, R"({"name": "Zoë", "age": 1})"));

  // anyOf, allOf, $ref (a recursive tree), boolean schemas.
  const json tree = {{"$defs",
                      {{"node",
                        {{"type", "object"},
                         {"properties", {{"kids", {{"type", "array"}, {"items", {{"$ref", "#/$defs/node"}}}}}}},
                         {"required", {"kids"}}}}}},
                     {"$ref", "#/$defs/node"}};
  EXPECT_FALSE(check(tree, R"({"kids": [{"kids": []}, {"kids": [{"kids": []}]}]})"));
  EXPECT_NE(check(tree, R"({"kids": [{"kid": []}]})")->find("at /kids/0"), std::string::npos);
  EXPECT_FALSE(check({{"anyOf", {{{"type", "string"}}, {{"type", "integer"}}}}}, "7"));
  EXPECT_TRUE(check({{"anyOf", {{{"type", "string"}}, {{"type", "integer"}}}}}, "7.5"));
  EXPECT_TRUE(check({{"allOf", {{{"type", "integer"}}, {{"minimum", 10}}}}}, "7"));
  EXPECT_TRUE(check({{"properties", {{"a", false}}}}, R"({"a": 1})"));
  EXPECT_FALSE(check(json::object(), "[1, {}]"));
  // A $ref cycle that never consumes the value is reported, not followed forever.
  EXPECT_NE(check({{"$ref", "#"}}, "1")->find("$refs"), std::string::npos);
}

}  // namespace
}  // namespace flashdllm::server
