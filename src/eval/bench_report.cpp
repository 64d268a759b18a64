// `flashdllm bench`, the outputs: provenance (commit, host), point JSON, summary.md / .csv and the
// files of a run (bench.h).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/check.h"
#include "core/text.h"
#include "eval/bench.h"
#include "eval/bench_internal.h"
#include "eval/tasks.h"

namespace flashdllm::eval {

using bench_detail::join;
using bench_detail::kMetrics;
using bench_detail::MetricField;
using bench_detail::workload_key;

// ---- provenance ----------------------------------------------------------------------------------

std::string cpu_model_from_cpuinfo(std::string_view cpuinfo) {
  size_t b = 0;
  while (b < cpuinfo.size()) {
    size_t e = cpuinfo.find('\n', b);
    if (e == std::string_view::npos) e = cpuinfo.size();
    const std::string_view line = cpuinfo.substr(b, e - b);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && trim(line.substr(0, colon)) == "model name")
      return trim(line.substr(colon + 1));
    b = e + 1;
  }
  return "";
}

std::string detect_commit(const std::filesystem::path& source_dir, const std::string& commit) {
  if (!commit.empty()) return commit;
  auto run = [](const std::string& cmd) -> std::optional<std::string> {
    std::FILE* p = popen(cmd.c_str(), "r");
    if (!p) return std::nullopt;
    std::string out;
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    if (pclose(p) != 0) return std::nullopt;
    return trim(out);
  };
  std::string dir = "'";  // built by appends: GCC 12's -Wrestrict misfires on "'" + std::string
  dir += source_dir.string();
  dir += "'";
  const auto head = run("git -C " + dir + " rev-parse HEAD 2>/dev/null");
  if (!head || head->empty()) return "unknown";
  const auto dirty = run("git -C " + dir + " status --porcelain --untracked-files=no 2>/dev/null");
  return *head + (dirty && !dirty->empty() ? "-dirty" : "");
}

nlohmann::ordered_json host_info(const std::optional<std::string>& omp_num_threads) {
  nlohmann::ordered_json h;
  std::ifstream cpu("/proc/cpuinfo");
  std::stringstream ss;
  ss << cpu.rdbuf();
  h["cpu_model"] = cpu_model_from_cpuinfo(ss.str());
  h["logical_cpus"] = std::thread::hardware_concurrency();
  h["omp_num_threads"] = omp_num_threads ? nlohmann::ordered_json(*omp_num_threads) : nlohmann::ordered_json();
  std::ifstream la("/proc/loadavg");
  double l1 = -1, l5 = -1, l15 = -1;
  if (la >> l1 >> l5 >> l15)
    h["load_average"] = {l1, l5, l15};
  else
    h["load_average"] = nullptr;
  char host[256] = {};
  h["hostname"] = gethostname(host, sizeof host - 1) == 0 ? std::string(host) : std::string();
  return h;
}

double process_cpu_seconds() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1.0;
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

nlohmann::ordered_json bench_meta(const BenchProvenance& provenance, const std::string& backend,
                                  const std::string& model) {
  char date[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  nlohmann::ordered_json m;
  m["tool"] = "flashdllm bench";
  m["command"] = provenance.command;
  m["commit"] = detect_commit(provenance.source_dir, provenance.commit);
  m["date"] = date;
  m["model"] = model;
  nlohmann::ordered_json hw;
  hw["backend"] = backend;
  const nlohmann::ordered_json host =
      host_info(provenance.omp_num_threads);  // a named object: items() must not outlive it
  for (const auto& [k, v] : host.items()) hw[k] = v;
  m["hardware"] = hw;
  return m;
}

// ---- outputs -------------------------------------------------------------------------------------

namespace {

nlohmann::ordered_json options_json(const GenerateOptions& o) { return to_json(o); }

double median_of(const PointResult& r, const char* k, double fallback = 0.0) {
  auto it = r.stats.find(k);
  return it == r.stats.end() ? fallback : it->second.median;
}

std::string fmt_mem(double bytes) {
  if (bytes < 0) return "—";
  if (bytes >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
  return fmt::format("{:.0f} MiB", bytes / (1024.0 * 1024));
}

std::string fmt_spread(const PointResult& r, const char* k, int digits = 1) {
  auto it = r.stats.find(k);
  if (it == r.stats.end()) return "—";
  const Spread& s = it->second;
  if (r.repeats.size() == 1) return fmt::format("{:.{}f}", s.median, digits);
  return fmt::format("{:.{}f} [{:.{}f}–{:.{}f}]", s.median, digits, s.min, digits, s.max, digits);
}

std::string fmt_accuracy(const PointResult& r, bool ci) {
  if (r.point.workload.timing_only || r.repeats.empty()) return "—";
  const Spread s = r.stats.at("accuracy");
  std::string a = fmt::format("{:.2f}", 100 * s.median);
  if (s.min != s.max) a += fmt::format(" [{:.2f}–{:.2f}]", 100 * s.min, 100 * s.max);
  if (ci) {
    const RepeatMeasure& m = r.repeats.front();
    const auto [lo, hi] = wilson_interval(m.correct, m.n);
    a += fmt::format(" ({:.1f}–{:.1f})", 100 * lo, 100 * hi);
  }
  return a;
}

std::string fmt_drafts(const PointResult& r) {
  if (!r.point.options.decode.verify) return "—";
  const double c = median_of(r, "verify_candidates"), a = median_of(r, "verify_accepted");
  return fmt::format("{:.1f} / {:.1f} ({:.0f}%)", a, c, c > 0 ? 100 * a / c : 0.0);
}

std::string fmt_speedup(const PointResult& r) {
  if (!r.speedup) return "—";
  return fmt::format("{:.2f}x ({:.2f}x)", *r.speedup, r.speedup_released.value_or(0.0));
}

std::string swept_text(const BenchPoint& p) {
  std::vector<std::string> s;
  for (const auto& [k, v] : p.swept) s.push_back(k + "=" + v);
  return s.empty() ? "—" : join(s, " ");
}

std::string setting_text(const BenchPoint& p) {
  const GenerateOptions& o = p.options;
  const DecodeSettings& d = o.decode;
  std::vector<std::string> s = {"threshold " + option_text(o, "threshold")};
  if (d.cache == CacheMode::kFlash) {
    s.push_back(fmt::format("track {} mask {}", d.track_num, d.mask_num));
    if (d.verify)
      s.push_back(fmt::format("gamma {} ({}{})", nlohmann::json(d.gamma).dump(), verify_rule_name(d.verify_rule),
                              d.verify_kept == VerifyKept::kCommits ? ", kept: commits" : ""));
  } else if (!effective_threshold(d, o.sampling)) {
    s.push_back(fmt::format("{} steps", option_text(o, "steps")));
  }
  s.push_back(fmt::format("block {}", d.effective_block_length()));
  return join(s, ", ");
}

std::string workload_text(const PointResult& r) {
  const BenchWorkload& w = r.point.workload;
  const int64_t n = r.repeats.empty() ? 0 : r.repeats.front().n;
  return fmt::format("{} {} ({} {}), gen_length {}, batch {}", w.task, w.timing_only ? "timing-only" : "accuracy", n,
                     w.timing_only ? "fixed prompts" : "documents", r.point.options.sampling.gen_length, r.point.batch);
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string num_cell(double v) { return nlohmann::json(v).dump(); }

}  // namespace

nlohmann::ordered_json point_to_json(const PointResult& r) {
  const BenchPoint& p = r.point;
  nlohmann::ordered_json j;
  j["id"] = p.id;
  j["group"] = p.group;
  j["label"] = p.label();
  j["method"] = p.method;
  j["task"] = p.workload.task;
  j["data"] = p.workload.data.string();
  j["timing_only"] = p.workload.timing_only;
  j["limit"] = p.workload.limit;
  j["batch"] = p.batch;
  j["repeats"] = p.repeats;
  j["warmup"] = p.warmup;
  nlohmann::ordered_json swept = nlohmann::ordered_json::object();
  for (const auto& [k, v] : p.swept) {
    const auto d = parse_double(v);
    swept[k] = d ? nlohmann::ordered_json(*d) : nlohmann::ordered_json(v);
  }
  j["swept"] = swept;
  j["options"] = options_json(p.options);
  j["n"] = r.repeats.empty() ? 0 : r.repeats.front().n;
  if (!p.workload.timing_only && !r.repeats.empty()) {
    j["correct"] = r.repeats.front().correct;
    j["accuracy"] = median_of(r, "accuracy");
    const auto [lo, hi] = wilson_interval(r.repeats.front().correct, r.repeats.front().n);
    j["accuracy_ci95"] = {lo, hi};
  } else {
    j["correct"] = nullptr;
    j["accuracy"] = nullptr;
    j["accuracy_ci95"] = nullptr;
  }
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  for (const MetricField& m : kMetrics) {
    auto it = r.stats.find(m.name);
    if (it == r.stats.end()) continue;
    nlohmann::ordered_json values = nlohmann::ordered_json::array();
    for (const RepeatMeasure& rep : r.repeats) values.push_back(rep.*m.member);
    metrics[m.name] = {
        {"median", it->second.median}, {"min", it->second.min}, {"max", it->second.max}, {"values", values}};
  }
  j["metrics"] = metrics;
  j["peak_memory_kind"] = r.peak_memory_kind;
  j["baseline"] = r.baseline.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.baseline);
  j["speedup"] = r.speedup ? nlohmann::ordered_json(*r.speedup) : nlohmann::ordered_json();
  j["speedup_released"] = r.speedup_released ? nlohmann::ordered_json(*r.speedup_released) : nlohmann::ordered_json();
  j["table1"] = r.table1;
  return j;
}

namespace {

/// The report's heading: the command, commit, date, model, hardware, run time, the peak memory's
/// kind and what the speed columns mean.
std::string markdown_preamble(const nlohmann::ordered_json& meta, const std::vector<PointResult>& results) {
  std::string m = "# flashdllm bench\n\n";
  auto field = [&](const char* k) {
    return meta.contains(k) && meta[k].is_string() ? meta[k].get<std::string>() : std::string("—");
  };
  m += fmt::format("* command: `{}`\n* commit: `{}`\n* date: {}\n* model: `{}`\n", field("command"), field("commit"),
                   field("date"), field("model"));
  if (meta.contains("hardware")) {
    const auto& h = meta["hardware"];
    auto hs = [&](const char* k) {
      return h.contains(k) ? (h[k].is_string() ? h[k].get<std::string>() : h[k].dump()) : std::string("—");
    };
    m += fmt::format(
        "* hardware: {}; CPU {} ({} logical CPUs, OMP_NUM_THREADS={}); load average (1/5/15 min) at "
        "start {}, at the end {}\n",
        hs("backend"), hs("cpu_model"), hs("logical_cpus"), hs("omp_num_threads"), hs("load_average"),
        hs("load_average_end"));
  }
  if (meta.contains("wall_seconds") && meta["wall_seconds"].is_number())
    m += fmt::format("* run time: {:.0f} s wall, {:.0f} s CPU (the whole process)\n",
                     meta["wall_seconds"].get<double>(), meta.value("cpu_seconds", -1.0));
  if (!results.empty() && !results.front().peak_memory_kind.empty())
    m += fmt::format("* peak memory: {}\n", results.front().peak_memory_kind);
  m += "* speeds: median over the repeats [min–max]; tokens/s = generated tokens incl. the ending EOS per second of "
       "generate calls (ours), released = all committed positions per second (Flash-dLLM's definition); speed-up = "
       "median tokens/s over the no-cache baseline point's (ours, released in parentheses)\n\n";
  return m;
}

/// The section comparing each Flash-Verify point of workload `key` with the confidence-only `flash`
/// point of the most tokens per iteration within `equal_accuracy_pts` of its accuracy ("" without
/// Flash-Verify points).
std::string markdown_verify_vs_flash(const std::vector<PointResult>& results, const std::string& key,
                                     double equal_accuracy_pts) {
  std::string m, rows;
  int wins = 0, compared = 0;
  for (const PointResult& v : results) {
    if (workload_key(v) != key || v.point.method != "flash+verify") continue;
    const double av = 100 * median_of(v, "accuracy");
    const PointResult* best = nullptr;
    for (const PointResult& c : results)
      if (workload_key(c) == key && c.point.method == "flash" &&
          std::abs(100 * median_of(c, "accuracy") - av) <= equal_accuracy_pts + 1e-9 &&
          (!best || median_of(c, "tokens_per_iteration") > median_of(*best, "tokens_per_iteration")))
        best = &c;
    const double tv = median_of(v, "tokens_per_iteration");
    if (best) {
      const double tc = median_of(*best, "tokens_per_iteration");
      ++compared;
      wins += tv > tc;
      rows += fmt::format("| {} {} | {:.2f} | {:.2f} | {} {} | {:.2f} | {:.2f} | {:+.2f} |\n", v.point.id,
                          swept_text(v.point), av, tv, best->point.id, swept_text(best->point),
                          100 * median_of(*best, "accuracy"), tc, tv - tc);
    } else {
      rows += fmt::format("| {} {} | {:.2f} | {:.2f} | none within ±{} pt | — | — | — |\n", v.point.id,
                          swept_text(v.point), av, tv, equal_accuracy_pts);
    }
  }
  if (!rows.empty()) {
    m += fmt::format("### Flash-Verify vs confidence-only Flash-Cache at equal accuracy (±{} pt)\n\n",
                     equal_accuracy_pts);
    m += "For each Flash-Verify point, the confidence-only `flash` point of the same workload with the most tokens "
         "per iteration among those whose accuracy is within the tolerance.\n\n";
    m += "| Flash-Verify point | accuracy % | tokens/iter | best `flash` point | accuracy % | tokens/iter | Δ "
         "tokens/iter |\n";
    m += "|---|---:|---:|---|---:|---:|---:|\n" + rows;
    m += fmt::format("\nFlash-Verify has more tokens per iteration in {} of {} comparable points.\n\n", wins, compared);
  }
  return m;
}

}  // namespace

std::string bench_markdown(const nlohmann::ordered_json& meta, const std::vector<PointResult>& results,
                           double equal_accuracy_pts) {
  std::string m = markdown_preamble(meta, results);

  // Table 1-style rows: per accuracy workload and batch, one row per method.
  std::vector<std::string> keys;
  for (const PointResult& r : results)
    if (!r.point.workload.timing_only && std::find(keys.begin(), keys.end(), workload_key(r)) == keys.end())
      keys.push_back(workload_key(r));
  for (const std::string& key : keys) {
    const PointResult* any = nullptr;
    for (const PointResult& r : results)
      if (workload_key(r) == key) {
        any = &r;
        break;
      }
    m += fmt::format("## Table 1 style: {}\n\n", workload_text(*any));
    m += "| method | setting | n | accuracy % (95% CI) | tokens/s | tokens/s (released) | speed-up (released) | NFE | "
         "tokens/iter | "
         "passes/request | drafts accepted / checked | peak memory |\n";
    m += "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|\n";
    for (const std::string& method : bench_method_names())
      for (const PointResult& r : results)
        if (r.table1 && workload_key(r) == key && r.point.method == method)
          m += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.1f} | {:.2f} | {:.1f} | {} | {} |\n", method,
                           setting_text(r.point), r.repeats.front().n, fmt_accuracy(r, true),
                           fmt_spread(r, "tokens_per_second"), fmt_spread(r, "tokens_per_second_released"),
                           fmt_speedup(r), median_of(r, "mean_nfe"), median_of(r, "tokens_per_iteration"),
                           median_of(r, "forward_passes"), fmt_drafts(r),
                           fmt_mem(median_of(r, "peak_memory_bytes", -1)));
    m += "\n";

    // Flash-Verify vs confidence-only Flash-Cache at equal accuracy.
    m += markdown_verify_vs_flash(results, key, equal_accuracy_pts);
  }

  m += "## All points\n\n";
  m += "| id | group | workload | method | swept | batch | accuracy % | tokens/s | tokens/s (released) | speed-up "
       "(released) | NFE | "
       "tokens/iter | passes/request | drafts accepted / checked | peak memory |\n";
  m += "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n";
  for (const PointResult& r : results)
    m += fmt::format("| {} | {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {:.1f} | {:.2f} | {:.1f} | {} | {} |\n",
                     r.point.id, r.point.group, r.point.workload.task, r.point.workload.timing_only ? " (timing)" : "",
                     r.point.method, swept_text(r.point), r.point.batch, fmt_accuracy(r, false),
                     fmt_spread(r, "tokens_per_second"), fmt_spread(r, "tokens_per_second_released"), fmt_speedup(r),
                     median_of(r, "mean_nfe"), median_of(r, "tokens_per_iteration"), median_of(r, "forward_passes"),
                     fmt_drafts(r), fmt_mem(median_of(r, "peak_memory_bytes", -1)));
  m += "\n";

  bool any_timing = false;
  for (const PointResult& r : results) any_timing |= r.point.workload.timing_only;
  if (any_timing) {
    m += "## Throughput and peak memory vs batch (timing-only points)\n\n";
    m += "| method | setting | batch | requests | tokens/s | tokens/s (released) | seconds | peak memory |\n";
    m += "|---|---|---:|---:|---:|---:|---:|---:|\n";
    for (const std::string& method : bench_method_names())
      for (const PointResult& r : results)
        if (r.point.workload.timing_only && r.point.method == method)
          m += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", method, setting_text(r.point), r.point.batch,
                           r.repeats.front().n, fmt_spread(r, "tokens_per_second"),
                           fmt_spread(r, "tokens_per_second_released"), fmt_spread(r, "seconds", 2),
                           fmt_mem(median_of(r, "peak_memory_bytes", -1)));
    m += "\n";
  }
  return m;
}

std::string bench_csv(const std::vector<PointResult>& results) {
  std::vector<std::string> head = {"id",       "group",        "task",       "timing_only", "limit",  "method",
                                   "label",    "batch",        "repeats",    "threshold",   "gamma",  "track_num",
                                   "mask_num", "block_length", "gen_length", "n",           "correct"};
  for (const MetricField& m : kMetrics)
    for (const char* s : {"median", "min", "max"}) head.push_back(fmt::format("{}_{}", m.name, s));
  for (const char* h : {"peak_memory_kind", "baseline", "speedup", "speedup_released", "table1"}) head.push_back(h);
  std::string out = join(head, ",") + "\n";
  for (const PointResult& r : results) {
    const BenchPoint& p = r.point;
    const GenerateOptions& o = p.options;
    const bool flash = o.decode.cache == CacheMode::kFlash;
    std::vector<std::string> row = {
        p.id,
        csv_cell(p.group),
        p.workload.task,
        p.workload.timing_only ? "true" : "false",
        std::to_string(p.workload.limit),
        p.method,
        csv_cell(p.label()),
        std::to_string(p.batch),
        std::to_string(p.repeats),
        option_text(o, "threshold"),
        o.decode.verify ? option_text(o, "gamma") : "",
        flash ? std::to_string(o.decode.track_num) : "",
        flash ? std::to_string(o.decode.mask_num) : "",
        std::to_string(o.decode.effective_block_length()),
        std::to_string(o.sampling.gen_length),
        std::to_string(r.repeats.empty() ? 0 : r.repeats.front().n),
        p.workload.timing_only || r.repeats.empty() ? "" : std::to_string(r.repeats.front().correct)};
    for (const MetricField& m : kMetrics) {
      auto it = r.stats.find(m.name);
      for (int i = 0; i < 3; ++i)
        row.push_back(it == r.stats.end() ? ""
                      : i == 0            ? num_cell(it->second.median)
                      : i == 1            ? num_cell(it->second.min)
                                          : num_cell(it->second.max));
    }
    row.push_back(csv_cell(r.peak_memory_kind));
    row.push_back(r.baseline);
    row.push_back(r.speedup ? num_cell(*r.speedup) : "");
    row.push_back(r.speedup_released ? num_cell(*r.speedup_released) : "");
    row.push_back(r.table1 ? "true" : "false");
    out += join(row, ",") + "\n";
  }
  return out;
}

void write_bench_outputs(const std::filesystem::path& dir, const nlohmann::ordered_json& meta,
                         const std::vector<PointResult>& results) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FDLLM_CHECK(!ec, ErrorCode::kIo, "cannot create the output directory '{}': {}", dir.string(), ec.message());
  auto write = [&](const char* name, const std::string& text) {
    const std::filesystem::path p = dir / name;
    std::ofstream f(p, std::ios::binary);
    f << text;
    f.close();
    FDLLM_CHECK(static_cast<bool>(f), ErrorCode::kIo, "cannot write '{}'", p.string());
  };
  std::string lines;
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  for (const PointResult& r : results) {
    nlohmann::ordered_json j = point_to_json(r);
    lines += j.dump() + "\n";
    points.push_back(std::move(j));
  }
  nlohmann::ordered_json summary = meta;
  summary["points"] = std::move(points);
  write("results.jsonl", lines);
  write("summary.json", summary.dump(2) + "\n");
  write("summary.md", bench_markdown(meta, results));
  write("summary.csv", bench_csv(results));
}

}  // namespace flashdllm::eval
