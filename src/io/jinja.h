// Jinja templates as Hugging Face transformers renders chat templates, on Google's minja (a
// header-only C++ Jinja engine for LLM chat templates; fetched by scripts/setup.sh, see
// docs/decisions.md). This file is the only place that knows minja: the rest of the engine sees
// JSON variables in and text out.
//
// Semantics: transformers' `apply_chat_template` compiles the template in a sandboxed jinja2
// environment with trim_blocks and lstrip_blocks (keep_trailing_newline off), adds the globals
// `raise_exception(message)` and `strftime_now(format)`, and renders with the variables it is
// given. The same here, with Python's semantics restored where minja's differ and a template can
// reach them through our inputs: the `trim` filter strips Python's (Unicode) whitespace,
// python_strip() below. Known differences that remain (none used by the templates we test): the
// `lower` / `upper` filters and string methods (`.strip()`, `.upper()`, ...) act on ASCII only.
//
// Cost bounds (minja has no limits of its own; a template comes from a checkpoint directory and
// the messages from a request): a template is at most kMaxTemplateBytes; parsing and rendering run
// on a thread with a kWorkerStackBytes stack (minja's parser and std::regex recurse per character
// or nesting level); during a render every variable lookup counts against kMaxLookups and checks
// that the render has used at most kMaxRenderStack of stack (a macro that calls itself forever
// ends with an Error, not a stack overflow), and `range()` yields at most kMaxRangeItems items per
// render in total. Loops over a long string (`'a' * 10**8`) are not bounded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace flashdllm::jinja {

inline constexpr size_t kMaxTemplateBytes = 32 * 1024;          ///< 2x the largest of llama.cpp's reference templates
inline constexpr size_t kWorkerStackBytes = size_t{256} << 20;  ///< reserved, committed as used
inline constexpr size_t kMaxRenderStack = size_t{4} << 20;
inline constexpr uint64_t kMaxLookups = 1'000'000;  ///< ~0.6 s of rendering
inline constexpr int64_t kMaxRangeItems = 100'000;

/// A parsed template; immutable, and render() may be called from several threads.
class Template {
 public:
  /// Parses `source`. `origin` names the template in error messages (e.g. "<dir>/tokenizer_config.json
  /// field 'chat_template'"). Throws Error(kInvalidCheckpoint) naming `origin` for a template over
  /// kMaxTemplateBytes or one minja cannot parse (with minja's row/column).
  static Template parse(std::string_view source, std::string origin);

  /// Renders with `variables` (a JSON object: each key a template variable). Throws
  /// Error(kInvalidArgument) naming the origin for any render error: an undefined operation,
  /// `raise_exception(...)` (the template rejecting its input, e.g. roles out of order), or a cost
  /// bound above. The message is cut to about 2 KB.
  std::string render(const nlohmann::ordered_json& variables) const;

  const std::string& origin() const noexcept;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

/// Python's str.strip() on UTF-8 text (what Jinja's `trim` filter does): strips code points for
/// which str.isspace() is true (bidi class WS, B or S, or category Zs: includes U+001C..U+001F,
/// U+0085, U+00A0, U+3000; not U+180E / U+200B / U+FEFF). Invalid bytes count as non-space.
std::string_view python_strip(std::string_view s);

}  // namespace flashdllm::jinja
