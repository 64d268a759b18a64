#include "eval/tasks.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cmath>
#include <fstream>

#include "core/check.h"

namespace flashdllm::eval {

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
  std::ifstream in(jsonl);
  FDLLM_CHECK(in.good(), ErrorCode::kIo, "cannot read task file '{}'", jsonl.string());
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
    out.push_back({fmt::format("arith/{}", out.size()), j["question"].get<std::string>(), *gold, true});
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

}  // namespace flashdllm::eval
