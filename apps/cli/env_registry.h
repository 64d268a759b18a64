// The one place the FLASHDLLM_* environment variables are read (the way vLLM's envs.py lists its
// variables): a table of every variable with its type, default and help, and the readers that turn
// the environment into the typed options the library takes (BackendOptions, TensorParallelLaunch).
// The library never reads the environment; the command-line tools (flashdllm, bench/ tools) call
// env_settings() once and pass what it returns. `flashdllm env` prints the table with the current
// values (env_listing).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/comm.h"
#include "flashdllm/backend_options.h"

namespace flashdllm::cli {

/// What the environment sets.
struct EnvSettings {
  BackendOptions backend;
  TensorParallelLaunch launch;
  /// FLASHDLLM_COMMIT: the commit a report names (bench summaries, forward_bench), for a copied tree
  /// without .git; empty = ask git.
  std::string commit;
};

/// One variable: its name, its type as users write it ("bool", "int", "path", "auto|reference|..."),
/// the default in the same words, the help line, and how a set value changes EnvSettings (throws
/// Error(kInvalidArgument) naming the variable and the accepted values for anything else).
struct EnvVar {
  const char* name;
  const char* type;
  const char* default_value;
  const char* help;
  std::function<void(const std::string& value, EnvSettings& out)> apply;
};

/// Every variable, in the order `flashdllm env` lists them.
const std::vector<EnvVar>& env_registry();

/// EnvSettings from the environment: the defaults, then each set, non-empty variable of the table
/// applied (an empty value counts as unset). Validates the result (validate_backend_options,
/// validate_tensor_parallel_launch). Throws Error(kInvalidArgument) naming the variable at fault.
EnvSettings env_settings();

/// The table as `flashdllm env` prints it: per variable its name, type, default, current value
/// ("(unset)" when unset) and help.
std::string env_listing();

}  // namespace flashdllm::cli
