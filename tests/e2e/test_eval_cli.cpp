// `flashdllm eval` on a slice of the small model's test split (the CI run of issue 3): files are
// written and internally consistent (accuracy = correct / n, each sample's extraction is the number
// after its text's last "####", NFE and tokens per forward agree with the settings).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sys/wait.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/model_fixture.h"
#include "common/test_paths.h"
#include "eval/tasks.h"

namespace flashdllm::test {
namespace {

int run(const std::string& args, std::string* out) {
  FILE* p = popen(fmt::format("{} {} 2>&1", cli_binary().string(), args).c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(EvalCli, ArithSliceWritesConsistentResults) {
  if (!std::filesystem::exists(default_model_dir() / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << default_model_dir();
  auto dir = temp_dir();
  std::string out;
  ASSERT_EQ(run(fmt::format("eval --task arith --limit 6 --batch 3 --threshold 0.9 --gen-length 128 "
                            "--block-length 32 --out {}",
                            dir.string()),
                &out),
            0)
      << out;
  auto summary = load_json(dir / "summary.json");
  EXPECT_EQ(summary["n"].get<int>(), 6);
  std::ifstream in(dir / "samples.jsonl");
  std::string line;
  int n = 0, correct = 0;
  double nfe = 0, committed = 0;
  while (std::getline(in, line)) {
    auto s = nlohmann::json::parse(line);
    ++n;
    correct += s["correct"].get<bool>();
    nfe += s["nfe"].get<double>();
    committed += s["committed_tokens"].get<double>();
    EXPECT_EQ(s["committed_tokens"].get<int>(), 128);  // the LLaDA sampler fills the whole canvas
    auto expect = eval::extract_hash_answer(s["text"].get<std::string>());
    EXPECT_EQ(s["extracted"].get<std::string>(), expect.value_or("")) << line;
    EXPECT_EQ(s["correct"].get<bool>(), !s["extracted"].get<std::string>().empty() && s["extracted"] == s["gold"]);
    EXPECT_GE(s["nfe"].get<int>(), 4);  // threshold mode: at least one forward per block of 32
    EXPECT_LE(s["nfe"].get<int>(), 128);
  }
  EXPECT_EQ(n, 6);
  EXPECT_EQ(summary["correct"].get<int>(), correct);
  EXPECT_DOUBLE_EQ(summary["accuracy"].get<double>(), correct / 6.0);
  EXPECT_NEAR(summary["tokens_per_forward"].get<double>(), committed / nfe, 1e-9);
  EXPECT_NE(out.find("| arith | 6 |"), std::string::npos) << out;
}

TEST(EvalCli, UnknownTaskIsAnError) {
  std::string out;
  EXPECT_EQ(run("eval --task nope --limit 1", &out), 2) << out;
  EXPECT_NE(out.find("--task 'nope' is not known"), std::string::npos) << out;
}

}  // namespace
}  // namespace flashdllm::test
