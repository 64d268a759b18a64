// `flashdllm serve`: the OpenAI-compatible server on the engine (src/server), its flags and its
// life: load, size the slot pool, listen, and on SIGINT / SIGTERM drain and exit 0.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "options.h"

namespace flashdllm::cli {

struct ServeArgs {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;
  int64_t max_model_len = 0;
  int64_t max_queue = 256;
  int64_t default_max_tokens = 128;
  int64_t max_body_mb = 8;
  int64_t max_buffered_body_mb = 256;
  int read_timeout_s = 10;
  int write_timeout_s = 30;
  int64_t http_threads = 0;
  int64_t max_connections = 8192;
  int keep_alive_timeout_s = 5;
  std::vector<std::string> allowed_hosts, cors_origins;
  std::string api_key;
  DecodeArgs dec;
};

void add_serve_subcommand(CLI::App& app, CommonArgs& ca, ServeArgs& sa, CLI::App*& cmd);
int run_serve(const CommonArgs& ca, ServeArgs& sa);

}  // namespace flashdllm::cli
