// `flashdllm bench` end to end (the CI run of issue 7 item 3): a tiny grid file on the small default
// model (two accuracy points and two timing-only batch sizes, seconds on one core) writes
// results.jsonl / summary.json / summary.md / summary.csv that agree with each other and carry the
// provenance; the flag form and --dry-run list the expected points; argument errors are clear.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/model_fixture.h"
#include "common/test_paths.h"

namespace flashdllm::test {
namespace {

int run(const std::string& args, std::string* out, const std::string& env = "") {
  FILE* p = popen(fmt::format("{} {} {} 2>&1", env, cli_binary().string(), args).c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(BenchCli, TinyGridWritesConsistentOutputs) {
  if (!std::filesystem::exists(default_model_dir() / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << default_model_dir();
  const auto dir = temp_dir();
  std::ofstream(dir / "grid.json") << R"({
    "defaults": {"task": "arith", "limit": 2, "batches": [2], "repeats": 2, "warmup": 0,
                 "options": {"gen_length": 32, "block_length": 16, "threshold": 0.9}},
    "groups": [
      {"name": "acc", "methods": ["none", "flash+verify"], "sweep": {"gamma": [0.8]}},
      {"name": "batch", "methods": ["flash"], "timing_only": true, "limit": 0, "batches": [1, 2], "repeats": 1}
    ]})";
  std::string out;
  ASSERT_EQ(run(fmt::format("bench --threads 1 --grid {0}/grid.json --out {0}/res", dir.string()), &out,
                "FLASHDLLM_COMMIT=cafe1234 OMP_NUM_THREADS=1"),
            0)
      << out;
  const auto res = dir / "res";
  const auto summary = load_json(res / "summary.json");
  EXPECT_EQ(summary["commit"], "cafe1234");
  EXPECT_EQ(summary["tool"], "flashdllm bench");
  EXPECT_NE(summary["command"].get<std::string>().find("bench --threads 1 --grid"), std::string::npos);
  EXPECT_EQ(summary["hardware"]["backend"].get<std::string>().rfind("cpu", 0), 0u);
  EXPECT_TRUE(summary["hardware"].contains("cpu_model"));
  EXPECT_EQ(summary["grid"]["groups"].size(), 2u);
  const auto& pts = summary["points"];
  ASSERT_EQ(pts.size(), 4u);
  const auto jl = lines_of(res / "results.jsonl");
  ASSERT_EQ(jl.size(), 4u);
  const auto csv = lines_of(res / "summary.csv");
  ASSERT_EQ(csv.size(), 5u);  // header + one row per point
  std::vector<std::string> labels;
  for (size_t i = 0; i < pts.size(); ++i) {
    const auto& p = pts[i];
    labels.push_back(p["label"].get<std::string>() + " b" + std::to_string(p["batch"].get<int>()));
    EXPECT_EQ(nlohmann::json::parse(jl[i])["label"], p["label"]);
    EXPECT_EQ(csv[i + 1].rfind(p["id"].get<std::string>() + ",", 0), 0u) << csv[i + 1];
    const auto& m = p["metrics"];
    for (const char* k : {"tokens_per_second", "tokens_per_second_released", "tokens_per_iteration", "mean_nfe",
                          "seconds", "peak_memory_bytes", "forward_passes"}) {
      ASSERT_TRUE(m.contains(k)) << k;
      EXPECT_EQ(m[k]["values"].size(), static_cast<size_t>(p["repeats"].get<int>())) << k;
      EXPECT_LE(m[k]["min"].get<double>(), m[k]["median"].get<double>()) << k;
      EXPECT_LE(m[k]["median"].get<double>(), m[k]["max"].get<double>()) << k;
    }
    EXPECT_GT(m["tokens_per_second"]["min"].get<double>(), 0);
    const auto& v = m["tokens_per_second"]["values"];
    EXPECT_DOUBLE_EQ(m["tokens_per_second"]["median"].get<double>(),
                     v.size() == 2 ? (v[0].get<double>() + v[1].get<double>()) / 2 : v[0].get<double>());
    EXPECT_GT(m["peak_memory_bytes"]["median"].get<double>(), 1e6);
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"none b2", "flash+verify gamma=0.8 b2", "flash b1", "flash b2"}));
  // Accuracy points: scored (accuracy = correct / n); Flash-Verify checks drafts; speed-ups vs p01.
  EXPECT_EQ(pts[0]["n"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(pts[0]["accuracy"].get<double>(), pts[0]["correct"].get<int>() / 2.0);
  EXPECT_DOUBLE_EQ(pts[0]["speedup"].get<double>(), 1.0);
  EXPECT_EQ(pts[1]["baseline"], "p01");
  EXPECT_NEAR(pts[1]["speedup"].get<double>(),
              pts[1]["metrics"]["tokens_per_second"]["median"].get<double>() /
                  pts[0]["metrics"]["tokens_per_second"]["median"].get<double>(),
              1e-9);
  EXPECT_GT(pts[1]["metrics"]["verify_candidates"]["median"].get<double>(), 0);
  EXPECT_TRUE(pts[1]["options"]["verify"].get<bool>());
  EXPECT_EQ(pts[1]["options"]["flash"]["slots"].get<int>(), 2);
  // Timing-only points: batch-many prompts, no accuracy, no baseline (no none point at those batches).
  EXPECT_TRUE(pts[2]["accuracy"].is_null());
  EXPECT_EQ(pts[2]["n"].get<int>(), 1);
  EXPECT_EQ(pts[3]["n"].get<int>(), 2);
  EXPECT_TRUE(pts[3]["speedup"].is_null());
  const std::string md = out.substr(out.find("# flashdllm bench"));
  EXPECT_NE(md.find("## Table 1 style: arith accuracy (2 documents), gen_length 32, batch 2"), std::string::npos) << md;
  EXPECT_NE(md.find("## Throughput and peak memory vs batch (timing-only points)"), std::string::npos) << md;
  EXPECT_NE(md.find("* commit: `cafe1234`"), std::string::npos) << md;
  std::ifstream f(res / "summary.md");
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), md);
  EXPECT_NE(out.find("[bench]"), std::string::npos) << out;  // the progress display (plain lines off a terminal)
}

TEST(BenchCli, FlagsDryRunAndErrors) {
  std::string out;
  ASSERT_EQ(run("bench --dry-run --limit 5 --methods none,dual,flash,flash+verify --sweep threshold=0.7,0.9 "
                "--sweep gamma=0.7,0.8,0.9 --sweep track_num=2,4 --batches 1,8",
                &out),
            0)
      << out;
  // none, dual: 2 thresholds; flash: 2 x 2 track; verify: 2 x 3 x 2; all at 2 batch sizes.
  EXPECT_NE(out.find(fmt::format("{} points", 2 * (2 + 2 + 4 + 12))), std::string::npos) << out;
  EXPECT_NE(out.find("flash+verify threshold=0.9 gamma=0.9 track_num=4"), std::string::npos) << out;

  auto fails = [&](const std::string& args, const std::string& message) {
    std::string o;
    EXPECT_EQ(run(args, &o), 2) << args << "\n" << o;
    EXPECT_NE(o.find(message), std::string::npos) << args << "\n" << o;
  };
  fails("bench --dry-run --cache flash", "--cache is set per point: use --methods");
  fails("bench --dry-run --methods none,fast", "unknown method 'fast'");
  fails("bench --dry-run --sweep slots=1,2", "unknown option key 'slots'");
  fails("bench --dry-run --sweep threshold=0.9,2", "option threshold: '2'");
  fails("bench --dry-run --batches 0", "--batches: '0' is not a positive integer");
  fails("bench --dry-run --grid /nonexistent.json --sweep gamma=0.8", "--sweep cannot be combined with --grid");
  fails("bench --dry-run --methods dual --gen-length 100", "gen_length 100 is not a multiple of block_length 32");
  fails("bench --dry-run --baseline-method fastest", "--baseline-method: unknown method 'fastest'");
}

}  // namespace
}  // namespace flashdllm::test
