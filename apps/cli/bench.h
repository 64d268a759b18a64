// `flashdllm bench`: sweeps of decoding settings and batch sizes over a task or a timing-only
// workload (src/eval/bench.h), medians over repeats, summary files in --out (docs/bench.md).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "options.h"

namespace flashdllm::cli {

struct BenchArgs {
  std::string task = "arith";
  std::string data;
  int64_t limit = 0;
  bool timing_only = false;
  std::string methods = "none,dual,flash,flash+verify";
  std::vector<std::string> sweeps;
  std::string batches = "16";
  int64_t repeats = 3;
  int64_t warmup = 1;
  std::string grid;
  std::string out_dir;
  std::string baseline_method = "none";
  std::string table_setting = "threshold=0.9,gamma=0.8,track_num=4";
  std::string fresh_engine = "auto";
  bool chat = false, raw = false, dry_run = false, plot = false;
  std::string python = "python3";
  double code_timeout = 3.0;
  int code_jobs = 0;
  std::string command;
  DecodeArgs dec;
  CLI::App* app = nullptr;
};

void add_bench_subcommand(CLI::App& app, CommonArgs& ca, BenchArgs& ba, CLI::App*& bch);
int run_bench(const CommonArgs& ca, BenchArgs& ba);
/// `s` quoted for a POSIX shell where it needs quoting (the recorded command line).
std::string shell_quote(const std::string& s);

}  // namespace flashdllm::cli
