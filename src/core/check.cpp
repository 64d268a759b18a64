#include "core/check.h"

namespace flashdllm {

const char* error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kInvalidCheckpoint: return "invalid checkpoint";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kOutOfMemory: return "out of memory";
    case ErrorCode::kDevice: return "device error";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kUnavailable: return "unavailable";
  }
  return "unknown error";
}

void throw_error(ErrorCode code, const std::string& message) { throw Error(code, message); }

void throw_error(ErrorCode code, const std::string& message, const char* field) { throw Error(code, message, field); }

void throw_internal(const char* expr, const char* file, int line, const std::string& detail) {
  std::string msg = fmt::format("internal check failed: {} ({}:{})", expr, file, line);
  if (!detail.empty()) msg += ": " + detail;
  throw Error(ErrorCode::kInternal, msg);
}

}  // namespace flashdllm
