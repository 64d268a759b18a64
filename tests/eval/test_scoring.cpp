// lm-eval 0.4.8 answer extraction and normalisation on hand-written outputs. Expected values are
// what the Python expressions quoted in src/eval/scoring.h give (checked with CPython's `re`; the
// whole MATH-500 gold set is compared with Python in tests/python/test_eval_prompts.py).
#include <gtest/gtest.h>

#include "eval/scoring.h"
#include "eval/tasks.h"
#include "flashdllm/status.h"

namespace flashdllm::eval {
namespace {

TEST(StopStrings, CutAtTheEarliestStop) {
  const std::vector<std::string> gsm = {"Question:", "</s>", "<|im_end|>"};
  EXPECT_EQ(truncate_at_stops("x = 3\n#### 3\n\nQuestion: next one", gsm), "x = 3\n#### 3\n\n");
  EXPECT_EQ(truncate_at_stops("a</s>b Question: c", gsm), "a");
  EXPECT_EQ(truncate_at_stops("no stop here", gsm), "no stop here");
  const std::vector<std::string> he = {"\nclass", "\ndef", "\n#", "\nif", "\nprint"};
  EXPECT_EQ(truncate_at_stops("    return x\n\nif __name__ == '__main__':\n    f()", he), "    return x\n");
  EXPECT_EQ(truncate_at_stops("    return x\n# test\ndef g(): pass", he), "    return x");
  EXPECT_EQ(truncate_at_stops("def f():\n    return 1\n[DONE] junk", {"[DONE]"}), "def f():\n    return 1\n");
  EXPECT_EQ(truncate_at_stops("abc", {""}), "abc");  // empty stop strings are ignored
}

TEST(Gsm8kExtraction, StrictMatchTakesTheFirstHashAnswer) {
  EXPECT_EQ(gsm8k_strict_extract("She has 3 + 4 = 7 apples.\n#### 7"), "7");
  EXPECT_EQ(gsm8k_strict_extract("#### 1,234.50 dollars\n#### 9"), "1,234.50");
  EXPECT_EQ(gsm8k_strict_extract("#### -12"), "-12");
  EXPECT_EQ(gsm8k_strict_extract("####7"), std::nullopt);        // the space is part of the pattern
  EXPECT_EQ(gsm8k_strict_extract("#### seven\n#### 8"), "8");    // first position that matches
  EXPECT_EQ(gsm8k_strict_extract("#### -\n"), std::nullopt);
  EXPECT_EQ(gsm8k_strict_extract("The answer is 5."), std::nullopt);
}

TEST(Gsm8kExtraction, FlexibleExtractTakesTheLastNumber) {
  EXPECT_EQ(gsm8k_flexible_extract("Tyler did 48 / 2 = 24 flips, so 12 double flips.\n#### 12"), "12");
  EXPECT_EQ(gsm8k_flexible_extract("The total is $1,250.00."), "$1,250.00.");
  EXPECT_EQ(gsm8k_flexible_extract("He owes -5 dollars"), "-5");
  EXPECT_EQ(gsm8k_flexible_extract("Wait... so 7"), "7");
  // re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", "So -5 and - 3 and 1,000.5 then $ 12. Done...")
  //   = [('', '-5'), ('', '3'), ('1,000.5', ''), ('12.', ''), ('...', '')]: the last match is "...".
  EXPECT_EQ(gsm8k_flexible_extract("So -5 and - 3 and 1,000.5 then $ 12. Done..."), "...");
  EXPECT_EQ(gsm8k_flexible_extract("x-12y"), "-12");
  EXPECT_EQ(gsm8k_flexible_extract("no digits"), std::nullopt);
  EXPECT_EQ(gsm8k_flexible_extract("a 5"), "5");
}

TEST(Gsm8kExactMatch, LmEvalRegexesThenLowerCase) {
  EXPECT_EQ(gsm8k_exact_match_normalize("Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72"), "72");
  EXPECT_EQ(gsm8k_exact_match_normalize("#### 1,000"), "1000");
  EXPECT_EQ(gsm8k_exact_match_normalize("$1,250.00."), "1250.00");  // no numeric canonicalisation
  EXPECT_EQ(gsm8k_exact_match_normalize("18.\n"), "18\n");            // "\.$" also matches before a final newline
  EXPECT_EQ(gsm8k_exact_match_normalize("a #### b #### 5"), "5");      // greedy: through the last "#### "
  EXPECT_EQ(gsm8k_exact_match_normalize("[INVALID]"), "[invalid]");
}

TEST(Gsm8kScore, FlexibleIsTheHeadlineStrictIsReported) {
  const std::string gold = gsm8k_exact_match_normalize("...\n#### 18");
  Score s = score_text("gsm8k", "Janet sells 16 - 3 - 4 = 9 eggs.\nShe makes 9 * 2 = $18.\n#### 18", gold);
  ASSERT_EQ(s.metrics.size(), 2u);
  EXPECT_EQ(s.metrics[0].name, "flexible_extract");
  EXPECT_TRUE(s.correct);
  EXPECT_TRUE(s.metrics[1].correct);
  // No "####": strict fails, flexible finds the last number.
  s = score_text("gsm8k", "She makes 9 * 2 = $18 every day. So the answer is 18.", gold);
  EXPECT_TRUE(s.metrics[0].correct);
  EXPECT_EQ(s.metrics[0].extracted, "18.");
  EXPECT_FALSE(s.metrics[1].correct);
  EXPECT_EQ(s.metrics[1].extracted, "");
  // A trailing number after the answer makes flexible wrong while strict is right.
  s = score_text("gsm8k", "#### 18\nThat took 3 steps", gold);
  EXPECT_FALSE(s.metrics[0].correct);
  EXPECT_TRUE(s.metrics[1].correct);
  // "18.00" is not "18" for lm-eval's exact_match.
  s = score_text("gsm8k", "#### 18.00", gold);
  EXPECT_FALSE(s.metrics[0].correct);
  EXPECT_FALSE(s.metrics[1].correct);
  s = score_text("gsm8k", "I do not know", gold);
  EXPECT_FALSE(s.correct);
  EXPECT_EQ(s.extracted, "");
}

TEST(MathBoxed, LastBoxedAndRemoveBoxed) {
  EXPECT_EQ(last_boxed_only_string("a $\\boxed{1}$ then $\\boxed{\\frac{2}{3}}$."), "\\boxed{\\frac{2}{3}}");
  EXPECT_EQ(last_boxed_only_string("so \\boxed 5$ done"), "\\boxed 5");
  EXPECT_EQ(last_boxed_only_string("\\fbox{x}"), "\\fbox{x}");
  EXPECT_EQ(last_boxed_only_string("\\boxed{unclosed"), std::nullopt);
  EXPECT_EQ(last_boxed_only_string("nothing"), std::nullopt);
  EXPECT_EQ(remove_boxed("\\boxed{\\frac{2}{3}}"), "\\frac{2}{3}");
  EXPECT_EQ(remove_boxed("\\boxed 5"), "5");
  EXPECT_EQ(remove_boxed("\\fbox{x}"), std::nullopt);  // lm-eval's assertion would fail
}

TEST(MathAnswer, FinalAnswerSentence) {
  EXPECT_EQ(minerva_unnormalized_answer("so x=2.\nFinal Answer: The final answer is $2$. I hope it is correct."), "$2$");
  // The appended "I hope it is correct." completes a truncated sentence.
  EXPECT_EQ(minerva_unnormalized_answer("Final Answer: The final answer is $\\frac{1}{2}$. "), "$\\frac{1}{2}$");
  EXPECT_EQ(minerva_unnormalized_answer("Final Answer: The final answer is 7"), "[invalidanswer]");
  EXPECT_EQ(minerva_unnormalized_answer("Final Answer: The final answer is 7\n. I hope it is correct."),
            "[invalidanswer]");  // '.' does not match a newline
  EXPECT_EQ(minerva_unnormalized_answer("no answer"), "[invalidanswer]");
  // The first sentence that completes wins; lazy group.
  EXPECT_EQ(minerva_unnormalized_answer("Final Answer: The final answer is 3. I hope it is correct. Final Answer: The "
                                        "final answer is 4. I hope it is correct."),
            "3");
}

TEST(MathNormalize, MinervaSteps) {
  // Expected values from lm-eval's normalize_final_answer run with CPython's re.
  const std::pair<const char*, const char*> cases[] = {
      {"\\frac{1}{2}", "\\frac{1}{2}"},
      {"\\frac12", "\\frac{1}{2}"},
      {"\\dfrac{3}{4}", "\\dfrac{3}{4}"},
      {"10,000", "10000"},
      {"1,2", "12"},
      {"\\text{(A)}", "(A)"},
      {"5\\text{ cm}", "5"},
      {"x = 5", "5"},
      {"$\\boxed{7}$", "7"},
      {"\\sqrt2", "\\sqrt{2}"},
      {"90^\\circ", "90"},
      {"\\textbf{Evelyn}", "Evelyn"},
      {"a = \\frac 34", "\\frac{3}{4}"},
      {"\\$18.90", "18.90"},
      {"3\\sqrt3", "3\\sqrt{3}"},
      {"(1,2) \\text{and} (3,4)", "(1,2),(3,4)"},
      {"\\overline{12}", "12"},
      {"\\fracab c", "\\frac{a}{b}c"},
      {"100 dollars", "100"},
      {"an apple", "apple"},
      {"The answer is $5$ units", "5"},
      {"\\left( 3, \\frac{\\pi}{2} \\right)", "\\le(3,\\frac{\\pi}{2}\\right)"},  // "ft" is a removed unit
      {"\\{1,2\\}", "\\{1,2\\}"},
      {"12 \\text{ inches}^2", "12"},
      {"5.", "5."},
      {"\\mbox{yes}", "yes"},
      {"0.\\overline{3}", "0.3"},
      {"2\n$3$ $4$", "2\n3"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(minerva_normalize(in), want) << in;
}

TEST(MathScore, ExactMatchAndBoxedMatch) {
  const std::string gold = minerva_normalize("\\frac{2}{3}");
  Score s = score_text("math500",
                       " We get $x=\\boxed{\\frac23}$.\nFinal Answer: The final answer is $\\frac{2}{3}$. I hope it is "
                       "correct.\n\n",
                       gold);
  ASSERT_EQ(s.metrics.size(), 2u);
  EXPECT_EQ(s.metrics[0].name, "exact_match");
  EXPECT_TRUE(s.metrics[0].correct);
  EXPECT_TRUE(s.metrics[1].correct);  // \frac23 -> \frac{2}{3}
  s = score_text("math500", "The answer is $\\boxed{\\frac{2}{3}}$.", gold);
  EXPECT_FALSE(s.metrics[0].correct);  // no "Final Answer" sentence
  EXPECT_EQ(s.metrics[0].extracted, "");
  EXPECT_TRUE(s.metrics[1].correct);
  s = score_text("math500", "Final Answer: The final answer is $0.667$. I hope it is correct.", gold);
  EXPECT_FALSE(s.correct);  // string equality after normalisation (lm-eval would also say no)
  EXPECT_EQ(s.extracted, "0.667");
}

TEST(ScoreText, CodeTasksAreNotScoredAsText) {
  EXPECT_THROW(score_text("humaneval", "x", ""), Error);
  EXPECT_THROW(score_text("nope", "x", ""), Error);
}

}  // namespace
}  // namespace flashdllm::eval
