#include "eval/tasks.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "eval/py_random.h"
#include "io/file.h"
#include "eval/scoring.h"

namespace flashdllm::eval {

namespace {

namespace fs = std::filesystem;

/// One JSON object per non-blank line; `.gz` files are decompressed with `gzip -dc`. `what` says in
/// messages what the file is for.
struct JsonLine {
  nlohmann::json j;
  int64_t line = 0;
};

/// The text of the task file `path`, or Error(kIo) saying what the file is for and why it cannot be
/// read (no such file, a directory, ...).
std::string read_task_text(const fs::path& path, const std::string& what) {
  try {
    return read_regular_file(path);
  } catch (const Error& e) {
    FDLLM_FAIL(ErrorCode::kIo, "cannot read the {}: {}", what, e.what());
  }
}

std::vector<JsonLine> read_jsonl(const fs::path& path, const std::string& what = "task file (--data)") {
  std::string text;
  if (path.extension() == ".gz") {
    FDLLM_CHECK(fs::is_regular_file(path), ErrorCode::kIo, "cannot read the {} '{}': {}", what, path.string(),
                fs::exists(path) ? "not a regular file" : "no such file");
    std::string quoted = "'";
    for (char c : path.string()) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    FILE* p = popen(("gzip -dc " + quoted + " 2>/dev/null").c_str(), "r");
    FDLLM_CHECK(p != nullptr, ErrorCode::kIo, "cannot run gzip to read '{}'", path.string());
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    const int st = pclose(p);
    FDLLM_CHECK(st == 0, ErrorCode::kIo, "'{}' is not a readable gzip file", path.string());
  } else {
    text = read_task_text(path, what);
  }
  std::vector<JsonLine> out;
  std::stringstream ss(text);
  int64_t lineno = 0;
  for (std::string line; std::getline(ss, line);) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    JsonLine jl;
    jl.line = lineno;
    try {
      jl.j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}:{}: not JSON: {}", path.string(), lineno, e.what());
    }
    FDLLM_CHECK_ARG(jl.j.is_object(), "{}:{}: expected a JSON object", path.string(), lineno);
    out.push_back(std::move(jl));
  }
  FDLLM_CHECK_ARG(!out.empty(), "task file '{}' holds no records", path.string());
  return out;
}

std::string str_field(const JsonLine& r, const fs::path& file, const char* key) {
  FDLLM_CHECK_ARG(r.j.contains(key) && r.j[key].is_string(), "{}:{}: missing string field \"{}\"", file.string(), r.line,
                  key);
  return r.j[key].get<std::string>();
}

const std::vector<std::string> kGsm8kUntil = {"Question:", "</s>", "<|im_end|>"};
const std::vector<std::string> kMathUntil = {"Problem:"};
const std::vector<std::string> kHumanEvalUntil = {"\nclass", "\ndef", "\n#", "\nif", "\nprint"};
const std::vector<std::string> kMbppUntil = {"[DONE]"};

// lm-eval 0.4.8 minerva_math `list_fewshot_samples()` (Minerva's four fixed exemplars; task data).
struct MathExemplar {
  const char* problem;
  const char* solution;
};
const MathExemplar kMinervaExemplars[] = {
    {"Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.}",
     "The expressions inside each square root must be non-negative. Therefore, $x-2 \\ge 0$, so $x\\ge2$, and $5 - x "
     "\\ge 0$, so $x \\le 5$. Also, the denominator cannot be equal to zero, so $5-x>0$, which gives $x<5$. "
     "Therefore, the domain of the expression is $\\boxed{[2,5)}$.\nFinal Answer: The final answer is $[2,5)$. I hope "
     "it is correct."},
    {"If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find $\\det (\\mathbf{A} \\mathbf{B}).$",
     "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det \\mathbf{B}) = (2)(12) = "
     "\\boxed{24}.$\nFinal Answer: The final answer is $24$. I hope it is correct."},
    {"Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound weights instead, how many times "
     "must Terrell lift them in order to lift the same total weight?",
     "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot 12\\cdot20=480$ pounds of weight.  "
     "If he lifts two 15-pound weights instead for $n$ times, he will lift a total of $2\\cdot15\\cdot n=30n$ pounds "
     "of weight.  Equating this to 480 pounds, we can solve for $n$:\n\\begin{align*}\n30n&=480\\\n\\Rightarrow\\qquad "
     "n&=480/30=\\boxed{16}\n\\end{align*}\nFinal Answer: The final answer is $16$. I hope it is correct."},
    {"If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\n6y-9x &=b.\n\\end{align*}has a solution $(x, y)$ "
     "where $x$ and $y$ are both nonzero,\nfind $\\frac{a}{b},$ assuming $b$ is nonzero.",
     "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n$$6y-9x=-\\frac{3}{2}a.$$Since we also know "
     "that $6y-9x=b$, we have\n\n$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\nFinal Answer: "
     "The final answer is $-\\frac{2}{3}$. I hope it is correct."},
};

std::string gsm8k_doc_text(const std::string& question) { return "Question: " + question + "\nAnswer:"; }
std::string math_doc_text(const std::string& problem) { return "Problem:\n" + problem + "\n\nSolution:"; }

struct MbppDoc {
  int64_t task_id = 0;
  std::string text, code;
  std::vector<std::string> tests;
};

std::string mbpp_doc_text(const MbppDoc& d) {
  return "You are an expert Python programmer, and here is your task: " + d.text +
         " Your code should pass these tests:\n\n" + d.tests[0] + "\n" + d.tests[1] + "\n" + d.tests[2] + "\n[BEGIN]\n";
}

std::vector<EvalSample> load_gsm8k(const fs::path& data, const LoadOptions& o) {
  const fs::path train_path = o.fewshot_data.empty() ? data.parent_path() / "gsm8k_train.jsonl" : o.fewshot_data;
  FDLLM_CHECK_ARG(o.fewshot_processes >= 1, "fewshot_processes must be >= 1, got {}", o.fewshot_processes);
  std::vector<std::pair<std::string, std::string>> train;
  for (const JsonLine& r :
       read_jsonl(train_path, "gsm8k few-shot exemplars (--fewshot-data; by default gsm8k_train.jsonl beside --data)"))
    train.emplace_back(str_field(r, train_path, "question"), str_field(r, train_path, "answer"));
  FDLLM_CHECK_ARG(train.size() >= 5, "'{}': the few-shot split needs at least 5 records, has {}", train_path.string(),
                  train.size());
  PyRandom rnd(o.fewshot_seed);
  std::vector<std::vector<int64_t>> draws;
  std::vector<EvalSample> out;
  for (const JsonLine& r : read_jsonl(data)) {
    const std::string q = str_field(r, data, "question"), a = str_field(r, data, "answer");
    FDLLM_CHECK_ARG(a.find("#### ") != std::string::npos, "{}:{}: the answer has no \"#### <number>\" line",
                    data.string(), r.line);
    const int64_t i = static_cast<int64_t>(out.size());
    const size_t draw = static_cast<size_t>(i / o.fewshot_processes);
    while (draws.size() <= draw) draws.push_back(rnd.sample(static_cast<int64_t>(train.size()), 5));
    EvalSample s;
    s.id = fmt::format("gsm8k/{}", i);
    s.index = i;
    for (int64_t k : draws[draw]) {
      const auto& [eq, ea] = train[static_cast<size_t>(k)];
      s.prompt += gsm8k_doc_text(eq) + " " + ea + "\n\n";
    }
    s.prompt += gsm8k_doc_text(q);
    s.gold = gsm8k_exact_match_normalize(a);
    s.chat = false;
    s.until = kGsm8kUntil;
    out.push_back(std::move(s));
    if (o.limit > 0 && static_cast<int64_t>(out.size()) >= o.limit) break;
  }
  return out;
}

std::vector<EvalSample> load_math500(const fs::path& data, const LoadOptions& o) {
  std::string context;
  for (const MathExemplar& e : kMinervaExemplars)
    context += math_doc_text(e.problem) + " " + e.solution + "\n\n";
  std::vector<EvalSample> out;
  for (const JsonLine& r : read_jsonl(data)) {
    const std::string problem = str_field(r, data, "problem"), solution = str_field(r, data, "solution");
    const auto boxed = last_boxed_only_string(solution);
    const auto inner = boxed ? remove_boxed(*boxed) : std::nullopt;
    FDLLM_CHECK_ARG(inner.has_value(), "{}:{}: the solution has no \\boxed{{...}} answer", data.string(), r.line);
    EvalSample s;
    s.index = static_cast<int64_t>(out.size());
    s.id = fmt::format("math500/{}", s.index);
    s.prompt = context + math_doc_text(problem);
    s.gold = minerva_normalize(*inner);
    s.chat = false;
    s.until = kMathUntil;
    out.push_back(std::move(s));
    if (o.limit > 0 && static_cast<int64_t>(out.size()) >= o.limit) break;
  }
  return out;
}

std::vector<EvalSample> load_humaneval(const fs::path& data, const LoadOptions& o) {
  std::vector<EvalSample> out;
  for (const JsonLine& r : read_jsonl(data)) {
    EvalSample s;
    s.index = static_cast<int64_t>(out.size());
    s.id = fmt::format("humaneval/{}", s.index);
    s.prompt = str_field(r, data, "prompt");
    s.chat = false;
    s.until = kHumanEvalUntil;
    s.code_prefix = s.prompt;
    s.code_suffix = fmt::format("\n{}\ncheck({})", str_field(r, data, "test"), str_field(r, data, "entry_point"));
    str_field(r, data, "task_id");
    out.push_back(std::move(s));
    if (o.limit > 0 && static_cast<int64_t>(out.size()) >= o.limit) break;
  }
  return out;
}

std::vector<EvalSample> load_mbpp(const fs::path& data, const LoadOptions& o) {
  std::vector<MbppDoc> docs;
  for (const JsonLine& r : read_jsonl(data)) {
    MbppDoc d;
    FDLLM_CHECK_ARG(r.j.contains("task_id") && r.j["task_id"].is_number_integer(), "{}:{}: missing integer \"task_id\"",
                    data.string(), r.line);
    d.task_id = r.j["task_id"].get<int64_t>();
    d.text = str_field(r, data, "text");
    d.code = str_field(r, data, "code");
    FDLLM_CHECK_ARG(r.j.contains("test_list") && r.j["test_list"].is_array() && r.j["test_list"].size() >= 3,
                    "{}:{}: \"test_list\" must hold at least 3 tests", data.string(), r.line);
    for (const auto& t : r.j["test_list"]) {
      FDLLM_CHECK_ARG(t.is_string(), "{}:{}: \"test_list\" holds a non-string", data.string(), r.line);
      d.tests.push_back(t.get<std::string>());
    }
    docs.push_back(std::move(d));
  }
  // lm-eval's fixed exemplars are the dataset's prompt-split tasks 2, 3 and 4 (utils.list_fewshot_samples).
  std::string context;
  for (int64_t id : {2, 3, 4}) {
    auto it = std::find_if(docs.begin(), docs.end(), [&](const MbppDoc& d) { return d.task_id == id; });
    FDLLM_CHECK_ARG(it != docs.end(), "'{}': few-shot exemplar task_id {} is missing (need the full MBPP file)",
                    data.string(), id);
    context += mbpp_doc_text(*it) + it->code + "\n[DONE]" + "\n\n";
  }
  std::vector<EvalSample> out;
  for (const MbppDoc& d : docs) {
    if (d.task_id < 11 || d.task_id > 510) continue;  // the test split
    EvalSample s;
    s.index = static_cast<int64_t>(out.size());
    s.id = fmt::format("mbpp/{}", d.task_id);
    s.prompt = context + mbpp_doc_text(d);
    s.chat = false;
    s.until = kMbppUntil;
    s.code_suffix = fmt::format("\n{}\n{}\n{}", d.tests[0], d.tests[1], d.tests[2]);
    out.push_back(std::move(s));
    if (o.limit > 0 && static_cast<int64_t>(out.size()) >= o.limit) break;
  }
  FDLLM_CHECK_ARG(!out.empty(), "'{}' holds no MBPP test-split tasks (task_id 11-510)", data.string());
  return out;
}

}  // namespace

const std::vector<TaskInfo>& task_infos() {
  static const std::vector<TaskInfo> infos = {
      {"arith", "arith/test.jsonl", 0, false, {"exact_match"}, "the small model's arithmetic word problems"},
      {"gsm8k", "gsm8k_test.jsonl", 5, false, {"flexible_extract", "strict_match"}, "GSM8K, lm-eval gsm8k v3.0"},
      {"math500", "math500_test.jsonl", 4, false, {"exact_match", "boxed_match"},
       "MATH-500, lm-eval minerva_math prompt and normalisation"},
      {"humaneval", "HumanEval.jsonl.gz", 0, true, {"pass@1"}, "HumanEval, lm-eval humaneval"},
      {"mbpp", "mbpp.jsonl", 3, true, {"pass@1"}, "MBPP test split, lm-eval mbpp"},
  };
  return infos;
}

const TaskInfo& task_info(std::string_view name) {
  std::string known;
  for (const TaskInfo& t : task_infos()) {
    if (t.name == name) return t;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", t.name);
  }
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "--task '{}' is not known (available: {})", name, known);
}

std::vector<EvalSample> load_task(std::string_view task, const std::filesystem::path& data, const LoadOptions& o) {
  const TaskInfo& info = task_info(task);
  if (info.name == "arith") return load_arith(data, o.limit);
  if (info.name == "gsm8k") return load_gsm8k(data, o);
  if (info.name == "math500") return load_math500(data, o);
  if (info.name == "humaneval") return load_humaneval(data, o);
  return load_mbpp(data, o);
}

Score score_text(std::string_view task, std::string_view output, const std::string& gold) {
  const TaskInfo& info = task_info(task);
  FDLLM_CHECK_ARG(!info.code, "task '{}' is scored by running its code in the sandbox, not by text", info.name);
  Score s;
  if (info.name == "arith") {
    s = score_arith(output, gold);
  } else if (info.name == "gsm8k") {
    const auto flex = gsm8k_flexible_extract(output);
    const auto strict = gsm8k_strict_extract(output);
    s.metrics.push_back({"flexible_extract", flex.value_or(""),
                         gsm8k_exact_match_normalize(flex.value_or("[invalid]")) == gold});
    s.metrics.push_back({"strict_match", strict.value_or(""),
                         gsm8k_exact_match_normalize(strict.value_or("[invalid]")) == gold});
  } else {  // math500
    const std::string unnorm = minerva_unnormalized_answer(output);
    const std::string ans = minerva_normalize(unnorm);
    s.metrics.push_back({"exact_match", unnorm == "[invalidanswer]" ? "" : ans, ans == gold});
    const auto boxed = last_boxed_only_string(output);
    const auto inner = boxed ? remove_boxed(*boxed) : std::nullopt;
    const std::string b = inner ? minerva_normalize(*inner) : "";
    s.metrics.push_back({"boxed_match", b, inner.has_value() && b == gold});
  }
  if (!s.metrics.empty()) {
    s.extracted = s.metrics.front().extracted;
    s.correct = s.metrics.front().correct;
  }
  return s;
}

std::string code_program(const EvalSample& sample, std::string_view completion) {
  return sample.code_prefix + std::string(completion) + sample.code_suffix;
}

std::string normalize_number(std::string_view s) {
  std::string t;
  for (char c : s)
    if (c != ',' && c != '$' && c != ' ' && c != '\t' && c != '\n' && c != '\r') t += c;
  while (!t.empty() && t.back() == '.') t.pop_back();
  if (t.empty()) return "";
  size_t i = (t[0] == '-' || t[0] == '+') ? 1 : 0;
  if (i == t.size()) return "";
  bool dot = false, digit = false;
  for (size_t k = i; k < t.size(); ++k) {
    if (t[k] == '.') {
      if (dot) return "";
      dot = true;
    } else if (t[k] >= '0' && t[k] <= '9') {
      digit = true;
    } else {
      return "";
    }
  }
  if (!digit) return "";
  if (dot) {
    while (t.back() == '0') t.pop_back();
    if (t.back() == '.') t.pop_back();
  }
  if (t[0] == '+') t.erase(0, 1);
  // Leading zeros of the integer part ("007" -> "7", keep "0").
  size_t s0 = t[0] == '-' ? 1 : 0, z = s0;
  while (z + 1 < t.size() && t[z] == '0' && t[z + 1] != '.') ++z;
  t.erase(s0, z - s0);
  if (t == "-0") t = "0";
  return t;
}

std::optional<std::string> extract_hash_answer(std::string_view text) {
  const size_t at = text.rfind("####");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(at + 4);
  size_t b = 0;
  while (b < rest.size() && (rest[b] == ' ' || rest[b] == '\t')) ++b;
  size_t e = b;
  while (e < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[e])) || rest[e] == '-' || rest[e] == '.' ||
                             rest[e] == ',' || rest[e] == '$' || rest[e] == '+'))
    ++e;
  std::string n = normalize_number(rest.substr(b, e - b));
  if (n.empty()) return std::nullopt;
  return n;
}

std::vector<EvalSample> load_arith(const std::filesystem::path& jsonl, int64_t limit) {
  std::istringstream in(read_task_text(jsonl, "task file (--data)"));
  std::vector<EvalSample> out;
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}:{}: not JSON: {}", jsonl.string(), lineno, e.what());
    }
    FDLLM_CHECK_ARG(j.is_object() && j.contains("question") && j["question"].is_string() && j.contains("answer") &&
                        j["answer"].is_string(),
                    "{}:{}: expected an object with string fields \"question\" and \"answer\"", jsonl.string(), lineno);
    auto gold = extract_hash_answer(j["answer"].get<std::string>());
    FDLLM_CHECK_ARG(gold.has_value(), "{}:{}: the answer has no \"#### <number>\" line", jsonl.string(), lineno);
    EvalSample s;
    s.index = static_cast<int64_t>(out.size());
    s.id = fmt::format("arith/{}", s.index);
    s.prompt = j["question"].get<std::string>();
    s.gold = *gold;
    s.chat = true;
    out.push_back(std::move(s));
    if (limit > 0 && static_cast<int64_t>(out.size()) >= limit) break;
  }
  FDLLM_CHECK_ARG(!out.empty(), "task file '{}' holds no records", jsonl.string());
  return out;
}

Score score_arith(std::string_view output, const std::string& gold) {
  Score s;
  if (auto a = extract_hash_answer(output)) {
    s.extracted = *a;
    s.correct = *a == gold;
  }
  s.metrics.push_back({"exact_match", s.extracted, s.correct});
  return s;
}

std::pair<double, double> wilson_interval(int64_t correct, int64_t total) {
  if (total <= 0) return {0.0, 0.0};
  const double z = 1.959963984540054, n = static_cast<double>(total), p = static_cast<double>(correct) / n;
  const double denom = 1.0 + z * z / n;
  const double centre = (p + z * z / (2 * n)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

bool chat_by_model_path(std::string_view model_path) {
  std::string lower(model_path);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("instruct") != std::string::npos;
}

}  // namespace flashdllm::eval
