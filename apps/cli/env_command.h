// `flashdllm env`: lists the environment variables the command reads (env_registry.h).
#pragma once

#include <CLI/CLI.hpp>

namespace flashdllm::cli {

/// Registers the `env` subcommand on `app`; it prints env_listing() and exits 0.
void add_env_subcommand(CLI::App& app);

}  // namespace flashdllm::cli
