// Check macros: the single way the library validates input and invariants.
//
//   FDLLM_CHECK_ARG(cond, fmt, args...)   -> Error(kInvalidArgument)  for caller mistakes
//   FDLLM_CHECK_PARAM(cond, field, fmt, args...) -> Error(kInvalidArgument) whose field() is `field`,
//                                            the canonical key of the decoding parameter at fault
//   FDLLM_CHECK_CKPT(cond, fmt, args...)  -> Error(kInvalidCheckpoint) for bad model files
//   FDLLM_CHECK(cond, code, fmt, args...) -> Error(code)
//   FDLLM_ASSERT(cond)                    -> Error(kInternal) naming the statement, file, line
//
// Messages are formatted with fmt and should name the offending file / field / parameter.
#pragma once

#include <fmt/format.h>

#include "flashdllm/status.h"

namespace flashdllm {

[[noreturn]] void throw_error(ErrorCode code, const std::string& message);
/// Error(code, message, field): a failure about one parameter (Error::field).
[[noreturn]] void throw_error(ErrorCode code, const std::string& message, const char* field);
[[noreturn]] void throw_internal(const char* expr, const char* file, int line, const std::string& detail);

}  // namespace flashdllm

#define FDLLM_FAIL(code, ...) ::flashdllm::throw_error((code), ::fmt::format(__VA_ARGS__))

#define FDLLM_CHECK(cond, code, ...)       \
  do {                                     \
    if (!(cond)) FDLLM_FAIL(code, __VA_ARGS__); \
  } while (0)

#define FDLLM_CHECK_ARG(cond, ...) FDLLM_CHECK(cond, ::flashdllm::ErrorCode::kInvalidArgument, __VA_ARGS__)
/// A check of the decoding parameter `field` (a canonical key, e.g. "gen_length"): Error::field()
/// names it, so callers map it without reading the message.
#define FDLLM_CHECK_PARAM(cond, field, ...)                                                                    \
  do {                                                                                                         \
    if (!(cond))                                                                                               \
      ::flashdllm::throw_error(::flashdllm::ErrorCode::kInvalidArgument, ::fmt::format(__VA_ARGS__), (field)); \
  } while (0)
#define FDLLM_CHECK_CKPT(cond, ...) FDLLM_CHECK(cond, ::flashdllm::ErrorCode::kInvalidCheckpoint, __VA_ARGS__)

#define FDLLM_ASSERT(cond)                                                    \
  do {                                                                        \
    if (!(cond)) ::flashdllm::throw_internal(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define FDLLM_ASSERT_MSG(cond, ...)                                                                \
  do {                                                                                             \
    if (!(cond)) ::flashdllm::throw_internal(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
