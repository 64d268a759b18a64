// The bench library (src/eval/bench.h): option keys and sweeps, grid files, grid expansion,
// spreads, baselines and Table 1 selection, the equal-accuracy comparison, CSV/JSON/markdown
// outputs, provenance helpers, and run_bench on the small default model (counters, peak memory,
// engine reloads).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "eval/bench.h"
#include "flashdllm/status.h"

namespace flashdllm::eval {
namespace {

using KV = std::vector<std::pair<std::string, std::string>>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(BenchOptions, ParsesSweepsAndRejectsBadOnes) {
  SweepAxis a = parse_sweep(" track-num = 2, 4 ,8");
  EXPECT_EQ(a.key, "track_num");
  EXPECT_EQ(a.values, (std::vector<std::string>{"2", "4", "8"}));
  EXPECT_EQ(parse_sweep("threshold=off,0.9").values, (std::vector<std::string>{"off", "0.9"}));
  EXPECT_NE(error_of([] { parse_sweep("threshold"); }).find("KEY=V1"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep("slots=1,2"); }).find("unknown option key 'slots'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep("gamma="); }).find("no values"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep("gamma=0.8,0.80"); }).find("repeated"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep("threshold=0.5,1.5"); }).find("option threshold: '1.5'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep("gamma=0"); }).find("option gamma"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep("mask_num=0"); }).find("option mask_num: '0' is not an integer >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_sweep("verify_rule=strict"); }).find("product or paper"), std::string::npos);
  EXPECT_EQ(parse_positive_list("1, 8,32", "--batches"), (std::vector<int64_t>{1, 8, 32}));
  EXPECT_NE(error_of([] { parse_positive_list("1,0", "--batches"); }).find("--batches: '0'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_positive_list(" , ", "--batches"); }).find("no values"), std::string::npos);
}

TEST(BenchOptions, AppliesOptionsAndMethods) {
  GenerateOptions o;
  set_option(o, "threshold", "0.75");
  set_option(o, "gamma", "0.85");
  set_option(o, "track-num", "-1");
  set_option(o, "block_length", "16");
  set_option(o, "verify_rule", "paper");
  ASSERT_TRUE(o.sampling.threshold.has_value());
  EXPECT_DOUBLE_EQ(*o.sampling.threshold, 0.75);
  EXPECT_DOUBLE_EQ(o.decode.gamma, 0.85);
  EXPECT_EQ(o.decode.track_num, -1);  // negative = full recompute, allowed
  EXPECT_EQ(o.decode.block_length, 16);
  EXPECT_EQ(o.decode.verify_rule, VerifyRule::kPaper);
  set_option(o, "threshold", "off");
  EXPECT_FALSE(o.sampling.threshold.has_value());

  o.decode.max_candidates = 4;
  set_option(o, "verify-kept", "commits");
  EXPECT_EQ(o.decode.verify_kept, VerifyKept::kCommits);
  EXPECT_EQ(option_text(o, "verify_kept"), "commits");
  EXPECT_NE(error_of([&] { set_option(o, "verify_kept", "all"); }).find("released or commits"), std::string::npos);
  apply_bench_method(o, "flash+verify");
  EXPECT_EQ(o.decode.cache, CacheMode::kFlash);
  EXPECT_TRUE(o.decode.verify);
  EXPECT_EQ(o.decode.max_candidates, 4);
  EXPECT_EQ(o.decode.verify_kept, VerifyKept::kCommits);
  EXPECT_EQ(to_json(o)["verify_options"]["kept"], "commits");
  apply_bench_method(o, "flash");
  EXPECT_FALSE(o.decode.verify);
  EXPECT_EQ(o.decode.max_candidates, 0);  // a verify-only setting
  EXPECT_EQ(o.decode.verify_kept, VerifyKept::kReleased);
  apply_bench_method(o, "dual");
  EXPECT_EQ(o.decode.cache, CacheMode::kDual);
  EXPECT_EQ(o.decode.track_num, 4) << "flash-only settings are reset for another method";
  EXPECT_NE(error_of([&] { apply_bench_method(o, "flash-verify"); }).find("flash+verify"), std::string::npos);

  EXPECT_TRUE(option_applies("gamma", "flash+verify", "0.8"));
  EXPECT_FALSE(option_applies("gamma", "flash", "0.8"));
  EXPECT_TRUE(option_applies("verify_kept", "flash+verify", "commits"));
  EXPECT_FALSE(option_applies("verify-kept", "flash", "commits"));
  EXPECT_FALSE(option_applies("track_num", "dual", "2"));
  EXPECT_TRUE(option_applies("track_num", "flash", "2"));
  EXPECT_FALSE(option_applies("steps", "flash", "64"));
  EXPECT_TRUE(option_applies("threshold", "flash", "0.9"));
  EXPECT_FALSE(option_applies("threshold", "flash", "off"));  // flash always decodes by a threshold
  EXPECT_TRUE(option_applies("threshold", "none", "off"));
}

TEST(BenchGrid, ExpandsTheApplicableProductInOrder) {
  BenchGroup g;
  g.name = "main";
  g.methods = {"none", "flash", "flash+verify"};
  g.sweeps = {parse_sweep("threshold=off,0.7,0.9"), parse_sweep("gamma=0.7,0.8"), parse_sweep("track_num=2,4")};
  g.batches = {1, 8};
  g.options = {{"gen_length", "64"}};
  GenerateOptions base;
  base.decode.block_length = 16;
  const auto pts = expand_grid({g}, base);
  // none: 3 thresholds x 2 batches; flash: 2 thresholds x 2 track x 2 batches; verify: x 2 gamma more.
  ASSERT_EQ(pts.size(), 6u + 8u + 16u);
  EXPECT_EQ(pts[0].id, "p01");
  EXPECT_EQ(pts[29].id, "p30");
  EXPECT_EQ(pts[0].label(), "none threshold=off");
  EXPECT_FALSE(pts[0].options.sampling.threshold.has_value());
  EXPECT_EQ(pts[2].label(), "none threshold=0.9");
  EXPECT_EQ(pts[3].batch, 8);
  const BenchPoint& f = pts[6];
  EXPECT_EQ(f.label(), "flash threshold=0.7 track_num=2");
  EXPECT_EQ(f.options.decode.cache, CacheMode::kFlash);
  EXPECT_EQ(f.options.decode.n_slots, 1);  // slots = batch
  EXPECT_EQ(f.options.sampling.gen_length, 64);
  EXPECT_EQ(f.options.decode.track_num, 2);
  EXPECT_EQ(pts[7].label(), "flash threshold=0.7 track_num=4");
  EXPECT_EQ(pts[10].options.decode.n_slots, 8);
  const BenchPoint& v = pts[14];
  EXPECT_EQ(v.label(), "flash+verify threshold=0.7 gamma=0.7 track_num=2");  // last axis fastest
  EXPECT_TRUE(v.options.decode.verify);
  EXPECT_EQ(pts[15].label(), "flash+verify threshold=0.7 gamma=0.7 track_num=4");
  EXPECT_EQ(pts[16].label(), "flash+verify threshold=0.7 gamma=0.8 track_num=2");
  EXPECT_DOUBLE_EQ(pts[16].options.decode.gamma, 0.8);
  for (const auto& p : pts) {
    EXPECT_EQ(p.group, "main");
    EXPECT_EQ(p.options.decode.block_length, 16);
  }
}

TEST(BenchGrid, RejectsImpossibleSettingsBeforeRunning) {
  BenchGroup g;
  g.name = "bad";
  g.methods = {"dual"};
  g.options = {{"gen_length", "100"}};
  EXPECT_NE(error_of([&] { expand_grid({g}, {}); }).find("group 'bad', dual: gen_length 100 is not a multiple of block_length 32"),
            std::string::npos);
  g.methods = {"dual"};  // blocks for every family (none's sampler waits for the model: Dream's has none)
  g.options = {{"gen_length", "64"}, {"steps", "3"}};
  EXPECT_NE(error_of([&] { expand_grid({g}, {}); }).find("steps (3) must be divisible"), std::string::npos);
  g.methods = {"none"};
  g.options = {{"gen_length", "64"}, {"steps", "3"}, {"threshold", "0.9"}};  // threshold mode: steps would be ignored
  EXPECT_NE(error_of([&] { expand_grid({g}, {}); }).find("steps applies to quota decoding only"), std::string::npos);
  g.options = {{"gen_length", "64"}, {"threshold", "0.9"}};
  EXPECT_EQ(expand_grid({g}, {}).size(), 1u);
  g.methods = {};
  EXPECT_NE(error_of([&] { expand_grid({g}, {}); }).find("no methods"), std::string::npos);
}

TEST(BenchGrid, ParsesGridFilesInOrder) {
  const auto grid = nlohmann::ordered_json::parse(R"({
    "comment": "test grid",
    "defaults": {"task": "arith", "limit": 50, "batches": [16], "repeats": 1, "warmup": 0,
                 "options": {"gen_length": 128}},
    "groups": [
      {"name": "verify", "methods": ["flash+verify"], "sweep": {"gamma": [0.7, 0.9], "threshold": ["0.8", 0.9]},
       "options": {"track_num": 4}},
      {"methods": ["none", "flash"], "timing_only": true, "batches": [1, 4], "repeats": 3, "limit": 0}
    ]})");
  const auto groups = parse_grid(grid, "g.json");
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].name, "verify");
  EXPECT_EQ(groups[0].workload.limit, 50);
  ASSERT_EQ(groups[0].sweeps.size(), 2u);
  EXPECT_EQ(groups[0].sweeps[0].key, "gamma");  // the file's order, not alphabetical
  EXPECT_EQ(groups[0].sweeps[1].values, (std::vector<std::string>{"0.8", "0.9"}));
  EXPECT_EQ(groups[0].options, (KV{{"gen_length", "128"}, {"track_num", "4"}}));
  EXPECT_EQ(groups[1].name, "g2");
  EXPECT_TRUE(groups[1].workload.timing_only);
  EXPECT_EQ(groups[1].workload.limit, 0);
  EXPECT_EQ(groups[1].repeats, 3);
  EXPECT_EQ(groups[1].batches, (std::vector<int64_t>{1, 4}));
  const auto pts = expand_grid(groups, {});
  ASSERT_EQ(pts.size(), 4u + 4u);
  EXPECT_EQ(pts[0].label(), "flash+verify gamma=0.7 threshold=0.8");
  EXPECT_EQ(pts[0].options.decode.track_num, 4);
  EXPECT_EQ(pts[0].options.sampling.gen_length, 128);
  EXPECT_TRUE(pts[4].workload.timing_only);

  auto bad = [&](const char* text) {
    return error_of([&] { parse_grid(nlohmann::ordered_json::parse(text), "g.json"); });
  };
  EXPECT_NE(bad(R"({"groups": [{"method": ["none"]}]})").find("grid 'g.json': groups[0].method: unknown field"),
            std::string::npos);
  EXPECT_NE(bad(R"({"groups": []})").find("non-empty array"), std::string::npos);
  EXPECT_NE(bad(R"({"groups": [{"methods": ["fast"]}]})").find("unknown method 'fast'"), std::string::npos);
  EXPECT_NE(bad(R"({"groups": [{"sweep": {"gamma": [1.5]}}]})").find("groups[0].sweep"), std::string::npos);
  EXPECT_NE(bad(R"({"groups": [{"options": {"slots": 4}}]})").find("unknown option key 'slots'"), std::string::npos);
  EXPECT_NE(bad(R"({"groups": [{"batches": [0]}]})").find("groups[0].batches"), std::string::npos);
  EXPECT_NE(bad(R"({"groups": [{"task": "gsm9k"}]})").find("gsm9k"), std::string::npos);
  EXPECT_NE(bad(R"({"defaults": {"repeats": 0}, "groups": [{}]})").find("defaults.repeats"), std::string::npos);
  EXPECT_NE(bad(R"({"group": []})").find("unknown top-level field 'group'"), std::string::npos);
}

TEST(BenchStats, SpreadIsMedianMinMax) {
  Spread s = spread_of({3.0, 1.0, 2.0});
  EXPECT_DOUBLE_EQ(s.median, 2.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 3.0);
  s = spread_of({4.0, 1.0, 2.0, 10.0});
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(spread_of({5.0}).median, 5.0);
  error_of([] { spread_of({}); });
}

/// A measured point with the given repeats' tokens/s, accuracy and tokens/iteration.
PointResult fake(const std::string& id, const std::string& method, const KV& swept, std::vector<double> tps,
                 double accuracy, double tpi, int64_t batch = 16) {
  PointResult r;
  r.point.id = id;
  r.point.group = std::string(1, 'g');  // (a literal assignment trips GCC 12's -Wrestrict false positive)
  r.point.method = method;
  r.point.batch = batch;
  r.point.repeats = static_cast<int64_t>(tps.size());
  r.point.swept = swept;
  apply_bench_method(r.point.options, method);
  for (const auto& [k, v] : swept) set_option(r.point.options, k, v);
  for (double t : tps) {
    RepeatMeasure m;
    m.tokens_per_second = t;
    m.tokens_per_second_released = 2 * t;
    m.tokens_per_iteration = tpi;
    m.mean_nfe = 10;
    m.forward_passes = method == "flash+verify" ? 20 : 10;
    m.verify_candidates = method == "flash+verify" ? 8 : 0;
    m.verify_accepted = method == "flash+verify" ? 2 : 0;
    m.seconds = 1.0;
    m.accuracy = accuracy;
    m.n = 200;
    m.correct = static_cast<int64_t>(std::lround(accuracy * 200));
    m.peak_memory_bytes = 64.0 * 1024 * 1024;
    r.repeats.push_back(m);
  }
  summarize_repeats(r);
  return r;
}

TEST(BenchResults, BaselinesSpeedupsAndTableRows) {
  std::vector<PointResult> rs = {
      fake("p01", "none", {{"threshold", "off"}}, {10, 11, 12}, 0.5, 1.0),
      fake("p02", "none", {{"threshold", "0.9"}}, {20}, 0.5, 3.0),
      fake("p03", "dual", {{"threshold", "0.9"}}, {60, 40, 50}, 0.5, 3.0),
      fake("p04", "dual", {{"threshold", "0.7"}}, {55}, 0.45, 4.0),  // no none point at 0.7: the one without threshold
      fake("p05", "flash", {{"threshold", "0.8"}, {"track_num", "2"}}, {30}, 0.5, 3.0),
      fake("p06", "flash", {{"threshold", "0.9"}, {"track_num", "4"}}, {25}, 0.5, 2.5),
      fake("p07", "flash+verify", {{"threshold", "0.9"}, {"gamma", "0.7"}}, {33}, 0.5, 3.5),
      fake("p08", "flash+verify", {{"threshold", "0.9"}, {"gamma", "0.8"}}, {35}, 0.505, 3.4),
      fake("p09", "none", {{"threshold", "0.9"}}, {5}, 0.5, 3.0, /*batch=*/1),  // another workload
  };
  finalize_results(rs, "none", {{"threshold", "0.9"}, {"gamma", "0.8"}, {"track_num", "4"}});
  EXPECT_EQ(rs[0].baseline, "p01");
  EXPECT_DOUBLE_EQ(*rs[0].speedup, 1.0);
  EXPECT_EQ(rs[2].baseline, "p02");
  EXPECT_DOUBLE_EQ(*rs[2].speedup, 50.0 / 20.0);  // medians
  EXPECT_DOUBLE_EQ(*rs[2].speedup_released, 100.0 / 40.0);
  EXPECT_EQ(rs[3].baseline, "p01");
  EXPECT_DOUBLE_EQ(*rs[3].speedup, 55.0 / 11.0);
  EXPECT_EQ(rs[5].baseline, "p02");  // flash's default threshold 0.9 matches
  EXPECT_EQ(rs[8].baseline, "p09");  // batch 1 is its own workload
  EXPECT_DOUBLE_EQ(*rs[8].speedup, 1.0);
  // Table rows: the points at threshold 0.9 / gamma 0.8 / track 4, else the method's first point.
  std::vector<std::string> rows;
  for (const auto& r : rs)
    if (r.table1) rows.push_back(r.point.id);
  EXPECT_EQ(rows, (std::vector<std::string>{"p02", "p03", "p06", "p08", "p09"}));

  finalize_results(rs, "dual", {{"threshold", "0.1"}});
  EXPECT_EQ(rs[0].baseline, "p03");  // no dual point without a threshold: the first dual point
  EXPECT_EQ(rs[1].baseline, "p03");
  EXPECT_FALSE(rs[8].speedup.has_value());  // no dual point at batch 1
  rows.clear();
  for (const auto& r : rs)
    if (r.table1) rows.push_back(r.point.id);
  EXPECT_EQ(rows, (std::vector<std::string>{"p01", "p03", "p05", "p07", "p09"}));
}

TEST(BenchResults, OutputsCarryEveryPoint) {
  std::vector<PointResult> rs = {
      fake("p01", "none", {{"threshold", "0.9"}}, {20, 22}, 0.5, 3.0),
      fake("p02", "flash", {{"threshold", "0.7"}}, {30}, 0.40, 4.0),
      fake("p03", "flash", {{"threshold", "0.9"}}, {25}, 0.50, 3.0),
      fake("p04", "flash", {{"threshold", "0.8"}}, {27}, 0.495, 3.2),
      fake("p05", "flash+verify", {{"threshold", "0.9"}}, {26}, 0.505, 3.5),
      fake("p06", "flash+verify", {{"threshold", "0.7"}}, {26}, 0.30, 5.0),
  };
  rs[1].point.group = "odd, \"name\"";
  finalize_results(rs, "none", {{"threshold", "0.9"}});
  nlohmann::ordered_json meta = {{"command", "flashdllm bench x"}, {"commit", "abc"}, {"date", "d"}, {"model", "m"}};
  const std::string md = bench_markdown(meta, rs);
  EXPECT_NE(md.find("* commit: `abc`"), std::string::npos) << md;
  EXPECT_NE(md.find("| none | threshold 0.9, block 32 | 200 | 50.00 (43.1–56.9) | 21.0 [20.0–22.0] | 42.0 [40.0–44.0] | "
                    "1.00x (1.00x) |"),
            std::string::npos)
      << md;
  // p05 (50.5%) is within 1 pt of p03 (50.0%) and p04 (49.5%): the best of them by tokens/iter is p04.
  EXPECT_NE(md.find("| p05 threshold=0.9 | 50.50 | 3.50 | p04 threshold=0.8 | 49.50 | 3.20 | +0.30 |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| p06 threshold=0.7 | 30.00 | 5.00 | none within ±1 pt |"), std::string::npos) << md;
  EXPECT_NE(md.find("more tokens per iteration in 1 of 1 comparable points"), std::string::npos) << md;
  EXPECT_NE(md.find("| p06 | g | arith | flash+verify | threshold=0.7 | 16 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2.0 / 8.0 (25%) |"), std::string::npos) << md;  // drafts accepted / checked per request

  const std::string csv = bench_csv(rs);
  std::vector<std::string> lines;
  std::stringstream ss(csv);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 7u);
  auto columns = [](const std::string& l) {  // commas outside quotes
    int n = 1;
    bool q = false;
    for (char c : l) {
      if (c == '"') q = !q;
      if (c == ',' && !q) ++n;
    }
    return n;
  };
  for (const auto& l : lines) EXPECT_EQ(columns(l), columns(lines[0])) << l;
  EXPECT_NE(lines[2].find("\"odd, \"\"name\"\"\""), std::string::npos) << lines[2];
  EXPECT_EQ(lines[1].rfind("p01,g,arith,false,0,none,none threshold=0.9,16,2,0.9,", 0), 0u) << lines[1];

  const auto j = point_to_json(rs[0]);
  EXPECT_EQ(j["swept"]["threshold"].get<double>(), 0.9);
  EXPECT_EQ(j["metrics"]["tokens_per_second"]["values"], nlohmann::ordered_json({20.0, 22.0}));
  EXPECT_DOUBLE_EQ(j["metrics"]["tokens_per_second"]["median"].get<double>(), 21.0);
  EXPECT_EQ(j["correct"].get<int>(), 100);
  EXPECT_EQ(j["baseline"], "p01");
  EXPECT_TRUE(j["table1"].get<bool>());

  const auto dir = test::temp_dir() / "out";
  write_bench_outputs(dir, meta, rs);
  std::ifstream in(dir / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["commit"], "abc");
  EXPECT_EQ(summary["points"].size(), 6u);
  std::ifstream jl(dir / "results.jsonl");
  int n = 0;
  for (std::string l; std::getline(jl, l);) EXPECT_EQ(nlohmann::json::parse(l)["id"], summary["points"][n++]["id"]);
  EXPECT_EQ(n, 6);
  EXPECT_TRUE(std::filesystem::file_size(dir / "summary.md") > 0);
  EXPECT_TRUE(std::filesystem::file_size(dir / "summary.csv") > 0);
}

TEST(BenchProvenance, CpuModelAndCommit) {
  EXPECT_EQ(cpu_model_from_cpuinfo("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) X  \n"
                                   "processor\t: 1\nmodel name\t: other\n"),
            "Intel(R) Xeon(R) X");
  EXPECT_EQ(cpu_model_from_cpuinfo("processor : 0\n"), "");
  EXPECT_EQ(detect_commit(test::temp_dir(), "0123abc"), "0123abc");  // given (apps/: FLASHDLLM_COMMIT)
  EXPECT_EQ(detect_commit(test::temp_dir()), "unknown");  // not a git checkout
  const std::string here = detect_commit(test::repo_data_dir().parent_path());
  EXPECT_TRUE(here == "unknown" || here.size() >= 40) << here;  // a source tarball has no .git
  const auto h = host_info();
  EXPECT_GT(h["logical_cpus"].get<int>(), 0);
  EXPECT_TRUE(h["omp_num_threads"].is_null());
  EXPECT_EQ(host_info("3")["omp_num_threads"], "3");
  const auto meta = bench_meta({"cmd", test::temp_dir(), "0123abc", "1"}, "cpu (1 threads)", "model");
  EXPECT_EQ(meta["commit"], "0123abc");
  EXPECT_EQ(meta["hardware"]["omp_num_threads"], "1");
  EXPECT_EQ(meta["hardware"]["backend"], "cpu (1 threads)");
  EXPECT_EQ(meta["date"].get<std::string>().size(), 20u);  // 2026-01-02T03:04:05Z
}

TEST(BenchRun, SmallModelCountersMemoryAndReloads) {
  const auto model = test::default_model_dir();
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP() << "no default model at " << model;
  BenchGroup acc;
  acc.name = "acc";
  acc.workload.limit = 2;
  acc.methods = {"none", "flash+verify"};
  acc.batches = {2};
  acc.repeats = 2;
  acc.warmup = 1;
  acc.options = {{"gen_length", "32"}, {"block_length", "16"}, {"threshold", "0.9"}};
  BenchGroup timing = acc;
  timing.name = "timing";
  timing.workload.timing_only = true;
  timing.workload.limit = 0;  // = batch prompts
  timing.methods = {"flash"};
  timing.batches = {1, 3};
  timing.repeats = 1;
  timing.warmup = 0;
  const auto points = expand_grid({acc, timing}, {});
  ASSERT_EQ(points.size(), 4u);
  int loads = 0;
  EngineFactory load = [&] {
    ++loads;
    EngineOptions eo;
    eo.model_dir = model;
    eo.threads = 1;
    return Engine::load(eo);
  };
  BenchRunOptions ro;
  ro.data_dir = test::repo_data_dir();
  ro.model_dir = model.string();
  int64_t last_done = -1, total = 0, points_seen = 0;
  ro.progress = [&](int64_t done, int64_t t, const BenchPoint&, size_t) {
    EXPECT_GE(done, last_done);
    last_done = done;
    total = t;
  };
  ro.on_point = [&](const PointResult&) { ++points_seen; };
  std::string backend;
  auto rs = run_bench(load, points, ro, &backend);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(points_seen, 4);
  EXPECT_EQ(total, 2 * 2 + 2 * 2 + 1 + 3);
  EXPECT_EQ(last_done, total);
  EXPECT_EQ(backend.rfind("cpu", 0), 0u);
  ASSERT_EQ(rs.size(), 4u);
  for (const auto& r : rs) {
    ASSERT_EQ(r.repeats.size(), static_cast<size_t>(r.point.repeats));
    for (const auto& [name, s] : r.stats) {
      EXPECT_LE(s.min, s.median) << name;
      EXPECT_LE(s.median, s.max) << name;
    }
    for (const auto& m : r.repeats) {
      EXPECT_GT(m.seconds, 0);
      EXPECT_NEAR(m.tokens_per_second, m.generated_tokens / m.seconds, 1e-9);
      EXPECT_GT(m.peak_memory_bytes, 1e6);
      EXPECT_EQ(m.n, r.point.workload.timing_only ? r.point.batch : 2);
      // Greedy decoding: the counts do not change between repeats.
      EXPECT_EQ(m.mean_nfe, r.repeats.front().mean_nfe);
      EXPECT_EQ(m.accuracy, r.repeats.front().accuracy);
    }
    const auto& m = r.repeats.front();
    if (r.point.options.decode.verify) {
      // An iteration runs a main pass and, unless its first phase finished the request, a verify pass.
      EXPECT_GT(m.forward_passes, m.mean_nfe);
      EXPECT_LE(m.forward_passes, 2 * m.mean_nfe);
      EXPECT_GT(m.verify_candidates, 0);
      EXPECT_LE(m.verify_accepted, m.verify_candidates);
    } else {
      EXPECT_NEAR(m.forward_passes, m.mean_nfe, 1e-9);
      EXPECT_EQ(m.verify_candidates, 0);
    }
    if (r.point.workload.timing_only) {
      EXPECT_EQ(r.stats.count("accuracy"), 0u);
      EXPECT_EQ(m.accuracy, -1.0);
    } else {
      EXPECT_GE(m.accuracy, 0.0);
      EXPECT_DOUBLE_EQ(m.accuracy, m.correct / 2.0);
    }
    EXPECT_EQ(r.peak_memory_kind.find("host peak RSS"), 0u) << r.peak_memory_kind;
  }
  EXPECT_DOUBLE_EQ(rs[0].repeats[0].tokens_per_iteration, 32.0 / rs[0].repeats[0].mean_nfe);  // none fills the canvas

  ro.fresh_engine = true;
  loads = 0;
  last_done = -1;
  run_bench(load, {points[2], points[3]}, ro);
  EXPECT_EQ(loads, 2);
}

}  // namespace
}  // namespace flashdllm::eval
