#include "bench.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "env_registry.h"
#include "eval/bench.h"
#include "eval/progress.h"
#include "eval/sandbox.h"
#include "eval/tasks.h"

namespace flashdllm::cli {

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

namespace {

/// The groups to run: the --grid file's (with --limit / --repeats overriding it), or one group from
/// the flags. Throws Error(kInvalidArgument) for flags that --grid excludes and for bad values.
std::vector<eval::BenchGroup> bench_groups(const BenchArgs& ba) {
  namespace ev = flashdllm::eval;
  auto given = [&](const char* flag) { return ba.app->get_option(flag)->count() > 0; };
  std::vector<ev::BenchGroup> groups;
  if (!ba.grid.empty()) {
    for (const char* f : {"--task", "--data", "--timing-only", "--methods", "--sweep", "--batches", "--warmup"})
      if (given(f))
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("{} cannot be combined with --grid: set it in the grid file", f));
    std::ifstream in(ba.grid);
    if (!in) throw Error(ErrorCode::kIo, fmt::format("cannot read --grid '{}'", ba.grid));
    nlohmann::ordered_json j;
    try {
      in >> j;
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--grid '{}' is not JSON: {}", ba.grid, e.what()));
    }
    groups = ev::parse_grid(j, ba.grid);
    for (auto& g : groups) {  // --limit / --repeats on the command line override the file (smoke runs)
      if (given("--limit")) g.workload.limit = ba.limit;
      if (given("--repeats")) g.repeats = ba.repeats;
    }
  } else {
    ev::BenchGroup g;
    g.name = "cli";
    g.workload.task = ba.task;
    ev::task_info(ba.task);
    g.workload.data = ba.data;
    g.workload.limit = ba.limit;
    g.workload.timing_only = ba.timing_only;
    g.methods = ev::split_list(ba.methods);
    if (g.methods.empty()) throw Error(ErrorCode::kInvalidArgument, "--methods: no methods given");
    for (const std::string& s : ba.sweeps) g.sweeps.push_back(ev::parse_sweep(s));
    g.batches = ev::parse_positive_list(ba.batches, "--batches");
    if (ba.repeats < 1) throw Error(ErrorCode::kInvalidArgument, "--repeats must be >= 1");
    if (ba.warmup < 0) throw Error(ErrorCode::kInvalidArgument, "--warmup must be >= 0");
    g.repeats = ba.repeats;
    g.warmup = ba.warmup;
    groups.push_back(std::move(g));
  }
  return groups;
}

/// What the summary records of this run from outside the library: the command line, the source
/// tree, and the environment's FLASHDLLM_COMMIT (the commit under test, e.g. of a copied tree
/// without .git) and OMP_NUM_THREADS.
eval::BenchProvenance bench_provenance(const BenchArgs& ba) {
  eval::BenchProvenance p;
  p.command = ba.command;
  p.source_dir = std::filesystem::path(FLASHDLLM_DATA_DIR).parent_path();
  p.commit = env_settings().commit;
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) p.omp_num_threads = omp;
  return p;
}

/// --plot: the PNG plots of --out's summary.json (tools/plots/plot_bench.py).
void plot_bench(const BenchArgs& ba, const std::filesystem::path& out) {
  namespace fs = std::filesystem;
  if (out.empty())
    throw Error(ErrorCode::kInvalidArgument, "--plot needs --out (the plots are drawn from summary.json)");
  const fs::path script = fs::path(FLASHDLLM_DATA_DIR).parent_path() / "tools" / "plots" / "plot_bench.py";
  const std::string cmd = fmt::format("{} {} {} --out {}", shell_quote(ba.python), shell_quote(script.string()),
                                      shell_quote((out / "summary.json").string()), shell_quote(out.string()));
  const int rc = std::system(cmd.c_str());
  if (rc != 0) throw Error(ErrorCode::kIo, fmt::format("the plot step failed ({}): {}", rc, cmd));
}

}  // namespace

int run_bench(const CommonArgs& ca, BenchArgs& ba) {
  namespace ev = flashdllm::eval;
  namespace fs = std::filesystem;
  auto given = [&](const char* flag) { return ba.app->get_option(flag)->count() > 0; };
  if (ba.chat && ba.raw) throw Error(ErrorCode::kInvalidArgument, "--chat and --raw exclude each other");
  for (const char* f : {"--cache", "--verify", "--slots", "--preset"})
    if (given(f))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("bench: {} is set per point: use --methods (none, prefix, dual, flash, flash+verify) and "
                              "--batches (flash: slots); sweep the rest with --sweep",
                              f));
  if (ba.fresh_engine != "auto" && ba.fresh_engine != "yes" && ba.fresh_engine != "no")
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--fresh-engine must be auto, yes or no, got '{}'", ba.fresh_engine));

  const flashdllm::GenerateOptions base = ba.dec.options(/*one_mode=*/false);
  const std::vector<ev::BenchGroup> groups = bench_groups(ba);
  const std::vector<ev::BenchPoint> points = ev::expand_grid(groups, base);
  std::vector<std::pair<std::string, std::string>> table_setting;
  for (const std::string& kv : ev::split_list(ba.table_setting)) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--table-setting: '{}' is not KEY=VALUE", kv));
    table_setting.emplace_back(flashdllm::canonical_option_key(kv.substr(0, eq)), kv.substr(eq + 1));
  }
  if (std::find(ev::bench_method_names().begin(), ev::bench_method_names().end(), ba.baseline_method) ==
      ev::bench_method_names().end())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--baseline-method: unknown method '{}'", ba.baseline_method));

  if (ba.dry_run) {
    for (const auto& p : points)
      std::cout << fmt::format("{}  {}  {} {}  batch {}  x{}  {}\n", p.id, p.group, p.workload.task,
                               p.workload.timing_only ? "timing-only" : "accuracy", p.batch, p.repeats, p.label());
    std::cout << fmt::format("{} points\n", points.size());
    return 0;
  }

  std::unique_ptr<ev::PythonSandbox> sandbox;
  for (const auto& p : points)
    if (!sandbox && !p.workload.timing_only && ev::task_info(p.workload.task).code) {
      ev::SandboxOptions so;
      so.python = ba.python;
      so.timeout_s = ba.code_timeout;
      so.jobs = ba.code_jobs;
      sandbox = std::make_unique<ev::PythonSandbox>(so);
    }
  const fs::path out = ba.out_dir;
  std::ofstream partial;
  if (!out.empty()) {
    fs::create_directories(out);
    partial.open(out / "results.jsonl", std::ios::binary | std::ios::trunc);
    if (!partial) throw Error(ErrorCode::kIo, fmt::format("cannot write '{}'", (out / "results.jsonl").string()));
  }

  ev::BenchRunOptions ro;
  ro.data_dir = FLASHDLLM_DATA_DIR;
  ro.model_dir = ca.model_dir;
  if (ba.chat || ba.raw) ro.chat = ba.chat;
  ro.fresh_engine = ba.fresh_engine == "yes" || (ba.fresh_engine == "auto" && ca.device != "cpu");
  ro.sandbox = sandbox.get();
  std::optional<ev::ProgressBar> bar;
  ro.progress = [&](int64_t done, int64_t total, const ev::BenchPoint& p, size_t i) {
    if (!bar) bar.emplace("bench", total, "requests");
    bar->update(done, fmt::format("{} {}/{} {} b{}", p.id, i + 1, points.size(), p.label(), p.batch));
  };
  ro.on_point = [&](const ev::PointResult& r) {
    if (partial.is_open()) partial << ev::point_to_json(r).dump() << "\n" << std::flush;
  };
  std::string backend;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<ev::PointResult> results = ev::run_bench([&] { return load_engine(ca); }, points, ro, &backend);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bar) bar->finish();
  partial.close();
  ev::finalize_results(results, ba.baseline_method, table_setting);
  nlohmann::ordered_json meta = ev::bench_meta(bench_provenance(ba), backend, ca.model_dir);
  meta["hardware"]["load_average_end"] = ev::host_info()["load_average"];
  meta["wall_seconds"] = wall;
  meta["cpu_seconds"] = ev::process_cpu_seconds();
  meta["device"] = ca.device;
  meta["threads"] = ca.threads;
  meta["baseline_method"] = ba.baseline_method;
  meta["table_setting"] = ba.table_setting;
  if (!ba.grid.empty()) {
    std::ifstream in(ba.grid);
    meta["grid"] = nlohmann::ordered_json::parse(in);
  }
  const std::string md = ev::bench_markdown(meta, results);
  if (!out.empty()) ev::write_bench_outputs(out, meta, results);
  std::cout << md;
  std::cout.flush();
  if (ba.plot) plot_bench(ba, out);
  return 0;
}

void add_bench_subcommand(CLI::App& app, CommonArgs& ca, BenchArgs& ba, CLI::App*& bch) {
  bch = app.add_subcommand("bench",
                           "sweep decoding settings and batch sizes: accuracy, tokens/s, NFE, tokens/iteration, "
                           "memory; medians over repeats (docs/bench.md)");
  ba.app = bch;
  add_common(bch, ca);
  bch->add_option("--grid", ba.grid,
                  "grid file (JSON: defaults + groups, see docs/bench.md) instead of the flags below");
  bch->add_option("--task", ba.task, "task of the workload (as for eval)")->capture_default_str();
  bch->add_option("--data", ba.data, "test-split file (default: the task's file under data/)");
  bch->add_option("--limit", ba.limit,
                  "accuracy: the first N documents (0 = all); timing-only: prompts per repeat (0 = the batch size)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  bch->add_flag("--timing-only", ba.timing_only, "fixed prompts (the task's first ones), no scoring");
  bch->add_option("--methods", ba.methods, "comma-separated: none, prefix, dual, flash, flash+verify")
      ->capture_default_str();
  bch->add_option("--sweep", ba.sweeps,
                  "KEY=V1,V2,... (repeatable; keys: threshold (or off), gamma, track_num, mask_num, block_length, "
                  "gen_length, steps, verify_rule, max_candidates, verify_kept, tokens_per_step, temperature, seed)");
  bch->add_option("--batches", ba.batches,
                  "comma-separated batch sizes (none/prefix/dual: requests per call; flash: slots)")
      ->capture_default_str();
  bch->add_option("--repeats", ba.repeats, "measured runs per point (medians and min/max over them)")
      ->capture_default_str();
  bch->add_option("--warmup", ba.warmup, "unmeasured one-request generate calls before each point")
      ->capture_default_str();
  bch->add_option("--out", ba.out_dir, "write results.jsonl, summary.json, summary.md and summary.csv here");
  bch->add_flag("--plot", ba.plot, "draw the PNG plots into --out (tools/plots/plot_bench.py, needs matplotlib)");
  bch->add_option("--baseline-method", ba.baseline_method, "method whose points give the speed-ups")
      ->capture_default_str();
  bch->add_option("--table-setting", ba.table_setting, "the setting shown per method in the Table 1-style table")
      ->capture_default_str();
  bch->add_option("--fresh-engine", ba.fresh_engine,
                  "reload the model before every point (isolated device peak memory): auto (= on for GPUs) | yes | no")
      ->capture_default_str();
  bch->add_flag("--chat", ba.chat, "apply the chat template (default as eval)");
  bch->add_flag("--raw", ba.raw, "do not apply the chat template");
  bch->add_flag("--dry-run", ba.dry_run, "list the points and exit (no model is loaded)");
  bch->add_option("--python", ba.python, "interpreter for the code tasks' sandbox and for --plot")
      ->capture_default_str();
  bch->add_option("--code-timeout", ba.code_timeout, "humaneval/mbpp: seconds per program")->capture_default_str();
  bch->add_option("--code-jobs", ba.code_jobs, "humaneval/mbpp: programs run in parallel (0 = all cores)")
      ->capture_default_str();
  add_decode_options(bch, ba.dec);
}

}  // namespace flashdllm::cli
