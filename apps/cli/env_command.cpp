// `flashdllm env` (env_command.h).
#include "env_command.h"

#include <iostream>

#include "env_registry.h"

namespace flashdllm::cli {

void add_env_subcommand(CLI::App& app) {
  CLI::App* env = app.add_subcommand(
      "env", "list the FLASHDLLM_* environment variables (backend options): type, default, current value, help");
  env->callback([] { std::cout << env_listing(); });
}

}  // namespace flashdllm::cli
