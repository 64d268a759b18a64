// `flashdllm eval` end to end (the CI runs of issues 3 and 7): a slice of the small model's test
// split (files written and internally consistent: accuracy = correct / n, each extraction is the
// number after its text's last "####", NFE, tokens per iteration, both tokens/s definitions, the
// speed-up over a --baseline summary), a GSM8K slice as a format check (5-shot prompts built as
// --dry-run builds them, stop strings applied, answers extracted by lm-eval's filters, table
// written), HumanEval through the sandbox, and argument errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sys/wait.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/model_fixture.h"
#include "common/test_paths.h"
#include "eval/scoring.h"
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
  std::ofstream(dir / "baseline.json") << R"({"task": "arith", "tokens_per_second": 2.0, "tokens_per_second_released": 4.0})";
  std::string out;
  ASSERT_EQ(run(fmt::format("eval --task arith --cache none --limit 6 --batch 3 --threshold 0.9 --gen-length 128 "
                            "--block-length 32 --baseline {}/baseline.json --out {}",
                            dir.string(), dir.string()),
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
  // No verify pass: every model pass is a main pass.
  EXPECT_EQ(summary["total_forward_passes"].get<int64_t>(), summary["total_nfe"].get<int64_t>());
  EXPECT_EQ(summary["correct"].get<int>(), correct);
  EXPECT_DOUBLE_EQ(summary["accuracy"].get<double>(), correct / 6.0);
  EXPECT_NEAR(summary["tokens_per_iteration"].get<double>(), committed / nfe, 1e-9);
  const double sec = summary["seconds"].get<double>();
  ASSERT_GT(sec, 0);
  EXPECT_NEAR(summary["tokens_per_second"].get<double>(), summary["generated_tokens"].get<double>() / sec, 1e-6);
  EXPECT_NEAR(summary["tokens_per_second_released"].get<double>(), 128.0 * 6 / sec, 1e-6);
  EXPECT_NEAR(summary["speedup"].get<double>(), summary["tokens_per_second"].get<double>() / 2.0, 1e-9);
  EXPECT_NEAR(summary["speedup_released"].get<double>(), summary["tokens_per_second_released"].get<double>() / 4.0, 1e-9);
  EXPECT_GT(summary["peak_memory_bytes"].get<double>(), 0);
  EXPECT_EQ(summary["generate_calls"].get<int>(), 2);  // --batch 3: two static batches
  EXPECT_TRUE(summary["chat_template"].get<bool>());
  EXPECT_NE(out.find("| arith | 128 | LLaDA (no cache), threshold 0.9 | 6 | exact_match "), std::string::npos) << out;
  EXPECT_TRUE(std::filesystem::exists(dir / "summary.md"));
}

// Flash-Verify's verify passes are model passes too: the summary counts them beside the NFE (main
// passes, the released code's definition), per sample and in the table.
TEST(EvalCli, VerifyPassesAreCountedBesideTheNfe) {
  if (!std::filesystem::exists(default_model_dir() / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << default_model_dir();
  auto dir = temp_dir();
  std::string out;
  ASSERT_EQ(run(fmt::format("eval --task arith --cache flash --verify --limit 4 --out {}", dir.string()), &out), 0)
      << out;
  const auto summary = load_json(dir / "summary.json");
  const int64_t nfe = summary["total_nfe"].get<int64_t>(), passes = summary["total_forward_passes"].get<int64_t>();
  EXPECT_GT(passes, nfe) << "Flash-Verify ran no verify pass on 4 problems";
  EXPECT_LE(passes, 2 * nfe) << "at most one verify pass per main pass";
  EXPECT_DOUBLE_EQ(summary["mean_forward_passes"].get<double>(), static_cast<double>(passes) / 4.0);
  std::ifstream in(dir / "samples.jsonl");
  int64_t sum = 0;
  for (std::string line; std::getline(in, line);) sum += nlohmann::json::parse(line)["forward_passes"].get<int64_t>();
  EXPECT_EQ(sum, passes);
  EXPECT_NE(out.find(fmt::format("({:.1f} passes)", summary["mean_forward_passes"].get<double>())), std::string::npos)
      << out;
}

TEST(EvalCli, DreamModelRunsDreamsSamplerAndSaysSo) {
  if (!std::filesystem::exists(dream_model_dir() / "model.safetensors"))
    GTEST_SKIP() << "no Dream model at " << dream_model_dir();
  auto dir = temp_dir();
  std::string out;
  ASSERT_EQ(run(fmt::format("eval -m {} --task arith --cache none --limit 2 --gen-length 16 --out {}",
                            dream_model_dir().string(), dir.string()),
                &out),
            0)
      << out;
  // Cache none on a Dream checkpoint runs Dream's sampler (one token per step: NFE = gen_length).
  EXPECT_NE(out.find("| arith | 16 | Dream sampler (no cache, alg entropy), 16 steps | 2 | exact_match "),
            std::string::npos)
      << out;
  std::ifstream f(dir / "summary.json");
  const auto summary = nlohmann::json::parse(f);
  EXPECT_DOUBLE_EQ(summary["mean_nfe"].get<double>(), 16.0);
}

TEST(EvalCli, Gsm8kSliceFormatCheck) {
  if (!std::filesystem::exists(default_model_dir() / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << default_model_dir();
  auto dir = temp_dir();
  std::string out;
  ASSERT_EQ(run(fmt::format("eval --task gsm8k --dry-run --limit 2 --out {}/dry", dir.string()), &out), 0) << out;
  // gen_length 16: the 5-shot prompts are ~1,250 tokens, and on the CPU every iteration attends over all
  // of them (32 took 34 s on the 2-core machine and 8 minutes under ASan).
  ASSERT_EQ(run(fmt::format("eval --task gsm8k --limit 2 --batch 2 --threshold 0.9 --gen-length 16 --block-length 16 "
                            "--out {}",
                            dir.string()),
                &out),
            0)
      << out;
  std::ifstream dry(dir / "dry" / "prompts.jsonl"), in(dir / "samples.jsonl");
  std::string dline, line;
  int n = 0;
  while (std::getline(in, line) && std::getline(dry, dline)) {
    auto s = nlohmann::json::parse(line), d = nlohmann::json::parse(dline);
    ++n;
    EXPECT_EQ(s["prompt"], d["prompt"]);  // the prompts the model saw are the 5-shot lm-eval prompts
    EXPECT_EQ(s["gold"], d["gold"]);
    const std::string raw = s["raw_text"], text = s["text"];
    EXPECT_EQ(text, eval::truncate_at_stops(raw, {"Question:", "</s>", "<|im_end|>"}));
    EXPECT_EQ(s["metrics"]["flexible_extract"]["extracted"], eval::gsm8k_flexible_extract(text).value_or(""));
    EXPECT_EQ(s["metrics"]["strict_match"]["extracted"], eval::gsm8k_strict_extract(text).value_or(""));
    EXPECT_EQ(s["extracted"], s["metrics"]["flexible_extract"]["extracted"]);
    EXPECT_GT(s["prompt_tokens"].get<int>(), 500);
  }
  EXPECT_EQ(n, 2);
  auto summary = load_json(dir / "summary.json");
  EXPECT_EQ(summary["metrics"][0]["name"], "flexible_extract");
  EXPECT_EQ(summary["metrics"][1]["name"], "strict_match");
  EXPECT_FALSE(summary["chat_template"].get<bool>());  // raw prompts unless the model path says "instruct"
  EXPECT_EQ(summary["num_fewshot"].get<int>(), 5);
  EXPECT_NE(out.find("| gsm8k | 16 | "), std::string::npos) << out;
  EXPECT_NE(out.find("flexible_extract"), std::string::npos) << out;
}

TEST(EvalCli, HumanEvalSliceRunsTheSandbox) {
  if (!std::filesystem::exists(default_model_dir() / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << default_model_dir();
  auto dir = temp_dir();
  std::string out;
  ASSERT_EQ(run(fmt::format("eval --task humaneval --limit 2 --batch 2 --threshold 0.9 --gen-length 32 "
                            "--block-length 32 --out {}",
                            dir.string()),
                &out),
            0)
      << out;
  std::ifstream in(dir / "samples.jsonl");
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    auto s = nlohmann::json::parse(line);
    const std::string result = s["sandbox_result"];
    EXPECT_EQ(s["correct"].get<bool>(), result == "passed") << result;
  }
  EXPECT_EQ(n, 2);
  auto summary = load_json(dir / "summary.json");
  EXPECT_FALSE(summary["sandbox"]["python"].get<std::string>().empty());
  EXPECT_EQ(summary["metrics"][0]["name"], "pass@1");
  EXPECT_NE(out.find("[sandbox humaneval]"), std::string::npos) << out;
}

TEST(EvalCli, DryRunAndArgumentErrors) {
  auto dir = temp_dir();
  std::string out;
  ASSERT_EQ(run(fmt::format("eval --task mbpp --dry-run --limit 3 --out {}", dir.string()), &out), 0) << out;
  std::ifstream in(dir / "prompts.jsonl");
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  EXPECT_EQ(n, 3);
  out.clear();
  std::ofstream(dir / "b.json") << R"({"task": "gsm8k", "tokens_per_second": 1, "tokens_per_second_released": 1})";
  EXPECT_EQ(run(fmt::format("eval --task arith --limit 1 --baseline {}/b.json", dir.string()), &out), 2) << out;
  EXPECT_NE(out.find("is for task 'gsm8k'"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run("eval --task arith --limit 1 --chat --raw", &out), 2) << out;
}

TEST(EvalCli, UnknownTaskIsAnError) {
  std::string out;
  EXPECT_EQ(run("eval --task nope --limit 1", &out), 2) << out;
  EXPECT_NE(out.find("--task 'nope' is not known"), std::string::npos) << out;
}

}  // namespace
}  // namespace flashdllm::test
