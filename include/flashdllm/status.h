// flashdllm public error vocabulary.
//
// The library never exits or aborts: every failure is reported to the caller as a
// flashdllm::Error exception carrying an ErrorCode and a message that names the file,
// field, tensor or parameter at fault. Only apps/ decides to exit; the server answers 4xx/5xx.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace flashdllm {

/// Category of a failure. Callers branch on this, humans read the message.
enum class ErrorCode {
  kInvalidArgument,    ///< a parameter or parameter combination the caller passed is impossible
  kInvalidCheckpoint,  ///< config.json / safetensors / tokenizer files are malformed or unsupported
  kIo,                 ///< a file could not be opened, mapped or read
  kUnsupported,        ///< valid input that this build or backend does not support
  kOutOfMemory,        ///< host or device memory could not be obtained
  kDevice,             ///< a CUDA / cuBLAS call failed
  kInternal,           ///< a broken invariant inside the library (a bug)
  kUnavailable,        ///< the engine cannot take the request now (queue full, stopping, not started)
};

/// Human-readable name of an ErrorCode ("invalid argument", ...).
const char* error_code_name(ErrorCode code) noexcept;

/// The one exception type thrown by the library.
class Error : public std::runtime_error {
 public:
  /// `field`: the parameter at fault by its canonical key (params.h's option keys and the other
  /// SamplingParams / DecodeSettings member names: "gen_length", "threshold", "temperature",
  /// "steps", "stop", "track_num", ...), set by the parameter validation (params.cpp); empty when
  /// the error is not about one parameter.
  Error(ErrorCode code, const std::string& message, std::string field = {})
      : std::runtime_error(message), code_(code), field_(std::move(field)) {}
  ErrorCode code() const noexcept { return code_; }
  /// The parameter at fault ("" when none): callers map it to their own names (the server to the
  /// OpenAI error object's `param`) instead of reading the message.
  const std::string& field() const noexcept { return field_; }

 private:
  ErrorCode code_;
  std::string field_;
};

}  // namespace flashdllm
