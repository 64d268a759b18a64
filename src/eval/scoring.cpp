#include "eval/scoring.h"

#include <algorithm>

namespace flashdllm::eval {

namespace {

bool is_py_space(unsigned char c) {  // str.strip() whitespace, ASCII part
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

std::string py_strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_py_space(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && is_py_space(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  if (from.empty()) return s;
  std::string out;
  size_t p = 0;
  while (true) {
    const size_t q = s.find(from, p);
    if (q == std::string::npos) break;
    out.append(s, p, q - p);
    out += to;
    p = q + from.size();
  }
  out.append(s, p, std::string::npos);
  return out;
}

/// Bytes of the UTF-8 code point starting at s[i] (1 for invalid lead bytes), clipped to the end.
size_t utf8_len(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
  return std::min(n, s.size() - i);
}

/// re.sub(r"(OPEN)(.*?)(\})", r"\2", s) (lazy) or with (.*) (greedy): OPEN is a literal; the
/// content never spans a newline.
std::string unwrap(std::string_view s, std::string_view open, bool greedy) {
  std::string out;
  size_t p = 0;
  while (p < s.size()) {
    if (s.substr(p, open.size()) == open) {
      const size_t body = p + open.size();
      size_t line_end = s.find('\n', body);
      if (line_end == std::string_view::npos) line_end = s.size();
      size_t close = std::string_view::npos;
      if (greedy) {
        const size_t q = s.substr(body, line_end - body).rfind('}');
        if (q != std::string_view::npos) close = body + q;
      } else {
        const size_t q = s.substr(body, line_end - body).find('}');
        if (q != std::string_view::npos) close = body + q;
      }
      if (close != std::string_view::npos) {
        out.append(s.substr(body, close - body));
        p = close + 1;
        continue;
      }
    }
    out += s[p++];
  }
  return out;
}

}  // namespace

std::string truncate_at_stops(std::string_view text, const std::vector<std::string>& stops) {
  std::string_view t = text;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t at = t.find(s);
    if (at != std::string_view::npos) t = t.substr(0, at);
  }
  return std::string(t);
}

std::optional<std::string> gsm8k_strict_extract(std::string_view r) {
  auto cls = [](char c) { return (c >= '0' && c <= '9') || c == '.' || c == ','; };
  for (size_t p = r.find("#### "); p != std::string_view::npos; p = r.find("#### ", p + 1)) {
    size_t q = p + 5;
    const size_t start = q;
    if (q < r.size() && r[q] == '-') ++q;
    size_t e = q;
    while (e < r.size() && cls(r[e])) ++e;
    if (e > q) return py_strip(r.substr(start, e - start));
  }
  return std::nullopt;
}

std::optional<std::string> gsm8k_flexible_extract(std::string_view r) {
  auto cls = [](char c) { return (c >= '0' && c <= '9') || c == '.' || c == ',' || c == '$'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  auto run = [&](size_t from, auto pred) {
    size_t e = from;
    while (e < r.size() && pred(r[e])) ++e;
    return e - from;
  };
  std::optional<std::string> last;
  size_t p = 0;
  while (p < r.size()) {
    size_t len = 0;
    // Alternative 1: -?[$0-9.,]{2,}
    if (r[p] == '-' && run(p + 1, cls) >= 2) len = 1 + run(p + 1, cls);
    else if (run(p, cls) >= 2) len = run(p, cls);
    // Alternative 2: -?[0-9]+
    else if (r[p] == '-' && run(p + 1, digit) >= 1) len = 1 + run(p + 1, digit);
    else if (run(p, digit) >= 1) len = run(p, digit);
    if (len > 0) {
      last = py_strip(r.substr(p, len));
      p += len;
    } else {
      ++p;
    }
  }
  return last;
}

std::string gsm8k_exact_match_normalize(std::string_view s) {
  std::string t;
  for (char c : s)
    if (c != ',' && c != '$') t += c;
  const size_t at = t.rfind("#### ");
  if (at != std::string::npos) t.erase(0, at + 5);
  if (!t.empty() && t.back() == '.')
    t.pop_back();
  else if (t.size() >= 2 && t[t.size() - 1] == '\n' && t[t.size() - 2] == '.')
    t.erase(t.size() - 2, 1);
  for (char& c : t)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return t;
}

std::optional<std::string> last_boxed_only_string(std::string_view s) {
  const size_t sp = s.rfind("\\boxed ");
  if (sp != std::string_view::npos) {
    std::string_view rest = s.substr(sp + 7);
    std::string b = "\\boxed ";
    b.append(rest.substr(0, rest.find('$')));
    return b;
  }
  size_t idx = s.rfind("\\boxed");
  if (idx == std::string_view::npos) idx = s.rfind("\\fbox");
  if (idx == std::string_view::npos) return std::nullopt;
  int open = 0;
  for (size_t i = idx; i < s.size(); ++i) {
    if (s[i] == '{') ++open;
    if (s[i] == '}') {
      --open;
      if (open == 0) return std::string(s.substr(idx, i + 1 - idx));
    }
  }
  return std::nullopt;
}

std::optional<std::string> remove_boxed(std::string_view s) {
  if (s.find("\\boxed ") != std::string_view::npos) {
    if (s.substr(0, 7) != "\\boxed ") return std::nullopt;
    return std::string(s.substr(7));
  }
  if (s.substr(0, 7) != "\\boxed{" || s.size() < 8 || s.back() != '}') return std::nullopt;
  return std::string(s.substr(7, s.size() - 8));
}

std::string minerva_unnormalized_answer(std::string_view text_in) {
  const std::string text = std::string(text_in) + "I hope it is correct.";
  const std::string_view prefix = "Final Answer: The final answer is";
  const std::string_view tail = " I hope it is correct";
  for (size_t p = text.find(prefix); p != std::string::npos; p = text.find(prefix, p + 1)) {
    const size_t q = p + prefix.size();
    // (.*?). I hope it is correct.  -- lazy group, then any char, the words, any char; no newlines.
    for (size_t g = q; g < text.size() && text[g] != '\n'; ++g) {
      const size_t t0 = g + 1;
      if (t0 + tail.size() < text.size() && text.compare(t0, tail.size(), tail) == 0 &&
          text[t0 + tail.size()] != '\n')
        return py_strip(std::string_view(text).substr(q, g - q));
    }
  }
  return "[invalidanswer]";
}

std::string minerva_normalize(std::string_view answer) {
  std::string s(answer);
  const size_t eq = s.rfind('=');
  if (eq != std::string::npos) s.erase(0, eq + 1);
  static const std::pair<const char*, const char*> kSubstitutions[] = {
      {"an ", ""},          {"a ", ""},   {".$", "$"},    {"\\$", ""},
      {"\\ ", ""},          {" ", ""},    {"mbox", "text"}, {",\\text{and}", ","},
      {"\\text{and}", ","}, {"\\text{m}", "\\text{}"},
  };
  for (const auto& [from, to] : kSubstitutions) s = replace_all(s, from, to);
  static const char* kRemoved[] = {
      "square", "ways",     "integers",  "dollars", "mph",       "inches",          "ft",
      "hours",  "km",       "units",     "\\ldots", "sue",       "points",          "feet",
      "minutes", "digits",  "cents",     "degrees", "cm",        "gm",              "pounds",
      "meters", "meals",    "edges",     "students", "childrentickets", "multiples", "\\text{s}",
      "\\text{.}", "\\text{\ns}", "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}",
      "^\\circ", "^{\\circ}", "\\;",     ",\\!",    "{,}",       "\"",              "\\dots",
  };
  for (const char* r : kRemoved) s = replace_all(s, r, "");

  // re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s): per line, the first $...$ replaces the line's rest.
  {
    std::string out;
    size_t p = 0;
    while (p < s.size()) {
      size_t line_end = s.find('\n', p);
      if (line_end == std::string::npos) line_end = s.size();
      const size_t d1 = s.find('$', p);
      if (d1 != std::string::npos && d1 < line_end) {
        const size_t d2 = s.find('$', d1 + 1);
        if (d2 != std::string::npos && d2 < line_end) {
          out += '$';
          out.append(s, d1 + 1, d2 - d1 - 1);
          out += '$';
          p = line_end;
          continue;
        }
      }
      out += s[p++];
    }
    s = std::move(out);
  }
  s = unwrap(s, "\\text{", false);
  s = unwrap(s, "\\textbf{", false);
  s = unwrap(s, "\\overline{", false);
  s = unwrap(s, "\\boxed{", true);

  // re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}", s)
  {
    std::string out;
    size_t p = 0;
    while (p < s.size()) {
      if (s.compare(p, 4, "frac") == 0 && p + 4 < s.size() && s[p + 4] != '{') {
        const size_t a = p + 4, la = utf8_len(s, a);
        if (a + la < s.size() && s[a + la] != '\n') {
          const size_t b = a + la, lb = utf8_len(s, b);
          out += "frac{";
          out.append(s, a, la);
          out += "}{";
          out.append(s, b, lb);
          out += '}';
          p = b + lb;
          continue;
        }
      }
      out += s[p++];
    }
    s = std::move(out);
  }
  // re.sub(r"(sqrt)([^{])", r"sqrt{\2}", s)
  {
    std::string out;
    size_t p = 0;
    while (p < s.size()) {
      if (s.compare(p, 4, "sqrt") == 0 && p + 4 < s.size() && s[p + 4] != '{') {
        const size_t a = p + 4, la = utf8_len(s, a);
        out += "sqrt{";
        out.append(s, a, la);
        out += '}';
        p = a + la;
        continue;
      }
      out += s[p++];
    }
    s = std::move(out);
  }
  s.erase(std::remove(s.begin(), s.end(), '$'), s.end());
  std::string no_commas;
  for (char c : s)
    if (c != ',') no_commas += c;
  if (!no_commas.empty() && std::all_of(no_commas.begin(), no_commas.end(), [](char c) { return c >= '0' && c <= '9'; }))
    s = no_commas;
  return s;
}

}  // namespace flashdllm::eval
