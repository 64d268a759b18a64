// Answer extraction and scoring of the eval tasks; dataset loading errors; Wilson interval.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_paths.h"
#include "eval/tasks.h"
#include "flashdllm/status.h"

namespace flashdllm::eval {
namespace {

TEST(NormalizeNumber, StripsFormattingAndCanonicalises) {
  EXPECT_EQ(normalize_number("1,200"), "1200");
  EXPECT_EQ(normalize_number("$45."), "45");
  EXPECT_EQ(normalize_number(" 7.50 "), "7.5");
  EXPECT_EQ(normalize_number("7.0"), "7");
  EXPECT_EQ(normalize_number("-0"), "0");
  EXPECT_EQ(normalize_number("007"), "7");
  EXPECT_EQ(normalize_number("+3"), "3");
  EXPECT_EQ(normalize_number("-12"), "-12");
  EXPECT_EQ(normalize_number("0.25"), "0.25");
  EXPECT_EQ(normalize_number("abc"), "");
  EXPECT_EQ(normalize_number("1.2.3"), "");
  EXPECT_EQ(normalize_number("-"), "");
  EXPECT_EQ(normalize_number(""), "");
}

TEST(ExtractHashAnswer, TakesTheLastHashLine) {
  EXPECT_EQ(extract_hash_answer("a = 3\n#### 3"), "3");
  EXPECT_EQ(extract_hash_answer("#### 2\nwait\n#### 1,024"), "1024");
  EXPECT_EQ(extract_hash_answer("The answer is ####   -17 apples"), "-17");
  EXPECT_FALSE(extract_hash_answer("no marker 42").has_value());
  EXPECT_FALSE(extract_hash_answer("#### seven").has_value());
  EXPECT_FALSE(extract_hash_answer("####").has_value());
}

TEST(ScoreArith, ExactMatchOnTheNumber) {
  EXPECT_TRUE(score_arith("x\n#### 171", "171").correct);
  EXPECT_FALSE(score_arith("x\n#### 170", "171").correct);
  EXPECT_EQ(score_arith("x\n#### 170", "171").extracted, "170");
  Score none = score_arith("no answer", "171");
  EXPECT_FALSE(none.correct);
  EXPECT_EQ(none.extracted, "");
}

TEST(LoadArith, ReadsTheCommittedTestSplit) {
  auto s = load_arith(test::repo_data_dir() / "arith" / "test.jsonl");
  EXPECT_GE(s.size(), 500u);
  for (const auto& x : s) {
    EXPECT_FALSE(x.prompt.empty());
    EXPECT_FALSE(normalize_number(x.gold).empty()) << x.id;
  }
  EXPECT_EQ(load_arith(test::repo_data_dir() / "arith" / "test.jsonl", 7).size(), 7u);
}

TEST(LoadArith, MalformedRecordsNameFileAndLine) {
  auto dir = test::temp_dir();
  auto p = dir / "bad.jsonl";
  std::ofstream(p) << "{\"question\": \"q\", \"answer\": \"a\\n#### 3\"}\n{\"question\": \"q\", \"answer\": \"no number\"}\n";
  try {
    load_arith(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  std::ofstream(p) << "not json\n";
  EXPECT_THROW(load_arith(p), Error);
  EXPECT_THROW(load_arith(dir / "missing.jsonl"), Error);
}

TEST(Wilson, MatchesKnownValues) {
  auto [lo, hi] = wilson_interval(50, 100);
  EXPECT_NEAR(lo, 0.4038, 1e-3);
  EXPECT_NEAR(hi, 0.5962, 1e-3);
  auto [l0, h0] = wilson_interval(0, 10);
  EXPECT_DOUBLE_EQ(l0, 0.0);
  EXPECT_NEAR(h0, 0.2775, 1e-3);
}

}  // namespace
}  // namespace flashdllm::eval
