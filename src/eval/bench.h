// `flashdllm bench`: sweeps of decoding settings and batch sizes over a task (accuracy + speed) or a
// timing-only workload, repeated, summarised as medians with min/max spread (docs/bench.md).
//
// Vocabulary:
//  * method: a named decoding family, `none` (LLaDA sampler, full recompute), `prefix` / `dual`
//    (Fast-dLLM caches), `flash` (Flash-Cache, confidence-only) and `flash+verify` (Flash-Cache +
//    Flash-Verify), reference §B-§D;
//  * sweep axis: an option key and its values (`threshold=0.7,0.8,0.9`); keys that do not apply to a
//    method (gamma for `dual`, track_num for `none`) are dropped for that method's points, and the
//    points that become equal are kept once;
//  * group: methods x batches x the product of its sweep axes, on one workload (a task's first
//    `limit` test documents, scored; or timing-only: fixed prompts, not scored). A grid is a list of
//    groups (one from the command-line flags, or several from a grid file);
//  * point: one decoding setting at one batch size on one workload, run `repeats` times.
//
// Per repeat the metrics follow docs/eval.md (tokens/s in both definitions, over the sum of the
// engine's generate-call wall times; NFE; tokens per iteration = Σ committed / Σ NFE), plus the
// model passes incl. Flash-Verify passes, the drafts checked / accepted and the peak memory of the
// repeat. Every metric is summarised by median, min and max over the repeats.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashdllm/engine.h"

namespace flashdllm::eval {

class PythonSandbox;

// ---- methods and option keys ---------------------------------------------------------------------

/// The method names in display order: none, prefix, dual, flash, flash+verify.
const std::vector<std::string>& bench_method_names();

/// Sets the cache mode (and verify) of `method` on `o` and resets the settings of other modes to
/// their defaults. Throws Error(kInvalidArgument) listing the known methods for an unknown name.
void apply_bench_method(GenerateOptions& o, std::string_view method);

/// Whether option `key` (canonical) changes anything for `method`: gamma, verify_rule,
/// max_candidates and verify_kept only for flash+verify; track_num, mask_num, tokens_per_step for the flash
/// methods; steps for the non-flash methods; threshold value "off" (no threshold: the sampler's
/// quota of `steps`) only for the non-flash methods; the rest for all. Option keys, their text
/// forms and ranges are params.h's (option_keys, set_option).
bool option_applies(std::string_view key, std::string_view method, std::string_view value);

/// One swept option: canonical key and its values (text, in the given order, no duplicates).
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};

/// Parses "key=v1,v2,..." (whitespace around items ignored). Throws Error(kInvalidArgument) naming
/// the spec for a missing '=', an unknown key, no values, a repeated value or a value that
/// apply_option rejects.
SweepAxis parse_sweep(std::string_view spec);

/// Splits a comma-separated list into trimmed non-empty items.
std::vector<std::string> split_list(std::string_view list);

/// Parses a comma-separated list of positive integers (batch sizes). Throws Error(kInvalidArgument)
/// naming `what` for an empty list, a non-integer or a value < 1.
std::vector<int64_t> parse_positive_list(std::string_view list, std::string_view what);

// ---- grid ----------------------------------------------------------------------------------------

/// What a point runs on.
struct BenchWorkload {
  std::string task = "arith";        ///< a task of tasks.h
  std::filesystem::path data;        ///< test-split file ("" = the task's default under the data dir)
  int64_t limit = 0;                 ///< accuracy: the first `limit` documents (0 = all); timing-only: prompts per repeat (0 = batch)
  bool timing_only = false;          ///< fixed prompts (the task's first ones, cycled), no scoring
};

/// A product of methods x batches x sweep axes on one workload.
struct BenchGroup {
  std::string name;                               ///< shown in the outputs ("" = "g<index>")
  BenchWorkload workload;
  std::vector<std::string> methods = {"none"};
  std::vector<SweepAxis> sweeps;
  std::vector<int64_t> batches = {16};            ///< none/prefix/dual: requests per call; flash: slots
  std::vector<std::pair<std::string, std::string>> options;  ///< fixed option overrides (key, value)
  int64_t repeats = 1;                            ///< measured runs of each point
  int64_t warmup = 1;                             ///< unmeasured generate calls (one request each) before a point
};

/// One setting on one workload at one batch size.
struct BenchPoint {
  std::string id;                                 ///< "p01", "p02", ... in run order
  std::string group;
  std::string method;
  BenchWorkload workload;
  int64_t batch = 1;
  int64_t repeats = 1, warmup = 0;
  std::vector<std::pair<std::string, std::string>> swept;  ///< the applicable swept (key, value) pairs
  GenerateOptions options;                        ///< the full setting (n_slots = batch for flash)

  /// "flash+verify threshold=0.8 gamma=0.7" (method, then the swept values).
  std::string label() const;
};

/// Parses a grid file's JSON: {"defaults": {group fields}, "groups": [{group fields}, ...]} with
/// group fields name, task, data, limit, timing_only, methods, sweep ({key: [values]} in order),
/// batches, options ({key: value}), repeats, warmup. A group's fields override the defaults, which
/// override `base`. Throws Error(kInvalidArgument) naming `what` and the field for unknown fields,
/// wrong types, unknown methods or keys and bad values.
std::vector<BenchGroup> parse_grid(const nlohmann::ordered_json& grid, const std::string& what,
                                   const BenchGroup& base = {});

/// Expands groups into points: for each group, method, batch and combination of the applicable
/// sweep values (first axis outermost), the options are `base`, then the method, the group's
/// fixed options and the swept values. Checks every point's options the way the engine will
/// (gen_length divisible by block_length for the block samplers, ...). Throws Error(kInvalidArgument)
/// naming the group for an empty group, an invalid setting, or when nothing is left.
std::vector<BenchPoint> expand_grid(const std::vector<BenchGroup>& groups, const GenerateOptions& base);

// ---- measurements --------------------------------------------------------------------------------

/// Median (mean of the two middle values for an even count), min and max. Throws
/// Error(kInvalidArgument) for no values.
struct Spread {
  double median = 0.0, min = 0.0, max = 0.0;
};
Spread spread_of(std::vector<double> values);

/// The metrics of one measured repeat of a point (see docs/bench.md).
struct RepeatMeasure {
  double seconds = 0.0;                      ///< Σ wall time of the point's generate calls
  double tokens_per_second = 0.0;            ///< ours: generated tokens incl. the ending EOS / seconds
  double tokens_per_second_released = 0.0;   ///< released code: committed positions (num_decoded − P) / seconds
  double tokens_per_iteration = 0.0;         ///< Σ committed / Σ NFE
  double mean_nfe = 0.0;                     ///< NFE per request
  double forward_passes = 0.0;               ///< model passes per request (main + Flash-Verify passes)
  double verify_candidates = 0.0;            ///< drafts checked per request
  double verify_accepted = 0.0;              ///< drafts accepted per request
  double generated_tokens = 0.0;             ///< Σ over requests (ours)
  double accuracy = -1.0;                    ///< headline metric in [0, 1]; -1 for timing-only
  int64_t correct = 0, n = 0;
  double peak_memory_bytes = -1.0;           ///< -1 = unknown
};

/// A point with its repeats, the summary over them and the comparisons filled by finalize_results.
struct PointResult {
  BenchPoint point;
  std::vector<RepeatMeasure> repeats;
  std::map<std::string, Spread> stats;       ///< per metric name of RepeatMeasure (json field names)
  std::string peak_memory_kind;
  std::string baseline;                      ///< id of the baseline point ("" = none)
  std::optional<double> speedup, speedup_released;  ///< median tokens/s over the baseline's median
  bool table1 = false;                       ///< the row of its method in the Table 1-style table
};

/// Fills `stats` from `repeats` (every metric; accuracy only when measured).
void summarize_repeats(PointResult& r);

/// Baselines, speed-ups and the Table 1 selection. A point's baseline is a point of
/// `baseline_method` on the same workload (task, data, limit, timing-only), batch and gen_length:
/// the one with the same threshold if there is one, else one without a threshold, else the first.
/// The Table 1 row of each (workload, batch, method) is its first point whose applicable options
/// equal every (key, value) of `table_setting` (keys canonical; numbers compared as numbers), else
/// its first point.
void finalize_results(std::vector<PointResult>& results, std::string_view baseline_method,
                      const std::vector<std::pair<std::string, std::string>>& table_setting);

// ---- running -------------------------------------------------------------------------------------

/// Produces a loaded engine (called once, or before every point with fresh_engine).
using EngineFactory = std::function<std::unique_ptr<Engine>()>;

struct BenchRunOptions {
  std::filesystem::path data_dir;         ///< where the tasks' default files are
  std::string model_dir;                  ///< for the benchmark tasks' chat-template rule
  std::optional<bool> chat;               ///< force / forbid the chat template (default: as `flashdllm eval`)
  bool fresh_engine = false;              ///< reload the engine before every point (isolated device peak memory)
  const PythonSandbox* sandbox = nullptr; ///< code tasks (required for them unless timing-only)
  /// Called with (requests done, requests in all, the point being run, its index) as requests finish.
  std::function<void(int64_t, int64_t, const BenchPoint&, size_t)> progress;
  /// Called with each point's result as soon as it is measured (e.g. to save partial results).
  std::function<void(const PointResult&)> on_point;
};

/// Runs every point (warm-up calls, then `repeats` measured runs; accuracy workloads are scored
/// with score_samples), then summarize_repeats. Peak memory: on the CPU backend the process's
/// peak RSS during the repeat (VmHWM after resetting it through /proc/self/clear_refs; the
/// process's lifetime max RSS where that is not allowed); otherwise Engine::peak_memory_bytes (per
/// point with fresh_engine, else the engine's running maximum). Throws what the engine, the task
/// loader or the sandbox throw.
std::vector<PointResult> run_bench(const EngineFactory& load, const std::vector<BenchPoint>& points,
                                   const BenchRunOptions& options, std::string* backend_name = nullptr);

// ---- provenance and outputs ----------------------------------------------------------------------

/// "model name" of the first processor in /proc/cpuinfo text ("" when absent).
std::string cpu_model_from_cpuinfo(std::string_view cpuinfo);

/// What a bench summary records of the run that the library does not look up itself: the caller
/// (apps/cli, from the environment) fills it; src/ reads no environment variable for it.
struct BenchProvenance {
  std::string command;                         ///< the command line as run
  std::filesystem::path source_dir;            ///< the source tree asked for its commit (git)
  std::string commit;                          ///< the commit under test ($FLASHDLLM_COMMIT); "" = ask git
  std::optional<std::string> omp_num_threads;  ///< $OMP_NUM_THREADS as set (nullopt = unset)
};

/// `commit` if not empty, else `git -C source_dir rev-parse HEAD` (+ "-dirty" when tracked files
/// differ from HEAD), else "unknown".
std::string detect_commit(const std::filesystem::path& source_dir, const std::string& commit = "");

/// User + system CPU time of this process so far in seconds (getrusage), -1 if unavailable.
double process_cpu_seconds();

/// The provenance block of a bench summary: tool, command, commit (detect_commit), date (UTC,
/// ISO 8601), model, hardware {backend, host_info()...}.
nlohmann::ordered_json bench_meta(const BenchProvenance& provenance, const std::string& backend,
                                  const std::string& model);

/// Host description: cpu_model, logical_cpus, omp_num_threads (as given: the caller's
/// OMP_NUM_THREADS), load average (1/5/15 min), hostname.
nlohmann::ordered_json host_info(const std::optional<std::string>& omp_num_threads = std::nullopt);

/// One point as JSON: id, group, label, method, task, data, timing_only, limit, batch, repeats,
/// warmup, swept {key: value}, options (the full setting), metrics {name: {median, min, max,
/// values}}, accuracy / n / correct, peak_memory_kind, baseline, speedup, speedup_released, table1.
nlohmann::ordered_json point_to_json(const PointResult& r);

/// summary.md: provenance, the Table 1-style table per workload and batch, the Flash-Verify vs
/// confidence-only comparison at equal accuracy (±`equal_accuracy_pts`), every point, and the
/// throughput / memory vs batch table of timing-only points.
std::string bench_markdown(const nlohmann::ordered_json& meta, const std::vector<PointResult>& results,
                           double equal_accuracy_pts = 1.0);

/// summary.csv: one row per point (RFC 4180 quoting), the medians plus min/max of the speeds.
std::string bench_csv(const std::vector<PointResult>& results);

/// Writes results.jsonl, summary.json ({meta..., "points": [...]}), summary.md and summary.csv into
/// `dir` (created). Throws Error(kIo) naming the file that cannot be written.
void write_bench_outputs(const std::filesystem::path& dir, const nlohmann::ordered_json& meta,
                         const std::vector<PointResult>& results);

}  // namespace flashdllm::eval
