// Evaluation tasks: datasets, prompts and answer scoring (reference §E for the benchmark protocols).
//
// Task "arith": the project's arithmetic word problems (data/arith/test.jsonl, GSM8K record format
// {"question", "answer"}; the gold number follows "#### " on the answer's last line). Prompt = the
// question as one chat message; score = exact match of the number after the output's last "####".
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashdllm::eval {

/// One evaluation item.
struct EvalSample {
  std::string id;       ///< stable id ("arith/17")
  std::string prompt;   ///< text given to the model (before the chat template, if the task uses one)
  std::string gold;     ///< normalised gold answer
  bool chat = true;     ///< apply the model's chat template
};

/// Normalises a number string: strips whitespace, '$' and ',' and a trailing '.', and trailing
/// zeros of a decimal fraction ("1,200.50" -> "1200.5", "7.0" -> "7"); "" when not a number.
std::string normalize_number(std::string_view s);

/// The number after the LAST "####" in `text` (normalised); nullopt when there is none.
std::optional<std::string> extract_hash_answer(std::string_view text);

/// Loads the arith task from a JSONL file ({"question", "answer"} per line). `limit` > 0 keeps the
/// first `limit` records. Throws Error(kIo) if unreadable, Error(kInvalidArgument) naming the file
/// and line for malformed records (missing fields, answer without "#### <number>").
std::vector<EvalSample> load_arith(const std::filesystem::path& jsonl, int64_t limit = 0);

/// Scores one output of `task` against the gold answer: returns the extracted answer ("" if none)
/// and whether it is correct.
struct Score {
  std::string extracted;
  bool correct = false;
};
Score score_arith(std::string_view output, const std::string& gold);

/// Wilson score interval of a binomial proportion at 95% confidence: {low, high}.
std::pair<double, double> wilson_interval(int64_t correct, int64_t total);

}  // namespace flashdllm::eval
