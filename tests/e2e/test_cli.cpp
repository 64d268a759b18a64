// End-to-end: the flashdllm command on the golden checkpoint (token ids in, ids out), its JSON
// output, exit codes and error messages.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <sstream>
#include <string>
#include <sys/wait.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/golden_fixture.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "io/safetensors.h"
#include "model/model_config.h"
#include "model/model_info.h"

namespace flashdllm::test {
namespace {

struct CliRun {
  int code = -1;
  std::string out;  // stdout + stderr
};

CliRun run_cli(const std::string& args) {
  std::string cmd = fmt::format("{} {} 2>&1", cli_binary().string(), args);
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string ids_arg(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

TEST(Cli, GeneratesGoldenRunFromTokenIds) {
  // The single-prompt golden LLaDA run with the largest decision margin (G1: run 212, prompt
  // common[10], G 32, B 8, steps 8): far from any near-tie, so the CLI must reproduce it exactly.
  const nlohmann::json& g = golden_json("gen_llada.json");
  if (g["runs"].empty()) GTEST_SKIP() << "the fixture records no LLaDA sampler runs";
  const nlohmann::json* run = nullptr;
  for (const auto& r : g["runs"])
    if (!r.value("batched", false) && r["min_margin"].is_number() &&
        (run == nullptr || r["min_margin"].get<double>() > (*run)["min_margin"].get<double>()))
      run = &r;
  ASSERT_NE(run, nullptr);
  ASSERT_GT((*run)["min_margin"].get<double>(), kFp32DecisionMargin);
  const auto prompt = golden_prompt(g, *run);
  CliRun r =
      run_cli(fmt::format("generate -m {} --cache none --prompt-ids {} --gen-length {} --block-length {} --steps {} "
                          "--confidence-f32 --json",
                          golden_dir().string(), ids_arg(prompt), (*run)["gen_length"].get<int>(),
                          (*run)["block_length"].get<int>(), (*run)["steps"].get<int>()));
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["canvas_ids"].get<std::vector<int32_t>>(), (*run)["output_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(j["results"][0]["nfe"].get<int>(), (*run)["nfe"].get<int>());
  EXPECT_EQ(j["results"][0]["prompt_ids"].get<std::vector<int32_t>>(), prompt);
}

TEST(Cli, PlainOutputPrintsIdsWithoutTokenizer) {
  CliRun r = run_cli(fmt::format("generate -m {} --cache none --prompt-ids 5,6,7 --gen-length 8 --block-length 8 "
                              "--steps 8",
                              golden_dir().string()));
  ASSERT_EQ(r.code, 0) << r.out;
  // stdout's line of ids: 8 ids separated by spaces (the timing line goes to stderr).
  std::istringstream lines(r.out);
  std::string first;
  while (std::getline(lines, first) && first.rfind("[flashdllm]", 0) == 0) {
  }
  int n = 0;
  for (size_t i = 0; i < first.size(); ++i) n += first[i] != ' ' && (i == 0 || first[i - 1] == ' ');
  EXPECT_EQ(n, 8) << r.out;
  EXPECT_NE(r.out.find("NFE 8"), std::string::npos) << r.out;
}

TEST(Cli, TextPromptWithoutTokenizerIsAClearError) {
  CliRun r = run_cli(fmt::format("generate -m {} -p hello", golden_dir().string()));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("has no tokenizer.json"), std::string::npos) << r.out;
}

TEST(Cli, ImpossibleParametersExitWithCode2) {
  CliRun r = run_cli(fmt::format("generate -m {} --cache none --prompt-ids 5,6 --gen-length 100 --block-length 32",
                              golden_dir().string()));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("not a multiple of block_length"), std::string::npos) << r.out;
  r = run_cli(fmt::format("generate -m {} --cache none --prompt-ids 5,6 --steps 7", golden_dir().string()));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("divisible"), std::string::npos) << r.out;
  r = run_cli(fmt::format("generate -m {} --prompt-ids 5,x", golden_dir().string()));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("'x' is not a token id"), std::string::npos) << r.out;
}

TEST(Cli, BadOptionValuesAreRefusedNotIgnored) {
  const std::string base = fmt::format("generate -m {} --prompt-ids 5,6 --gen-length 32 --block-length 32 ",
                                       golden_dir().string());
  // Values that used to fall back silently to another decoding mode, and an out-of-range pad tile
  // that used to allocate without bound: all exit 2 with the parameter named.
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--cache none --threshold=-0.5", "threshold must be in (0, 1]"},
           {"--cache none --threshold nan", "threshold must be in (0, 1]"},
           {"--block-length=-16", "--block-length"},
           {"--cache none --steps 64", "steps must be in [1, gen_length = 32]"},
           {"--cache none --steps 32 --eos-pad-tile 2147483647", "eos_pad_tile must be in [0, max_sequence_length"},
           {"--bogus-flag", "bogus"},
           {"--gen-length abc", "--gen-length"},
           {"--cache none --slots 3", "--slots applies to --cache flash only"},
           {"--cache dual --track-num 2", "--track-num applies to --cache flash only"},
           {"--cache flash --max-candidates 2", "--max-candidates applies to --verify only"},
           {"--cache flash --gamma 0.9", "--gamma applies to --verify only"},
           {"--cache flash --verify-kept commits", "--verify-kept applies to --verify only"},
           {"--cache flash --verify --verify-kept newest", "--verify-kept: 'newest' is not released or commits"},
           {"--cache flash --steps 8", "--steps applies to --cache none/prefix/dual only"},
           {"--cache none --threshold 0.9 --steps 8", "steps applies to quota decoding only"},
           {"--cache flash --threshold 0.9 --tokens-per-step 2", "exclude each other"},
           {"--cache none --eot-id 99999", "eot_id 99999 is not a token id of this model"},
           {"--cache none --eot-id -5", "--eot-id must be a token id >= 0"},
           {"--prompt-ids 5,,6", "--prompt-ids: empty entry in '5,,6'"}}) {
    CliRun r = run_cli(base + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
  }
}

TEST(Cli, MissingModelDirectoryNamesIt) {
  CliRun r = run_cli("generate -m /nonexistent/model --prompt-ids 1,2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
}

TEST(Cli, InfoPrintsConfigAndParameterCount) {
  CliRun r = run_cli(fmt::format("info -m {}", golden_dir().string()));
  ASSERT_EQ(r.code, 0) << r.out;
  // The parameter count from the config's shapes (G1: 2*1024*256 + 3*(4*256^2 + 3*256*512 + 2*256) + 256
  // = 2,492,160), the dtype of the fixture's tensors, its layer count.
  const ModelConfig c = load_model_config(golden_dir() / "config.json");
  const Checkpoint ck = Checkpoint::open(golden_dir());
  EXPECT_NE(r.out.find(fmt::format("parameters        {} ", c.parameter_count())), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("checkpoint dtype  {}", checkpoint_dtype_summary(ck))), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(fmt::format("n_layers          {}\n", c.n_layers)), std::string::npos) << r.out;
}

// A Dream checkpoint: `info` describes it (family, GQA, bias, shift, K/V per token).
TEST(Cli, InfoDescribesDream) {
  const std::filesystem::path dream = test_data_dir() / "golden" / "dream_a";
  CliRun r = run_cli(fmt::format("info -m {}", dream.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* part : {"architecture      Dream (model_type Dream)", "n_kv_heads 2",
                           "GQA: 2 query heads per K/V head", "q/k/v bias yes", "logit shift       yes"})
    EXPECT_NE(r.out.find(part), std::string::npos) << "lacks '" << part << "':\n" << r.out;
  const ModelConfig c = load_model_config(dream / "config.json");
  EXPECT_NE(r.out.find(fmt::format("parameters        {} ", c.parameter_count())), std::string::npos) << r.out;
}

// A Dream checkpoint generates with Dream's sampler when the command line names no cache; the block
// denoisers (Flash-Verify included) run on it.
TEST(Cli, GenerateOnDreamTakesDreamsSampler) {
  const std::filesystem::path dream = test_data_dir() / "golden" / "dream_a";
  CliRun r = run_cli(
      fmt::format("generate -m {} --prompt-ids 5,6,7 --gen-length 16 --steps 8 --top-k 50 --json", dream.string()));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["options"]["cache"], "none");
  EXPECT_EQ(j["options"]["sampler"], "dream");
  EXPECT_EQ(j["options"]["top_k"], 50);
  EXPECT_EQ(j["results"][0]["nfe"], 8);
  EXPECT_EQ(j["results"][0]["canvas_ids"].size(), 16u);  // the whole canvas (the answer ends at its EOS)
  // Every block denoiser reads the shifted logits (tests/denoise/test_dream_caches.cpp; Flash-Verify's
  // source rows: tests/denoise/test_dream_verify.cpp).
  for (const char* mode :
       {"--cache prefix", "--cache dual", "--cache none --sampler llada", "--cache flash", "--cache flash --verify"}) {
    r = run_cli(
        fmt::format("generate -m {} --prompt-ids 5,6 {} --gen-length 16 --block-length 8 --threshold 0.9 --json",
                    dream.string(), mode));
    ASSERT_EQ(r.code, 0) << mode << ": " << r.out;
    const nlohmann::json g = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    const size_t n = g["results"][0]["canvas_ids"].size();  // flash: up to its finishing EOS
    EXPECT_TRUE(n > 0 && n <= 16u) << mode << ": " << n;
  }
  r = run_cli(fmt::format("generate -m {} --prompt-ids 5,6 --verify", dream.string()));
  EXPECT_NE(r.out.find("--verify applies to --cache flash only (cache is 'none', this model's default)"),
            std::string::npos)
      << r.out;
  // LLaDA's default stays flash: Dream's flags given without --cache are refused there.
  r = run_cli(fmt::format("generate -m {} --prompt-ids 5,6 --alg maskgit_plus", golden_dir().string()));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--alg applies to --cache none only (cache is 'flash', the default)"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace flashdllm::test
