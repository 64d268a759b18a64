// `flashdllm eval`: a task's test split through the engine, scored (accuracy, NFE, tokens/iteration,
// tokens/s; docs/eval.md), with samples.jsonl, summary.json and summary.md in --out.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "options.h"

namespace flashdllm::cli {

struct EvalArgs {
  std::string task = "arith";
  std::string data;
  std::string fewshot_data;
  uint64_t fewshot_seed = 1234;
  int64_t fewshot_processes = 1;
  int64_t limit = 0;
  int64_t batch = 16;
  int64_t chunk = 0;
  bool chat = false, raw = false, dry_run = false;
  std::string out_dir;
  std::string baseline;
  std::string label;
  std::string python = "python3";
  double code_timeout = 3.0;
  int64_t code_memory_mb = 4096;
  int code_jobs = 0;
  DecodeArgs dec;
  CLI::App* app = nullptr;
};

void add_eval_subcommand(CLI::App& app, CommonArgs& ca, EvalArgs& ea, CLI::App*& evl);
int run_eval(const CommonArgs& ca, EvalArgs& ea);

}  // namespace flashdllm::cli
