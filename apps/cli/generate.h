// `flashdllm generate`: prompts in (text, a file of lines, or token ids), answers out (text or ids,
// or --json with ids, timings, NFE and the engine's counters), a live denoising view on a terminal.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "flashdllm/engine.h"
#include "options.h"

namespace flashdllm::cli {

struct GenerateArgs {
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::string prompt_file;
  bool chat = false, raw = false, json = false, no_live = false;
  DecodeArgs dec;
  GenerateOptions go;
};

void add_generate_subcommand(CLI::App& app, CommonArgs& ca, GenerateArgs& ga, CLI::App*& cmd);
/// Runs `generate`; the exit code: 0, or 1 when a request failed (its answer is missing, the others'
/// are printed). Throws Error for bad arguments, files and checkpoints.
int run_generate(const CommonArgs& ca, GenerateArgs& ga);

}  // namespace flashdllm::cli
