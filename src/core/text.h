// Small text helpers for option values (CLI flags, sweep specs, grid files, params.h's text form).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashdllm {

/// `s` without leading and trailing spaces, tabs, CR and LF.
std::string trim(std::string_view s);
/// The finite number `text` spells (surrounding whitespace allowed), or nullopt.
std::optional<double> parse_double(std::string_view text);
/// The base-10 integer `text` spells (surrounding whitespace allowed, within int64), or nullopt.
std::optional<int64_t> parse_int(std::string_view text);

}  // namespace flashdllm
