// Eval tasks: loading every benchmark from data/ (prompt layout, few-shot choice, stop strings, gold
// answers), the arith task's extraction and scoring, loading errors, Wilson interval, the chat rule.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

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

LoadOptions lim_opts(int64_t limit, int64_t processes) {
  LoadOptions o;
  o.limit = limit;
  o.fewshot_processes = processes;
  return o;
}

size_t count(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + 1)) ++n;
  return n;
}

TEST(LoadTask, Gsm8kFiveShotPrompts) {
  auto s = load_task("gsm8k", test::repo_data_dir() / "gsm8k_test.jsonl");
  ASSERT_EQ(s.size(), 1319u);
  for (const auto& x : s) {
    EXPECT_EQ(count(x.prompt, "Question: "), 6u) << x.id;
    EXPECT_EQ(count(x.prompt, "\n#### "), 5u) << x.id;  // five worked exemplar solutions
    EXPECT_TRUE(x.prompt.size() > 8 && x.prompt.compare(x.prompt.size() - 8, 8, "\nAnswer:") == 0) << x.id;
    EXPECT_FALSE(x.chat);
    EXPECT_EQ(x.until, (std::vector<std::string>{"Question:", "</s>", "<|im_end|>"}));
  }
  EXPECT_EQ(s[0].gold, "18");  // Janet's ducks
  // Exemplars differ between documents (one sampler for the whole split) ...
  EXPECT_NE(s[0].prompt.substr(0, 200), s[1].prompt.substr(0, 200));
  // ... the first draw of random.Random(1234) over 7473 train documents is 6374, 3610, 957, 61, 742.
  std::ifstream train(test::repo_data_dir() / "gsm8k_train.jsonl");
  std::string line;
  for (int i = 0; i <= 6374; ++i) std::getline(train, line);
  const std::string q6374 = nlohmann::json::parse(line)["question"].get<std::string>();
  EXPECT_EQ(s[0].prompt.rfind("Question: " + q6374 + "\nAnswer: ", 0), 0u);
  // --limit keeps the same prompts; two lm-eval processes share each draw between neighbours.
  auto lim = load_task("gsm8k", test::repo_data_dir() / "gsm8k_test.jsonl", lim_opts(3, 1));
  ASSERT_EQ(lim.size(), 3u);
  EXPECT_EQ(lim[2].prompt, s[2].prompt);
  auto two = load_task("gsm8k", test::repo_data_dir() / "gsm8k_test.jsonl", lim_opts(4, 2));
  const auto context = [](const std::string& p) { return p.substr(0, p.rfind("Question: ")); };
  EXPECT_EQ(context(two[0].prompt), context(s[0].prompt));
  EXPECT_EQ(context(two[1].prompt), context(s[0].prompt));
  EXPECT_EQ(context(two[2].prompt), context(s[1].prompt));
}

TEST(LoadTask, Math500FourShotMinerva) {
  auto s = load_task("math500", test::repo_data_dir() / "math500_test.jsonl");
  ASSERT_EQ(s.size(), 500u);
  for (const auto& x : s) {
    EXPECT_EQ(x.prompt.rfind("Problem:\nFind the domain of the expression  $\\frac", 0), 0u);
    EXPECT_EQ(count(x.prompt, "\n\nSolution: "), 4u) << x.id;
    EXPECT_EQ(count(x.prompt, "Final Answer: The final answer is"), 4u) << x.id;
    EXPECT_TRUE(x.prompt.compare(x.prompt.size() - 11, 11, "\n\nSolution:") == 0) << x.id;
    EXPECT_FALSE(x.gold.empty()) << x.id;
    EXPECT_EQ(x.until, (std::vector<std::string>{"Problem:"}));
  }
  EXPECT_EQ(s[0].gold, "\\le(3,\\frac{\\pi}{2}\\right)");  // Minerva's normalisation removes "ft" of \left
}

TEST(LoadTask, CodeTasks) {
  auto he = load_task("humaneval", test::repo_data_dir() / "HumanEval.jsonl.gz");
  ASSERT_EQ(he.size(), 164u);
  EXPECT_EQ(he[0].id, "humaneval/0");
  EXPECT_EQ(he[0].prompt.rfind("from typing import List", 0), 0u);
  EXPECT_EQ(he[0].code_prefix, he[0].prompt);
  EXPECT_EQ(he[0].code_suffix.substr(he[0].code_suffix.size() - 26), "\ncheck(has_close_elements)");
  EXPECT_EQ(he[0].until.size(), 5u);
  auto mb = load_task("mbpp", test::repo_data_dir() / "mbpp.jsonl");
  ASSERT_EQ(mb.size(), 500u);
  EXPECT_EQ(mb.front().id, "mbpp/11");
  EXPECT_EQ(mb.back().id, "mbpp/510");
  std::set<std::string> ids;
  for (const auto& x : mb) {
    ids.insert(x.id);
    EXPECT_EQ(count(x.prompt, "[BEGIN]\n"), 4u) << x.id;
    EXPECT_EQ(count(x.prompt, "\n[DONE]\n\n"), 3u) << x.id;
    EXPECT_TRUE(x.prompt.compare(x.prompt.size() - 8, 8, "[BEGIN]\n") == 0) << x.id;
    EXPECT_EQ(count(x.code_suffix, "\nassert"), 3u) << x.id;
    EXPECT_TRUE(x.code_prefix.empty());
  }
  EXPECT_EQ(ids.size(), 500u);
  // The exemplars keep the dataset's \r\n line ends.
  EXPECT_NE(mb[0].prompt.find("def similar_elements(test_tup1, test_tup2):\r\n"), std::string::npos);
}

TEST(LoadTask, ErrorsNameTheFileAndRecord) {
  auto dir = test::temp_dir();
  std::ofstream(dir / "gsm8k_train.jsonl") << "{\"question\": \"q\", \"answer\": \"#### 1\"}\n";
  std::ofstream(dir / "gsm8k_test.jsonl") << "{\"question\": \"q\", \"answer\": \"#### 1\"}\n";
  try {
    load_task("gsm8k", dir / "gsm8k_test.jsonl");
    FAIL() << "a one-record train split cannot give 5 exemplars";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 5"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "m.jsonl") << "{\"problem\": \"p\", \"solution\": \"no box\"}\n";
  try {
    load_task("math500", dir / "m.jsonl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.jsonl:1"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "mb.jsonl") << "{\"task_id\": 11, \"text\": \"t\", \"code\": \"c\", \"test_list\": [\"a\", \"b\", \"c\"]}\n";
  EXPECT_THROW(load_task("mbpp", dir / "mb.jsonl"), Error);  // exemplars 2, 3, 4 missing
  std::ofstream(dir / "he.jsonl") << "{\"prompt\": \"p\"}\n";
  EXPECT_THROW(load_task("humaneval", dir / "he.jsonl"), Error);
  EXPECT_THROW(load_task("humaneval", dir / "missing.jsonl.gz"), Error);
  EXPECT_THROW(load_task("nope", dir / "he.jsonl"), Error);
}

TEST(TaskInfo, KnownTasksAndChatRule) {
  EXPECT_EQ(task_infos().size(), 5u);
  EXPECT_EQ(task_info("gsm8k").metrics.front(), "flexible_extract");
  EXPECT_TRUE(task_info("mbpp").code);
  try {
    task_info("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("available: arith, gsm8k, math500, humaneval, mbpp"), std::string::npos);
  }
  EXPECT_TRUE(chat_by_model_path("/models/LLaDA-8B-Instruct"));
  EXPECT_TRUE(chat_by_model_path("GSAI-ML/llada-8b-INSTRUCT"));
  EXPECT_FALSE(chat_by_model_path("/models/LLaDA-1.5"));
}

}  // namespace
}  // namespace flashdllm::eval
