// `flashdllm bench`, its grid: methods, option keys, sweeps, points, and the summaries over repeats
// (baselines, speed-ups, the Table 1 rows). The runner is bench_run.cpp, the outputs bench_report.cpp.
#include "eval/bench.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/check.h"
#include "core/text.h"
#include "eval/bench_internal.h"
#include "eval/tasks.h"

namespace flashdllm::eval {
namespace {

using bench_detail::join;
using bench_detail::kMetrics;
using bench_detail::MetricField;
using bench_detail::workload_key;

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

}  // namespace flashdllm::eval
