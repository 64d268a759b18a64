#include "eval/bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/check.h"
#include "core/text.h"
#include "eval/runner.h"
#include "eval/sandbox.h"
#include "eval/scoring.h"
#include "eval/tasks.h"

namespace flashdllm::eval {
namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? std::string(sep) : "") + items[i];
  return s;
}


bool is_flash(std::string_view method) { return method == "flash" || method == "flash+verify"; }

bool same_value(const std::string& a, const std::string& b) {
  const auto x = parse_double(a), y = parse_double(b);
  if (x && y) return std::abs(*x - *y) <= 1e-12 * std::max(1.0, std::abs(*x));
  return a == b;
}

/// The checks of a point's setting that need no model (so that a long grid fails before it starts).
void check_setting(const GenerateOptions& o, const std::string& where) {
  try {
    validate_without_model(o);
  } catch (const Error& e) {
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: {}", where, e.what());
  }
}

struct MetricField {
  const char* name;
  double RepeatMeasure::*member;
};
constexpr MetricField kMetrics[] = {
    {"tokens_per_second", &RepeatMeasure::tokens_per_second},
    {"tokens_per_second_released", &RepeatMeasure::tokens_per_second_released},
    {"tokens_per_iteration", &RepeatMeasure::tokens_per_iteration},
    {"mean_nfe", &RepeatMeasure::mean_nfe},
    {"forward_passes", &RepeatMeasure::forward_passes},
    {"verify_candidates", &RepeatMeasure::verify_candidates},
    {"verify_accepted", &RepeatMeasure::verify_accepted},
    {"generated_tokens", &RepeatMeasure::generated_tokens},
    {"seconds", &RepeatMeasure::seconds},
    {"accuracy", &RepeatMeasure::accuracy},
    {"peak_memory_bytes", &RepeatMeasure::peak_memory_bytes},
};

std::string workload_key(const PointResult& r) {
  const BenchWorkload& w = r.point.workload;
  return fmt::format("{}|{}|{}|{}|{}|{}", w.task, w.data.string(), w.limit, w.timing_only, r.point.batch,
                     r.point.options.sampling.gen_length);
}

// ---- peak memory on the host ---------------------------------------------------------------------

/// Resets the kernel's peak-RSS mark of this process (Linux >= 4.0); false when not allowed.
bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

/// VmHWM of this process in bytes, -1 if unreadable.
int64_t vm_hwm_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) {
      const auto kb = parse_int(trim(std::string_view(line).substr(6, line.size() - 6 - 3)));
      if (kb) return *kb * 1024;
    }
  return -1;
}

}  // namespace

// ---- methods and option keys ---------------------------------------------------------------------

const std::vector<std::string>& bench_method_names() {
  static const std::vector<std::string> names = {"none", "prefix", "dual", "flash", "flash+verify"};
  return names;
}

void apply_bench_method(GenerateOptions& o, std::string_view method) {
  DecodeSettings& d = o.decode;
  if (method == "none" || method == "prefix" || method == "dual") {
    d.cache = parse_cache_mode(method);
    d.verify = false;
  } else if (method == "flash" || method == "flash+verify") {
    d.cache = CacheMode::kFlash;
    d.verify = method == "flash+verify";
  } else {
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "unknown method '{}' (methods: {})", method, join(bench_method_names(), ", "));
  }
  const DecodeSettings defaults;
  if (!d.verify) {  // verify-only settings
    d.max_candidates = d.forced_acceptance = 0;
    d.verify_kept = VerifyKept::kReleased;
  }
  if (d.cache != CacheMode::kFlash) {  // flash-only settings
    d.track_num = defaults.track_num;
    d.mask_num = defaults.mask_num;
    d.tokens_per_step = 0;
    d.forced_schedule.clear();
    d.importance_probability_mass = false;
  } else {  // settings of the block samplers
    o.sampling.steps = 0;
    d.remasking = Remasking::kLowConfidence;
    d.confidence_f32 = false;
  }
  if (d.cache != CacheMode::kNone) {
    d.cfg_scale = 0.0;
    d.logits_eos_inf = d.confidence_eos_eot_inf = false;
    d.eos_pad_tile = 0;
  }
}

bool option_applies(std::string_view key, std::string_view method, std::string_view value) {
  const std::string k = canonical_option_key(key);
  if (k == "gamma" || k == "verify_rule" || k == "max_candidates" || k == "verify_kept")
    return method == "flash+verify";
  if (k == "track_num" || k == "mask_num" || k == "tokens_per_step") return is_flash(method);
  if (k == "steps") return !is_flash(method);
  if (k == "threshold" && trim(value) == "off") return !is_flash(method);
  return true;
}

std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= list.size()) {
    size_t e = list.find(',', b);
    if (e == std::string_view::npos) e = list.size();
    std::string item = trim(list.substr(b, e - b));
    if (!item.empty()) out.push_back(std::move(item));
    b = e + 1;
  }
  return out;
}

SweepAxis parse_sweep(std::string_view spec) {
  const size_t eq = spec.find('=');
  FDLLM_CHECK_ARG(eq != std::string_view::npos, "--sweep '{}': expected KEY=V1,V2,...", spec);
  SweepAxis a;
  a.key = canonical_option_key(spec.substr(0, eq));
  a.values = split_list(spec.substr(eq + 1));
  FDLLM_CHECK_ARG(!a.values.empty(), "--sweep '{}': no values", spec);
  for (size_t i = 0; i < a.values.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      FDLLM_CHECK_ARG(!same_value(a.values[i], a.values[j]), "--sweep '{}': value '{}' repeated", spec, a.values[i]);
    GenerateOptions probe;
    set_option(probe, a.key, a.values[i]);
  }
  return a;
}

std::vector<int64_t> parse_positive_list(std::string_view list, std::string_view what) {
  std::vector<int64_t> out;
  for (const std::string& s : split_list(list)) {
    const auto v = parse_int(s);
    FDLLM_CHECK_ARG(v && *v >= 1, "{}: '{}' is not a positive integer", what, s);
    out.push_back(*v);
  }
  FDLLM_CHECK_ARG(!out.empty(), "{}: no values in '{}'", what, list);
  return out;
}

// ---- grid ----------------------------------------------------------------------------------------

std::string BenchPoint::label() const {
  std::string s = method;
  for (const auto& [k, v] : swept) s += fmt::format(" {}={}", k, v);
  return s;
}

namespace {

std::string json_scalar_text(const nlohmann::ordered_json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  FDLLM_CHECK_ARG(v.is_number() || v.is_boolean(), "{}: expected a number or a string, got {}", where, v.dump());
  return v.dump();
}

void apply_group_fields(BenchGroup& g, const nlohmann::ordered_json& j, const std::string& where) {
  FDLLM_CHECK_ARG(j.is_object(), "{}: expected an object, got {}", where, j.dump());
  for (const auto& [field, v] : j.items()) {
    const std::string at = where + "." + field;
    auto str = [&]() {
      FDLLM_CHECK_ARG(v.is_string(), "{}: expected a string", at);
      return v.get<std::string>();
    };
    auto integer = [&](int64_t lo) {
      FDLLM_CHECK_ARG(v.is_number_integer() && v.get<int64_t>() >= lo, "{}: expected an integer >= {}, got {}", at, lo,
                      v.dump());
      return v.get<int64_t>();
    };
    auto list = [&]() {
      FDLLM_CHECK_ARG(v.is_array() && !v.empty(), "{}: expected a non-empty array", at);
      std::vector<std::string> out;
      for (size_t i = 0; i < v.size(); ++i) out.push_back(json_scalar_text(v[i], fmt::format("{}[{}]", at, i)));
      return out;
    };
    if (field == "name") {
      g.name = str();
    } else if (field == "task") {
      g.workload.task = str();
      task_info(g.workload.task);
    } else if (field == "data") {
      g.workload.data = str();
    } else if (field == "limit") {
      g.workload.limit = integer(0);
    } else if (field == "timing_only") {
      FDLLM_CHECK_ARG(v.is_boolean(), "{}: expected true or false", at);
      g.workload.timing_only = v.get<bool>();
    } else if (field == "methods") {
      g.methods = list();
      for (const std::string& m : g.methods) {
        GenerateOptions probe;
        apply_bench_method(probe, m);
      }
    } else if (field == "batches") {
      g.batches.clear();
      FDLLM_CHECK_ARG(v.is_array() && !v.empty(), "{}: expected a non-empty array of batch sizes", at);
      for (const auto& b : v) {
        FDLLM_CHECK_ARG(b.is_number_integer() && b.get<int64_t>() >= 1, "{}: '{}' is not a positive integer", at,
                        b.dump());
        g.batches.push_back(b.get<int64_t>());
      }
    } else if (field == "repeats") {
      g.repeats = integer(1);
    } else if (field == "warmup") {
      g.warmup = integer(0);
    } else if (field == "sweep") {
      FDLLM_CHECK_ARG(v.is_object(), "{}: expected an object {{\"key\": [values]}}", at);
      g.sweeps.clear();
      for (const auto& [key, vals] : v.items()) {
        FDLLM_CHECK_ARG(vals.is_array() && !vals.empty(), "{}.{}: expected a non-empty array of values", at, key);
        std::vector<std::string> items;
        for (size_t i = 0; i < vals.size(); ++i) items.push_back(json_scalar_text(vals[i], fmt::format("{}.{}[{}]", at, key, i)));
        try {
          g.sweeps.push_back(parse_sweep(key + "=" + join(items, ",")));
        } catch (const Error& e) {
          FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: {}", at, e.what());
        }
      }
    } else if (field == "options") {
      FDLLM_CHECK_ARG(v.is_object(), "{}: expected an object {{\"key\": value}}", at);
      for (const auto& [key, val] : v.items()) {
        const std::string text = json_scalar_text(val, at + "." + key);
        std::string k;
        try {
          k = canonical_option_key(key);
          GenerateOptions probe;
          set_option(probe, k, text);
        } catch (const Error& e) {
          FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: {}", at, e.what());
        }
        auto it = std::find_if(g.options.begin(), g.options.end(), [&](const auto& p) { return p.first == k; });
        if (it != g.options.end())
          it->second = text;
        else
          g.options.emplace_back(k, text);
      }
    } else {
      FDLLM_FAIL(ErrorCode::kInvalidArgument,
                 "{}: unknown field (fields: name, task, data, limit, timing_only, methods, sweep, batches, options, "
                 "repeats, warmup)",
                 at);
    }
  }
}

/// Advances the odometer `idx` over the axes' values (last axis fastest); false after the last.
bool next_combination(std::vector<size_t>& idx, const std::vector<SweepAxis>& axes) {
  for (size_t a = axes.size(); a-- > 0;) {
    if (++idx[a] < axes[a].values.size()) return true;
    idx[a] = 0;
  }
  return false;
}

}  // namespace

std::vector<BenchGroup> parse_grid(const nlohmann::ordered_json& grid, const std::string& what, const BenchGroup& base) {
  FDLLM_CHECK_ARG(grid.is_object(), "grid '{}': expected an object with \"groups\"", what);
  for (const auto& [k, v] : grid.items())
    FDLLM_CHECK_ARG(k == "defaults" || k == "groups" || k == "comment", "grid '{}': unknown top-level field '{}' "
                    "(fields: defaults, groups, comment)", what, k);
  BenchGroup defaults = base;
  if (grid.contains("defaults")) apply_group_fields(defaults, grid["defaults"], fmt::format("grid '{}': defaults", what));
  FDLLM_CHECK_ARG(grid.contains("groups") && grid["groups"].is_array() && !grid["groups"].empty(),
                  "grid '{}': \"groups\" must be a non-empty array", what);
  std::vector<BenchGroup> out;
  for (size_t i = 0; i < grid["groups"].size(); ++i) {
    BenchGroup g = defaults;
    g.name.clear();
    apply_group_fields(g, grid["groups"][i], fmt::format("grid '{}': groups[{}]", what, i));
    if (g.name.empty()) g.name = fmt::format("g{}", i + 1);
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<BenchPoint> expand_grid(const std::vector<BenchGroup>& groups, const GenerateOptions& base) {
  std::vector<BenchPoint> points;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const BenchGroup& g = groups[gi];
    const std::string gname = g.name.empty() ? fmt::format("g{}", gi + 1) : g.name;
    FDLLM_CHECK_ARG(!g.methods.empty() && !g.batches.empty(), "group '{}': no methods or no batch sizes", gname);
    FDLLM_CHECK_ARG(g.repeats >= 1 && g.warmup >= 0, "group '{}': repeats must be >= 1 and warmup >= 0", gname);
    task_info(g.workload.task);
    for (const std::string& method : g.methods) {
      // The axes that apply to this method, with the values that apply.
      std::vector<SweepAxis> axes;
      for (const SweepAxis& a : g.sweeps) {
        SweepAxis kept{a.key, {}};
        for (const std::string& v : a.values)
          if (option_applies(a.key, method, v)) kept.values.push_back(v);
        if (!kept.values.empty()) axes.push_back(std::move(kept));
      }
      for (int64_t batch : g.batches) {
        std::vector<size_t> idx(axes.size(), 0);
        do {
          BenchPoint p;
          p.group = gname;
          p.method = method;
          p.workload = g.workload;
          p.batch = batch;
          p.repeats = g.repeats;
          p.warmup = g.warmup;
          p.options = base;
          apply_bench_method(p.options, method);
          for (const auto& [k, v] : g.options)
            if (option_applies(k, method, v)) set_option(p.options, k, v);
          for (size_t a = 0; a < axes.size(); ++a) {
            p.swept.emplace_back(axes[a].key, axes[a].values[idx[a]]);
            set_option(p.options, axes[a].key, axes[a].values[idx[a]]);
          }
          if (p.options.decode.cache == CacheMode::kFlash) p.options.decode.n_slots = batch;
          check_setting(p.options, fmt::format("group '{}', {}", gname, p.label()));
          const bool dup = std::any_of(points.begin(), points.end(), [&](const BenchPoint& q) {
            return q.group == p.group && q.method == p.method && q.batch == p.batch && q.swept == p.swept;
          });
          if (!dup) points.push_back(std::move(p));
        } while (next_combination(idx, axes));
      }
    }
  }
  FDLLM_CHECK_ARG(!points.empty(), "the grid has no points");
  for (size_t i = 0; i < points.size(); ++i) points[i].id = fmt::format("p{:0{}}", i + 1, points.size() >= 100 ? 3 : 2);
  return points;
}

// ---- measurements --------------------------------------------------------------------------------

Spread spread_of(std::vector<double> v) {
  FDLLM_CHECK_ARG(!v.empty(), "spread of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  Spread s;
  s.min = v.front();
  s.max = v.back();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

void summarize_repeats(PointResult& r) {
  r.stats.clear();
  if (r.repeats.empty()) return;
  for (const MetricField& m : kMetrics) {
    std::vector<double> vals;
    for (const RepeatMeasure& rep : r.repeats) vals.push_back(rep.*m.member);
    if (std::string_view(m.name) == "accuracy" && r.point.workload.timing_only) continue;
    if (std::string_view(m.name) == "peak_memory_bytes" &&
        std::any_of(vals.begin(), vals.end(), [](double x) { return x < 0; }))
      continue;
    r.stats[m.name] = spread_of(std::move(vals));
  }
}

void finalize_results(std::vector<PointResult>& results, std::string_view baseline_method,
                      const std::vector<std::pair<std::string, std::string>>& table_setting) {
  auto threshold_of = [](const PointResult& r) { return option_text(r.point.options, "threshold"); };
  for (PointResult& r : results) {
    r.baseline.clear();
    r.speedup.reset();
    r.speedup_released.reset();
    r.table1 = false;
    const PointResult* same = nullptr;
    const PointResult* off = nullptr;
    const PointResult* first = nullptr;
    for (const PointResult& b : results) {
      if (b.point.method != baseline_method || workload_key(b) != workload_key(r)) continue;
      if (!first) first = &b;
      if (!same && same_value(threshold_of(b), threshold_of(r))) same = &b;
      if (!off && !effective_threshold(b.point.options.decode, b.point.options.sampling)) off = &b;
    }
    const PointResult* base = same ? same : off ? off : first;
    if (!base) continue;
    r.baseline = base->point.id;
    auto med = [](const PointResult& p, const char* k) {
      auto it = p.stats.find(k);
      return it == p.stats.end() ? 0.0 : it->second.median;
    };
    if (med(*base, "tokens_per_second") > 0)
      r.speedup = med(r, "tokens_per_second") / med(*base, "tokens_per_second");
    if (med(*base, "tokens_per_second_released") > 0)
      r.speedup_released = med(r, "tokens_per_second_released") / med(*base, "tokens_per_second_released");
  }
  std::set<std::string> chosen;
  auto row_key = [&](const PointResult& r) { return workload_key(r) + "|" + r.point.method; };
  for (PointResult& r : results) {  // first pass: points matching the setting
    if (chosen.count(row_key(r))) continue;
    bool match = true;
    for (const auto& [k, v] : table_setting)
      if (option_applies(k, r.point.method, v) && !same_value(option_text(r.point.options, canonical_option_key(k)), v))
        match = false;
    if (match) {
      r.table1 = true;
      chosen.insert(row_key(r));
    }
  }
  for (PointResult& r : results)  // second pass: methods without a matching point take their first
    if (!chosen.count(row_key(r))) {
      r.table1 = true;
      chosen.insert(row_key(r));
    }
}

// ---- running -------------------------------------------------------------------------------------

namespace {

/// The samples a workload runs on (timing-only: the task's first prompts, cycled to the count).
std::vector<EvalSample> workload_samples(const BenchWorkload& w, int64_t batch, const std::filesystem::path& data_dir) {
  const TaskInfo& info = task_info(w.task);
  const std::filesystem::path data = w.data.empty() ? data_dir / info.default_data : w.data;
  LoadOptions lo;
  if (!w.timing_only) {
    lo.limit = w.limit;
    return load_task(w.task, data, lo);
  }
  const int64_t n = w.limit > 0 ? w.limit : batch;
  lo.limit = n;
  std::vector<EvalSample> base = load_task(w.task, data, lo);
  FDLLM_CHECK_ARG(!base.empty(), "task '{}' ({}) has no documents", w.task, data.string());
  std::vector<EvalSample> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(base[static_cast<size_t>(i) % base.size()]);
  return out;
}

}  // namespace

std::vector<PointResult> run_bench(const EngineFactory& load, const std::vector<BenchPoint>& points,
                                   const BenchRunOptions& options, std::string* backend_name) {
  std::vector<PointResult> results;
  std::map<std::string, std::vector<EvalSample>> sample_cache;
  auto samples_of = [&](const BenchPoint& p) -> const std::vector<EvalSample>& {
    const std::string key = fmt::format("{}|{}|{}|{}|{}", p.workload.task, p.workload.data.string(), p.workload.limit,
                                        p.workload.timing_only, p.workload.timing_only ? p.batch : 0);
    auto it = sample_cache.find(key);
    if (it == sample_cache.end()) it = sample_cache.emplace(key, workload_samples(p.workload, p.batch, options.data_dir)).first;
    return it->second;
  };
  // Totals for the progress display: accuracy workloads need their sizes, so load them first.
  int64_t total = 0;
  for (const BenchPoint& p : points) {
    FDLLM_CHECK_ARG(p.workload.timing_only || !task_info(p.workload.task).code || options.sandbox,
                    "point {} ({}): task '{}' runs generated code: a sandbox is required", p.id, p.label(),
                    p.workload.task);
    total += p.repeats * static_cast<int64_t>(samples_of(p).size());
  }

  if (options.progress && !points.empty()) options.progress(0, total, points.front(), 0);

  std::unique_ptr<Engine> engine;
  int64_t done = 0;
  for (size_t pi = 0; pi < points.size(); ++pi) {
    const BenchPoint& p = points[pi];
    if (!engine || options.fresh_engine) {
      engine.reset();
      engine = load();
      FDLLM_CHECK(engine != nullptr, ErrorCode::kInternal, "the engine factory returned no engine");
    }
    const std::string backend = engine->backend_name();
    if (backend_name) *backend_name = backend;
    const bool on_cpu = backend.rfind("cpu", 0) == 0;
    const std::vector<EvalSample>& samples = samples_of(p);
    const bool chat = options.chat.value_or(p.workload.task == "arith" ? engine->chat_by_default()
                                                                        : chat_by_model_path(options.model_dir));
    const bool flash = p.options.decode.cache == CacheMode::kFlash;
    const size_t per_call = flash ? samples.size() : static_cast<size_t>(p.batch);
    auto request_of = [&](const EvalSample& s) {
      GenerateRequest r;
      r.prompt = s.prompt;
      r.chat = chat;
      return r;
    };
    for (int64_t w = 0; w < p.warmup; ++w) engine->generate({request_of(samples.front())}, p.options);

    PointResult pr;
    pr.point = p;
    for (int64_t rep = 0; rep < p.repeats; ++rep) {
      const bool rss_reset = on_cpu && reset_peak_rss();
      std::vector<SampleResult> res;
      res.reserve(samples.size());
      RepeatMeasure m;
      int64_t call = 0;
      for (size_t b = 0; b < samples.size(); b += per_call, ++call) {
        const size_t e = std::min(samples.size(), b + per_call);
        std::vector<GenerateRequest> reqs;
        for (size_t i = b; i < e; ++i) reqs.push_back(request_of(samples[i]));
        std::vector<bool> finished(reqs.size(), false);
        const int64_t done_before = done;
        ProgressCallback step = [&](const StepProgress& s) {
          if (!s.done || s.request >= finished.size() || finished[s.request]) return;
          finished[s.request] = true;
          ++done;
          if (options.progress) options.progress(done, total, p, pi);
        };
        std::vector<GenerateResult> gen = engine->generate(reqs, p.options, step);
        FDLLM_CHECK(gen.size() == reqs.size(), ErrorCode::kInternal, "engine returned {} results for {} requests",
                    gen.size(), reqs.size());
        for (size_t i = b; i < e; ++i) {
          const GenerateResult& g = gen[i - b];
          FDLLM_CHECK(g.finish_reason != FinishReason::kError, ErrorCode::kInvalidCheckpoint, "sample {}: {}", i,
                      g.error);
          res.push_back(make_sample_result(samples[i], g, call, g.seconds));
          m.forward_passes += static_cast<double>(g.forward_passes);
          m.verify_candidates += static_cast<double>(g.verify_candidates);
          m.verify_accepted += static_cast<double>(g.verify_accepted);
        }
        done = done_before + static_cast<int64_t>(e - b);
        if (options.progress) options.progress(done, total, p, pi);
      }
      if (!p.workload.timing_only) score_samples(p.workload.task, samples, res, options.sandbox);
      const EvalSummary sum = summarize(p.workload.task, res);
      const double n = static_cast<double>(res.size());
      m.seconds = sum.seconds;
      m.tokens_per_second = sum.tokens_per_second;
      m.tokens_per_second_released = sum.tokens_per_second_released;
      m.tokens_per_iteration = sum.tokens_per_iteration;
      m.mean_nfe = sum.mean_nfe;
      m.forward_passes /= n;
      m.verify_candidates /= n;
      m.verify_accepted /= n;
      m.generated_tokens = static_cast<double>(sum.generated_tokens);
      m.n = sum.n;
      if (!p.workload.timing_only) {
        m.correct = sum.correct;
        m.accuracy = sum.accuracy;
      }
      if (on_cpu) {
        m.peak_memory_bytes = static_cast<double>(rss_reset ? vm_hwm_bytes() : peak_rss_bytes());
        pr.peak_memory_kind = rss_reset ? "host peak RSS of the repeat (VmHWM, reset before it)"
                                        : "host peak RSS of the process so far (getrusage; VmHWM reset not allowed)";
      } else {
        m.peak_memory_bytes = static_cast<double>(engine->peak_memory_bytes());
        pr.peak_memory_kind = options.fresh_engine
                                  ? "device memory in use, this point (Engine::peak_memory_bytes, fresh engine)"
                                  : "device memory in use, running max since the engine was loaded "
                                    "(Engine::peak_memory_bytes)";
      }
      pr.repeats.push_back(m);
    }
    summarize_repeats(pr);
    results.push_back(std::move(pr));
    if (options.on_point) options.on_point(results.back());
  }
  return results;
}

// ---- provenance ----------------------------------------------------------------------------------

std::string cpu_model_from_cpuinfo(std::string_view cpuinfo) {
  size_t b = 0;
  while (b < cpuinfo.size()) {
    size_t e = cpuinfo.find('\n', b);
    if (e == std::string_view::npos) e = cpuinfo.size();
    const std::string_view line = cpuinfo.substr(b, e - b);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && trim(line.substr(0, colon)) == "model name") return trim(line.substr(colon + 1));
    b = e + 1;
  }
  return "";
}

std::string detect_commit(const std::filesystem::path& source_dir) {
  if (const char* env = std::getenv("FLASHDLLM_COMMIT"); env && *env) return env;
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
  const std::string dir = "'" + source_dir.string() + "'";
  const auto head = run("git -C " + dir + " rev-parse HEAD 2>/dev/null");
  if (!head || head->empty()) return "unknown";
  const auto dirty = run("git -C " + dir + " status --porcelain --untracked-files=no 2>/dev/null");
  return *head + (dirty && !dirty->empty() ? "-dirty" : "");
}

nlohmann::ordered_json host_info() {
  nlohmann::ordered_json h;
  std::ifstream cpu("/proc/cpuinfo");
  std::stringstream ss;
  ss << cpu.rdbuf();
  h["cpu_model"] = cpu_model_from_cpuinfo(ss.str());
  h["logical_cpus"] = std::thread::hardware_concurrency();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  h["omp_num_threads"] = omp ? nlohmann::ordered_json(omp) : nlohmann::ordered_json();
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

nlohmann::ordered_json bench_meta(const std::string& command, const std::filesystem::path& source_dir,
                                  const std::string& backend, const std::string& model) {
  char date[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  nlohmann::ordered_json m;
  m["tool"] = "flashdllm bench";
  m["command"] = command;
  m["commit"] = detect_commit(source_dir);
  m["date"] = date;
  m["model"] = model;
  nlohmann::ordered_json hw;
  hw["backend"] = backend;
  const nlohmann::ordered_json host = host_info();  // a named object: items() must not outlive it
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
    metrics[m.name] = {{"median", it->second.median}, {"min", it->second.min}, {"max", it->second.max}, {"values", values}};
  }
  j["metrics"] = metrics;
  j["peak_memory_kind"] = r.peak_memory_kind;
  j["baseline"] = r.baseline.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.baseline);
  j["speedup"] = r.speedup ? nlohmann::ordered_json(*r.speedup) : nlohmann::ordered_json();
  j["speedup_released"] = r.speedup_released ? nlohmann::ordered_json(*r.speedup_released) : nlohmann::ordered_json();
  j["table1"] = r.table1;
  return j;
}

std::string bench_markdown(const nlohmann::ordered_json& meta, const std::vector<PointResult>& results,
                           double equal_accuracy_pts) {
  std::string m = "# flashdllm bench\n\n";
  auto field = [&](const char* k) { return meta.contains(k) && meta[k].is_string() ? meta[k].get<std::string>() : std::string("—"); };
  m += fmt::format("* command: `{}`\n* commit: `{}`\n* date: {}\n* model: `{}`\n", field("command"), field("commit"),
                   field("date"), field("model"));
  if (meta.contains("hardware")) {
    const auto& h = meta["hardware"];
    auto hs = [&](const char* k) { return h.contains(k) ? (h[k].is_string() ? h[k].get<std::string>() : h[k].dump()) : std::string("—"); };
    m += fmt::format("* hardware: {}; CPU {} ({} logical CPUs, OMP_NUM_THREADS={}); load average (1/5/15 min) at "
                     "start {}, at the end {}\n",
                     hs("backend"), hs("cpu_model"), hs("logical_cpus"), hs("omp_num_threads"), hs("load_average"),
                     hs("load_average_end"));
  }
  if (meta.contains("wall_seconds") && meta["wall_seconds"].is_number())
    m += fmt::format("* run time: {:.0f} s wall, {:.0f} s CPU (the whole process)\n", meta["wall_seconds"].get<double>(),
                     meta.value("cpu_seconds", -1.0));
  if (!results.empty() && !results.front().peak_memory_kind.empty())
    m += fmt::format("* peak memory: {}\n", results.front().peak_memory_kind);
  m += "* speeds: median over the repeats [min–max]; tokens/s = generated tokens incl. the ending EOS per second of "
       "generate calls (ours), released = all committed positions per second (Flash-dLLM's definition); speed-up = "
       "median tokens/s over the no-cache baseline point's (ours, released in parentheses)\n\n";

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
                           median_of(r, "forward_passes"), fmt_drafts(r), fmt_mem(median_of(r, "peak_memory_bytes", -1)));
    m += "\n";

    // Flash-Verify vs confidence-only Flash-Cache at equal accuracy.
    std::string rows;
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
      m += fmt::format("### Flash-Verify vs confidence-only Flash-Cache at equal accuracy (±{} pt)\n\n", equal_accuracy_pts);
      m += "For each Flash-Verify point, the confidence-only `flash` point of the same workload with the most tokens "
           "per iteration among those whose accuracy is within the tolerance.\n\n";
      m += "| Flash-Verify point | accuracy % | tokens/iter | best `flash` point | accuracy % | tokens/iter | Δ tokens/iter |\n";
      m += "|---|---:|---:|---|---:|---:|---:|\n" + rows;
      m += fmt::format("\nFlash-Verify has more tokens per iteration in {} of {} comparable points.\n\n", wins, compared);
    }
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
  std::vector<std::string> head = {"id",        "group",     "task",         "timing_only", "limit",    "method",
                                   "label",     "batch",     "repeats",      "threshold",   "gamma",    "track_num",
                                   "mask_num",  "block_length", "gen_length", "n",          "correct"};
  for (const MetricField& m : kMetrics)
    for (const char* s : {"median", "min", "max"}) head.push_back(fmt::format("{}_{}", m.name, s));
  for (const char* h : {"peak_memory_kind", "baseline", "speedup", "speedup_released", "table1"}) head.push_back(h);
  std::string out = join(head, ",") + "\n";
  for (const PointResult& r : results) {
    const BenchPoint& p = r.point;
    const GenerateOptions& o = p.options;
    const bool flash = o.decode.cache == CacheMode::kFlash;
    std::vector<std::string> row = {p.id,
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
