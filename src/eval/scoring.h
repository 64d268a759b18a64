// Answer extraction and normalisation of the lm-evaluation-harness 0.4.8 tasks (reference §E),
// re-implemented without regular-expression libraries. Each function states the Python expression
// whose result it reproduces; the regular expressions are matched with Python `re` semantics
// (leftmost match, greedy/lazy as written, '.' never matches '\n', non-overlapping scans).
//
// Deviations from lm-eval are named where they occur (docs/eval.md lists them all):
//  * MATH `exact_match` in lm-eval compares the two normalised strings with sympy
//    (`parse_latex` + `simplify(a - b) == 0`); we compare the normalised strings exactly.
//  * Python's str.isdigit() also accepts non-ASCII digits; minerva_normalize() checks ASCII only.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashdllm::eval {

/// Cuts `text` at the first occurrence of any stop string (the Flash-dLLM / LLaDA wrappers apply
/// lm-eval's `until` list this way: `for s in until: text = text.split(s)[0]`). Empty stop strings
/// are ignored.
std::string truncate_at_stops(std::string_view text, const std::vector<std::string>& stops);

/// GSM8K filter "strict-match": first match of `#### (\-?[0-9\.\,]+)`, group 1, stripped;
/// nullopt when there is none (lm-eval then uses "[invalid]").
std::optional<std::string> gsm8k_strict_extract(std::string_view response);

/// GSM8K filter "flexible-extract": `re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", response)`, the last
/// match (group_select -1), its first non-empty group, stripped; nullopt when nothing matches.
std::optional<std::string> gsm8k_flexible_extract(std::string_view response);

/// lm-eval `exact_match` preprocessing of the GSM8K task (both prediction and reference):
/// re.sub of ",", "\$", "(?s).*#### ", "\.$" (in this order) with "", then lower-case (ASCII).
std::string gsm8k_exact_match_normalize(std::string_view s);

/// `last_boxed_only_string` of lm-eval's minerva_math utils: the last "\boxed{...}" (balanced
/// braces) or "\fbox{...}"; when the text contains "\boxed " (with a space), "\boxed " + the text
/// after its last occurrence up to the next '$'. nullopt when there is none or braces do not close.
std::optional<std::string> last_boxed_only_string(std::string_view s);

/// `remove_boxed`: strips "\boxed " or "\boxed{" ... "}"; nullopt where lm-eval's assertions
/// would fail (e.g. an "\fbox{...}" string).
std::optional<std::string> remove_boxed(std::string_view s);

/// `get_unnormalized_answer`: the text between "Final Answer: The final answer is" and
/// ". I hope it is correct." (regex, '.' = any character but newline), stripped, searched in
/// text + "I hope it is correct."; "[invalidanswer]" when absent.
std::string minerva_unnormalized_answer(std::string_view text);

/// `normalize_final_answer` (Minerva, Lewkowycz et al. 2022, appendix D, as in lm-eval): last '='
/// split, substitutions, removed unit words, $...$ / \text{} / \textbf{} / \overline{} / \boxed{}
/// unwrapping, \fracab / \sqrta shorthand, '$' removal, "100,000" -> "100000".
std::string minerva_normalize(std::string_view answer);

}  // namespace flashdllm::eval
