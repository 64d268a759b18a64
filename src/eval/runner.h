// Runs an evaluation task through the engine in batches and summarises it.
//
// Metric definitions (docs/eval.md):
//  * accuracy: exact match of the extracted answer, with its Wilson 95% confidence interval;
//  * NFE: forward passes a request took part in (mean over requests);
//  * tokens/s: generated tokens up to and including the ending EOS/EOT (excluding prompt and the
//    padding after it), summed over requests, over the wall time of the generation loop;
//  * tokens per forward: canvas positions committed per forward pass, Σ committed / Σ NFE (gen_length
//    / NFE for the samplers that fill the whole canvas; Flash-Cache stops at the finishing EOS).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/tasks.h"
#include "flashdllm/engine.h"

namespace flashdllm::eval {

struct SampleResult {
  std::string id;
  std::string prompt;
  std::string text;
  std::string extracted;
  std::string gold;
  bool correct = false;
  int64_t nfe = 0;
  int64_t committed_tokens = 0;  ///< canvas positions committed over the run
  int64_t generated_tokens = 0;  ///< answer tokens + the ending EOS/EOT when there is one
  double seconds = 0.0;          ///< wall time of the batch this sample ran in
};

struct EvalSummary {
  std::string task;
  int64_t n = 0, correct = 0;
  double accuracy = 0.0, ci_low = 0.0, ci_high = 0.0;
  double mean_nfe = 0.0;
  double tokens_per_second = 0.0;
  double tokens_per_forward = 0.0;
  double seconds = 0.0;
  int64_t empty_answers = 0;  ///< outputs with no extractable answer
};

/// Called after every batch with (done, total, seconds so far).
using EvalProgress = std::function<void(int64_t, int64_t, double)>;

/// Generates every sample (batches of `batch` requests) and scores it with `score`.
/// Throws whatever Engine::generate throws.
std::vector<SampleResult> run_eval(Engine& engine, const std::vector<EvalSample>& samples,
                                   const GenerateOptions& options, int64_t batch,
                                   const std::function<Score(std::string_view, const std::string&)>& score,
                                   const EvalProgress& progress = {});

/// Aggregates results (see the metric definitions above).
EvalSummary summarize(const std::string& task, const std::vector<SampleResult>& results);

nlohmann::json to_json(const SampleResult& r);
nlohmann::json to_json(const EvalSummary& s);
/// One markdown table row set: | task | n | accuracy (95% CI) | NFE | tokens/forward | tokens/s | seconds |
std::string to_markdown(const std::vector<EvalSummary>& rows);

}  // namespace flashdllm::eval
