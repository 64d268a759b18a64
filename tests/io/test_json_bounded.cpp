// parse_json_bounded (io/file.h), the parser of untrusted JSON (request bodies, checkpoint files):
// linear time, duplicate keys per object, and its depth and value limits (issue 49, item 1).
//
// Before: the duplicate-key check ran through nlohmann's callback parser, which rescans the
// enclosing array at every end of an object, so 200 KB of `[{},{},...]` took 14.4 s and 600 KB
// 133 s (this machine, two cores shared with builds); 2 MB would take about 20 minutes. Now 2 MB of
// each worst case parses in ~0.3 s here; the bound below is 15x that for a loaded CI machine.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "io/file.h"

namespace flashdllm {
namespace {

constexpr size_t kWorstCaseBytes = size_t{2} << 20;
constexpr double kSecondsBound = 5.0;

std::string empty_objects(size_t bytes) {
  std::string s = "[";
  while (s.size() + 4 < bytes) s += "{},";
  return s + "{}]";
}

std::string many_keys(size_t bytes) {
  std::string s = "{";
  for (int i = 0; s.size() + 16 < bytes; ++i) s += "\"k" + std::to_string(i) + "\":0,";
  return s + "\"end\":0}";
}

std::string objects_in_arrays_in_an_object(size_t bytes) {
  std::string s = R"({"a":[)";
  while (s.size() + 12 < bytes) s += R"([{},{"b":1}],)";
  return s + "[]]}";
}

double seconds_to_parse(const std::string& text, const JsonLimits& limits, JsonParse* out) {
  const auto t0 = std::chrono::steady_clock::now();
  *out = parse_json_bounded(text, limits);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(JsonBounded, TwoMegabyteWorstCasesParseInLinearTime) {
  JsonLimits limits;
  limits.reject_duplicate_keys = true;  // the check that made the old parse quadratic
  for (const std::string& text :
       {empty_objects(kWorstCaseBytes), many_keys(kWorstCaseBytes), objects_in_arrays_in_an_object(kWorstCaseBytes)}) {
    JsonParse p;
    const double s = seconds_to_parse(text, limits, &p);
    ASSERT_EQ(p.failure, JsonFailure::kNone) << p.detail;
    EXPECT_LT(s, kSecondsBound) << text.substr(0, 40) << "...: " << s << " s";
    std::printf("%zu bytes of %.12s...: %.3f s\n", text.size(), text.c_str(), s);
  }
  // Each is parsed whole: 2 MB of "{}," is ~700k objects.
  JsonParse p = parse_json_bounded(empty_objects(kWorstCaseBytes), limits);
  EXPECT_GT(p.value.size(), kWorstCaseBytes / 3 - 2);
}

TEST(JsonBounded, LimitsStopTheParseAtOnce) {
  JsonLimits limits;
  limits.reject_duplicate_keys = true;
  limits.max_depth = 32;
  limits.max_values = 1000;
  // A deep body: refused at level 33, long before its 2 MB are read into a tree.
  const std::string deep = std::string(kWorstCaseBytes / 2, '[') + std::string(kWorstCaseBytes / 2, ']');
  JsonParse p;
  EXPECT_LT(seconds_to_parse(deep, limits, &p), kSecondsBound);
  EXPECT_EQ(p.failure, JsonFailure::kTooDeep);
  EXPECT_TRUE(p.value.is_discarded());
  EXPECT_LT(seconds_to_parse(empty_objects(kWorstCaseBytes), limits, &p), kSecondsBound);
  EXPECT_EQ(p.failure, JsonFailure::kTooManyValues);
  EXPECT_LT(seconds_to_parse(many_keys(kWorstCaseBytes), limits, &p), kSecondsBound);
  EXPECT_EQ(p.failure, JsonFailure::kTooManyValues);
}

TEST(JsonBounded, LimitsAreExact) {
  JsonLimits limits;
  limits.max_depth = 3;
  EXPECT_EQ(parse_json_bounded("[[[]]]", limits).failure, JsonFailure::kNone);
  EXPECT_EQ(parse_json_bounded(R"({"a":{"b":[1]}})", limits).failure, JsonFailure::kNone);
  EXPECT_EQ(parse_json_bounded("[[[[]]]]", limits).failure, JsonFailure::kTooDeep);
  EXPECT_EQ(parse_json_bounded(R"({"a":{"b":[{}]}})", limits).failure, JsonFailure::kTooDeep);
  limits = JsonLimits{};
  limits.max_values = 4;  // arrays, objects and scalars count; keys do not
  EXPECT_EQ(parse_json_bounded(R"({"a":1,"b":[2]})", limits).failure, JsonFailure::kNone);
  EXPECT_EQ(parse_json_bounded("[1,2,3]", limits).failure, JsonFailure::kNone);
  EXPECT_EQ(parse_json_bounded("[1,2,3,4]", limits).failure, JsonFailure::kTooManyValues);
  EXPECT_EQ(parse_json_bounded(R"({"a":1,"b":[2,{}]})", limits).failure, JsonFailure::kTooManyValues);
}

TEST(JsonBounded, DuplicateKeysAreFoundPerObjectAndTheTreeIsWhole) {
  JsonLimits limits;
  limits.reject_duplicate_keys = true;
  JsonParse p = parse_json_bounded(R"({"a":1,"b":{"a":2,"c":[{"a":3},{"a":4}]},"s":"x\u00e9","n":null,"f":2.5,
                                      "u":18446744073709551615,"i":-3,"t":true})",
                                   limits);
  ASSERT_EQ(p.failure, JsonFailure::kNone) << p.detail;
  EXPECT_EQ(p.value, nlohmann::json::parse(R"({"a":1,"b":{"a":2,"c":[{"a":3},{"a":4}]},"s":"x\u00e9","n":null,
                                               "f":2.5,"u":18446744073709551615,"i":-3,"t":true})"));
  p = parse_json_bounded(R"({"a":1,"b":{"c":[{"d":1,"e":2,"d":3}]}})", limits);
  EXPECT_EQ(p.failure, JsonFailure::kDuplicateKey);
  EXPECT_EQ(p.detail, "d");
  limits.reject_duplicate_keys = false;  // the last value wins, as nlohmann's own parser
  p = parse_json_bounded(R"({"d":1,"d":3})", limits);
  ASSERT_EQ(p.failure, JsonFailure::kNone);
  EXPECT_EQ(p.value["d"], 3);
  for (const char* bad : {"", "{", "[1,]", "{\"a\"}", "[1] 2", "\"\xff\""}) {
    p = parse_json_bounded(bad, limits);
    EXPECT_EQ(p.failure, JsonFailure::kSyntax) << bad;
    EXPECT_NE(p.detail.find("parse error"), std::string::npos) << p.detail;
    EXPECT_TRUE(p.value.is_discarded());
  }
  p = parse_json_bounded("7", limits);  // a scalar document
  ASSERT_EQ(p.failure, JsonFailure::kNone);
  EXPECT_EQ(p.value, 7);
}

}  // namespace
}  // namespace flashdllm
