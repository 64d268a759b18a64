// The code tasks end to end through the sandbox, without a model: HumanEval's canonical solutions
// pass 164/164 and wrong ones fail; MBPP's reference code passes its three tests (a quarter of the
// test split plus task 367, which passes only with its test_setup_code that lm-eval 0.4.8 does not run); programs are
// built exactly as lm-eval/code_eval builds them.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "eval/runner.h"
#include "eval/sandbox.h"
#include "eval/scoring.h"
#include "eval/tasks.h"

namespace flashdllm::eval {
namespace {

std::vector<nlohmann::json> read_records(const std::filesystem::path& p) {
  std::string text;
  if (p.extension() == ".gz") {
    FILE* f = popen(("gzip -dc '" + p.string() + "'").c_str(), "r");
    char buf[65536];
    size_t n;
    while (f && (n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    if (f) pclose(f);
  } else {
    std::ifstream in(p);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::vector<nlohmann::json> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

LoadOptions limit2() {
  LoadOptions o;
  o.limit = 2;
  return o;
}

/// The sandbox's limits here. The time limit is wall-clock (code_eval's ITIMER_REAL) and CI runs
/// these beside other tests on 2 cores (the sanitizer suite: two ASan binaries at once), so it is a
/// multiple of the slowest program's CPU time, not of code_eval's 3 s: HumanEval's slowest canonical
/// solution takes 0.3 s alone, MBPP's reference for task 123 (amicable numbers below 9999) 5.5 s:
/// the likely cause of this test's failure in a CI sanitizer run at 10 s (CI printed no detail).
SandboxOptions options(double timeout_s = 10.0) {
  SandboxOptions o;
  o.timeout_s = timeout_s;
  o.memory_bytes = 2ull << 30;
  o.scratch_root = test::temp_dir();
  return o;
}

TEST(HumanEval, CanonicalSolutionsPassAndWrongOnesFail) {
  const auto data = test::repo_data_dir() / "HumanEval.jsonl.gz";
  auto samples = load_task("humaneval", data);
  auto recs = read_records(data);
  ASSERT_EQ(samples.size(), 164u);
  ASSERT_EQ(recs.size(), 164u);
  std::vector<std::string> good, bad;
  for (size_t i = 0; i < samples.size(); ++i) {
    ASSERT_EQ(samples[i].prompt, recs[i]["prompt"].get<std::string>());
    const std::string canonical = recs[i]["canonical_solution"].get<std::string>();
    // The program is prompt + completion + "\n" + test + "\n" + "check(entry_point)".
    ASSERT_EQ(code_program(samples[i], canonical),
              recs[i]["prompt"].get<std::string>() + canonical + "\n" + recs[i]["test"].get<std::string>() + "\n" +
                  "check(" + recs[i]["entry_point"].get<std::string>() + ")");
    good.push_back(code_program(samples[i], canonical));
    bad.push_back(code_program(samples[i], "    raise NotImplementedError\n"));
  }
  PythonSandbox sb(options());
  auto res = sb.run_all(good);
  int passed = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    passed += res[i].passed;
    EXPECT_TRUE(res[i].passed) << samples[i].id << ": " << res[i].result;
  }
  EXPECT_EQ(passed, 164);
  // Wrong solutions: one per task that raises, and a plausible but wrong one for HumanEval/0.
  bad.resize(10);
  for (const auto& r : sb.run_all(bad)) EXPECT_FALSE(r.passed) << r.result;
  EXPECT_FALSE(sb.run(code_program(samples[0], "    return False\n")).passed);
}

TEST(HumanEval, ScoreSamplesUsesTheStopTruncatedText) {
  auto samples = load_task("humaneval", test::repo_data_dir() / "HumanEval.jsonl.gz", limit2());
  auto recs = read_records(test::repo_data_dir() / "HumanEval.jsonl.gz");
  std::vector<SampleResult> results(2);
  // A completion that goes on with another function: cut at "\ndef" before it is run.
  results[0].text = truncate_at_stops(recs[0]["canonical_solution"].get<std::string>() + "\ndef extra(:\n",
                                      samples[0].until);
  results[1].text = "    return []\n";
  PythonSandbox sb(options());
  score_samples("humaneval", samples, results, &sb);
  EXPECT_TRUE(results[0].correct) << results[0].detail;
  EXPECT_EQ(results[0].detail, "passed");
  EXPECT_FALSE(results[1].correct);
  EXPECT_EQ(results[1].metrics.at(0).name, "pass@1");
  EXPECT_THROW(score_samples("humaneval", samples, results, nullptr), Error);
}

TEST(Mbpp, ReferenceCodePassesItsTests) {
  const auto data = test::repo_data_dir() / "mbpp.jsonl";
  auto samples = load_task("mbpp", data);
  ASSERT_EQ(samples.size(), 500u);
  std::map<std::string, nlohmann::json> by_id;
  for (auto& r : read_records(data)) by_id["mbpp/" + std::to_string(r["task_id"].get<int>())] = r;
  // Every 4th task of the test split: 125 programs, task 367 among them (all 500 pass too, ~1 min of CI).
  std::vector<std::string> programs;
  std::vector<std::string> ids;
  for (size_t k = 0; k < samples.size(); ++k) {
    const EvalSample& s = samples[k];
    if (k % 4 != 0 && s.id != "mbpp/367") continue;
    ids.push_back(s.id);
    const auto& r = by_id.at(s.id);
    std::string code = r["code"].get<std::string>();
    if (s.id == "mbpp/367") code += "\n" + r["test_setup_code"].get<std::string>();  // defines the trees the tests use
    programs.push_back(code_program(s, code));
  }
  PythonSandbox sb(options(60.0));  // task 123 among them: 5.5 s of CPU alone
  auto res = sb.run_all(programs);
  int passed = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    passed += res[i].passed;
    EXPECT_TRUE(res[i].passed) << ids[i] << ": " << res[i].result;
  }
  EXPECT_EQ(passed, static_cast<int>(programs.size()));
  EXPECT_EQ(programs.size(), 125u);  // 367 is one of them (index 356)
  // Under lm-eval's program (no test_setup_code) task 367's reference fails: a NameError.
  auto it = std::find_if(samples.begin(), samples.end(), [](const EvalSample& s) { return s.id == "mbpp/367"; });
  ASSERT_NE(it, samples.end());
  SandboxResult r367 = sb.run(code_program(*it, by_id.at("mbpp/367")["code"].get<std::string>()));
  EXPECT_FALSE(r367.passed);
  EXPECT_NE(r367.result.find("NameError"), std::string::npos) << r367.result;
  // A wrong solution fails.
  EXPECT_FALSE(sb.run(code_program(samples[0], "def remove_Occ(s, ch):\n    return s\n")).passed);
}

}  // namespace
}  // namespace flashdllm::eval
