// Runs an evaluation task through the engine in batches, scores it and summarises it.
//
// Metric definitions (docs/eval.md gives the full text):
//  * accuracy: the task's headline metric (tasks.h), with its Wilson 95% confidence interval; every
//    other metric of the task is summarised too;
//  * NFE: iterations a request took part in (engine GenerateResult::nfe), mean over requests;
//  * tokens/s (ours): generated tokens up to and including the ending EOS/EOT (excluding the prompt
//    and the EOS padding after it; counted before stop-string truncation), summed over requests, over
//    the wall time of the generation loop (sum of the engine's generate-call times: tokenization,
//    scoring and sandboxing excluded);
//  * tokens/s (released-code definition): all committed canvas positions (answer + EOS runs:
//    GenerateResult::committed_tokens; the whole canvas for the samplers that fill it) over the same
//    wall time -- Flash-dLLM's `num_tokens / (end - start)` (reference §D.10);
//  * tokens per iteration: Σ committed positions / Σ NFE (Flash-dLLM's "Tokens per iter");
//  * speed-up: tokens/s over a baseline run's tokens/s (the no-cache greedy run, --baseline FILE),
//    for both definitions;
//  * peak memory: filled by the caller (host max RSS on CPU).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/sandbox.h"
#include "eval/tasks.h"
#include "flashdllm/engine.h"

namespace flashdllm::eval {

struct SampleResult {
  std::string id;
  std::string prompt;
  std::string raw_text;   ///< the engine's decoded output (up to the first EOS/EOT)
  std::string text;       ///< raw_text cut at the task's stop strings: what was scored
  std::string extracted;  ///< headline metric's extracted answer
  std::string gold;
  bool correct = false;   ///< headline metric
  std::vector<Score::Metric> metrics;  ///< every metric of the task, headline first
  std::string detail;     ///< code tasks: sandbox result
  int64_t prompt_tokens = 0;
  int64_t nfe = 0;
  int64_t forward_passes = 0;    ///< model passes incl. Flash-Verify's (= nfe without verify)
  int64_t committed_tokens = 0;  ///< canvas positions committed over the run (ours)
  int64_t committed_tokens_reference = 0;  ///< the released code's count (num_decoded − P), for its tokens/s
  int64_t generated_tokens = 0;  ///< answer tokens + the ending EOS/EOT when there is one (our count)
  bool stopped_at_eos = false;
  double seconds = 0.0;          ///< latency: from the start of its generate call to its completion
  double call_seconds = 0.0;     ///< wall time of the generate call this sample ran in
  int64_t call = 0;              ///< index of that generate call
};

struct MetricSummary {
  std::string name;
  int64_t correct = 0;
  double accuracy = 0.0, ci_low = 0.0, ci_high = 0.0;
};

struct EvalSummary {
  std::string task;
  int64_t n = 0, correct = 0;
  double accuracy = 0.0, ci_low = 0.0, ci_high = 0.0;
  std::vector<MetricSummary> metrics;  ///< all metrics, headline first
  double mean_nfe = 0.0;
  int64_t total_nfe = 0;
  /// Model passes incl. Flash-Verify's: what "forward passes" compares across methods (NFE counts
  /// the main passes only, the released code's definition).
  double mean_forward_passes = 0.0;
  int64_t total_forward_passes = 0;
  int64_t generated_tokens = 0, committed_tokens = 0, committed_tokens_reference = 0;
  double tokens_per_second = 0.0;           ///< ours (see the header comment)
  double tokens_per_second_released = 0.0;  ///< the released code's definition
  double tokens_per_iteration = 0.0;
  double seconds = 0.0;                     ///< generation wall time (Σ generate calls)
  int64_t empty_answers = 0;                ///< outputs with no extractable answer (text tasks)
  int64_t generate_calls = 0;
  std::optional<double> speedup, speedup_released;  ///< vs the baseline, when one was given
  std::optional<double> baseline_tokens_per_second;
  int64_t peak_memory_bytes = -1;           ///< -1 = unknown
  std::string peak_memory_kind;             ///< what was measured
  int64_t gen_length = 0;                   ///< the setting's requested generation length
  std::string method;                       ///< label of the decoding setting (table column)
};

/// Where an eval's generation stands: called on every engine iteration (where the denoiser reports
/// steps) and after every generate call.
struct EvalTick {
  int64_t done = 0;      ///< requests finished
  int64_t total = 0;     ///< requests in all
  double seconds = 0.0;  ///< since generation started
  int64_t call = 0;      ///< the generate call running (0-based)
  int64_t calls = 0;     ///< generate calls in all
  double decoded = 0.0;  ///< the running call's canvas positions decoded, in [0, 1] (finished requests count whole)
};
using EvalProgress = std::function<void(const EvalTick&)>;

/// How generate_samples splits the work into engine calls.
struct RunOptions {
  /// Requests per Engine::generate call; 0 = all in one call (Flash-Cache continuous batching, as
  /// Flash-dLLM's wrapper does).
  int64_t requests_per_call = 16;
  /// Apply the chat template (overrides EvalSample::chat when set).
  std::optional<bool> chat;
  EvalProgress progress;
};

/// The unscored result of one sample from the engine's output `g`: text cut at the sample's stop
/// strings, token counts, NFE; `call` is the generate call's index and `seconds` the request's
/// latency (g.seconds when it is unknown).
SampleResult make_sample_result(const EvalSample& sample, const GenerateResult& g, int64_t call, double seconds);

/// Generates every sample and cuts each output at its stop strings; results are not scored yet.
/// Throws whatever Engine::generate throws.
std::vector<SampleResult> generate_samples(Engine& engine, const std::vector<EvalSample>& samples,
                                           const GenerateOptions& options, const RunOptions& run);

/// Scores results of `task` in place: text tasks by score_text, code tasks by running
/// code_program(sample, text) in `sandbox` (required for them; Error(kInvalidArgument) when null).
/// `progress` (optional) gets (done, total) of the sandbox runs.
void score_samples(std::string_view task, const std::vector<EvalSample>& samples, std::vector<SampleResult>& results,
                   const PythonSandbox* sandbox, const std::function<void(int64_t, int64_t)>& progress = {});

/// Generates and scores with a text scoring function (kept API: static batches of `batch`).
std::vector<SampleResult> run_eval(Engine& engine, const std::vector<EvalSample>& samples,
                                   const GenerateOptions& options, int64_t batch,
                                   const std::function<Score(std::string_view, const std::string&)>& score,
                                   const EvalProgress& progress = {});

/// Aggregates results (see the metric definitions above).
EvalSummary summarize(const std::string& task, const std::vector<SampleResult>& results);

/// Fills the speed-ups from a baseline summary JSON (as written by to_json(EvalSummary)). Throws
/// Error(kInvalidArgument) naming `what` when the baseline lacks tokens/s or is of another task.
void apply_baseline(EvalSummary& s, const nlohmann::json& baseline, const std::string& what);

/// Peak resident set size of this process in bytes (getrusage), -1 if unavailable.
int64_t peak_rss_bytes();

nlohmann::json to_json(const SampleResult& r);
nlohmann::json to_json(const EvalSummary& s);
/// Rows in the layout of the paper's Table 1 (one row per task x setting): benchmark, length,
/// method, n, accuracy (95% CI), other metrics, tokens/s (ours), tokens/s (released def.),
/// speed-up, NFE, tokens/iteration, peak memory.
std::string to_markdown(const std::vector<EvalSummary>& rows);

}  // namespace flashdllm::eval
