// Evaluation tasks: datasets, prompts and answer scoring (reference §E for the benchmark protocols;
// docs/eval.md for the full description and every deviation from lm-evaluation-harness 0.4.8).
//
//  task       data (data/)                     prompt (lm-eval 0.4.8)                          stop strings                   metrics (first = headline)
//  arith      arith/test.jsonl                 the question, chat template                    none                           exact_match (number after the last "####")
//  gsm8k      gsm8k_test.jsonl (+ _train)      5-shot "Question: ..\nAnswer: <solution>",     "Question:", "</s>",           flexible-extract, strict-match
//                                               exemplars random.Random(1234).sample(train,5)  "<|im_end|>"
//  math500    math500_test.jsonl               4-shot Minerva "Problem:\n..\n\nSolution: .."   "Problem:"                     exact_match (Minerva-normalised string equality), boxed_match
//  humaneval  HumanEval.jsonl.gz               the function prompt (0-shot)                   "\nclass" "\ndef" "\n#" "\nif" "\nprint"   pass@1 (sandbox)
//  mbpp       mbpp.jsonl (task ids 11-510)     3-shot (task ids 2, 3, 4) "[BEGIN]" / "[DONE]"  "[DONE]"                       pass@1 (sandbox)
//
// The benchmark prompts are lm-eval's raw context strings; whether the chat template is applied is
// the caller's choice (Flash-dLLM: only for model paths containing "instruct", see chat_by_default).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashdllm::eval {

/// One evaluation item.
struct EvalSample {
  std::string id;       ///< stable id: "<task>/<index in the split>" ("humaneval/HumanEval/0" style ids keep the dataset's)
  int64_t index = 0;    ///< position in the test split
  std::string prompt;   ///< text given to the model (lm-eval context, before the chat template if one is applied)
  std::string gold;     ///< gold answer as the metric compares it ("" for code tasks)
  bool chat = true;     ///< the task's own default for applying the chat template
  std::vector<std::string> until;  ///< stop strings cut from the generated text before scoring
  /// Code tasks: the program that is run is code_prefix + completion + code_suffix.
  std::string code_prefix, code_suffix;
};

/// Static description of a task.
struct TaskInfo {
  std::string name;
  std::string default_data;          ///< file name under data/
  int num_fewshot = 0;
  bool code = false;                 ///< scored by running Python in the sandbox
  std::vector<std::string> metrics;  ///< metric names, headline first
  std::string description;
};

/// All tasks, in display order.
const std::vector<TaskInfo>& task_infos();
/// The task called `name`. Throws Error(kInvalidArgument) listing the known tasks otherwise.
const TaskInfo& task_info(std::string_view name);

/// Options of load_task.
struct LoadOptions {
  int64_t limit = 0;                 ///< > 0: keep the first `limit` test documents
  /// GSM8K: the train split the exemplars are drawn from (default: gsm8k_train.jsonl beside the test file).
  std::filesystem::path fewshot_data;
  uint64_t fewshot_seed = 1234;      ///< lm-eval's default --seed "0,1234,1234,1234" (few-shot sampler seed)
  /// GSM8K: lm-eval processes (accelerate ranks) that built the requests; each rank seeds its own
  /// sampler, so document i gets draw floor(i / fewshot_processes). 1 = a single process.
  int64_t fewshot_processes = 1;
};

/// Loads the test documents of `task` from `data` and builds their prompts (few-shot included).
/// Throws Error(kIo) for unreadable files and Error(kInvalidArgument) naming file and line for
/// malformed records.
std::vector<EvalSample> load_task(std::string_view task, const std::filesystem::path& data, const LoadOptions& options = {});

/// Scores of one output: every metric of the task, headline first.
struct Score {
  std::string extracted;   ///< the headline metric's extracted answer ("" if none)
  bool correct = false;    ///< the headline metric
  struct Metric {
    std::string name;
    std::string extracted;
    bool correct = false;
  };
  std::vector<Metric> metrics;
  std::string detail;      ///< code tasks: the sandbox result ("passed", "failed: ...", "timed out")
};

/// Scores a (stop-truncated) output of a non-code task. Throws Error(kInvalidArgument) for code
/// tasks (those are scored with score_code_results).
Score score_text(std::string_view task, std::string_view output, const std::string& gold);

/// Builds the program a code task runs for `completion` (code_prefix + completion + code_suffix).
std::string code_program(const EvalSample& sample, std::string_view completion);

// ---- task "arith" (kept API) ----------------------------------------------------------------

/// Normalises a number string: strips whitespace, '$' and ',' and a trailing '.', and trailing
/// zeros of a decimal fraction ("1,200.50" -> "1200.5", "7.0" -> "7"); "" when not a number.
std::string normalize_number(std::string_view s);

/// The number after the LAST "####" in `text` (normalised); nullopt when there is none.
std::optional<std::string> extract_hash_answer(std::string_view text);

/// Loads the arith task from a JSONL file ({"question", "answer"} per line). `limit` > 0 keeps the
/// first `limit` records. Throws Error(kIo) if unreadable, Error(kInvalidArgument) naming the file
/// and line for malformed records (missing fields, answer without "#### <number>").
std::vector<EvalSample> load_arith(const std::filesystem::path& jsonl, int64_t limit = 0);

/// Exact match of the number after the output's last "####".
Score score_arith(std::string_view output, const std::string& gold);

/// Wilson score interval of a binomial proportion at 95% confidence: {low, high}.
std::pair<double, double> wilson_interval(int64_t correct, int64_t total);

/// Flash-dLLM's prompt rule: the chat template is applied when the model path contains "instruct"
/// (case-insensitive); otherwise (LLaDA-1.5) the raw context is tokenized as-is [FD-eval].
bool chat_by_model_path(std::string_view model_path);

}  // namespace flashdllm::eval
