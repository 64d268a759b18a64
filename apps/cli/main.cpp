// flashdllm command-line tool: thin layer over the engine (include/flashdllm/engine.h). One file per
// subcommand, each with its flags (add_<name>_subcommand) and its run function:
//   flashdllm generate [-m DIR] -p TEXT ...     generate text (or ids); Flash-Cache by default (generate.cpp)
//   flashdllm info [-m DIR] [--check-weights]    print config, parameter count, dtype, memory need (below)
//   flashdllm eval --task arith ...              accuracy, NFE, tokens/s on a task (eval.cpp, docs/eval.md)
//   flashdllm bench --methods ... --sweep ...    sweeps of decoding settings and batch sizes (bench.cpp, docs/bench.md)
//   flashdllm serve [-m DIR] [--port N]          OpenAI-compatible server (serve.cpp, docs/serving.md)
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "backend/backend.h"
#include "bench.h"
#include "core/log.h"
#include "env_command.h"
#include "env_registry.h"
#include "eval.h"
#include "flashdllm/engine.h"
#include "generate.h"
#include "model/model.h"
#include "model/model_info.h"
#include "options.h"
#include "serve.h"

namespace {

using flashdllm::Error;
using flashdllm::ErrorCode;
using flashdllm::cli::add_common;
using flashdllm::cli::CommonArgs;

/// `info`: config.json, the safetensors headers and the tokenizer files only (no weights are read, so
/// an 8B checkpoint answers at once); `--check-weights` then scans every tensor for NaN / Inf.
int run_info(const CommonArgs& ca, bool check_weights) {
  if (ca.load_format != "auto" && ca.load_format != "dummy")
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--load-format must be 'auto' or 'dummy', got '{}'", ca.load_format));
  const bool dummy = ca.load_format == "dummy";
  if (dummy && check_weights)
    throw Error(ErrorCode::kInvalidArgument, "--check-weights needs a checkpoint (not --load-format dummy)");
  flashdllm::ModelFacts facts = flashdllm::inspect_checkpoint(ca.model_dir, dummy);
  facts.precision = flashdllm::cli::precision_of(ca);
  // --tensor-parallel: the sizes it splits must divide by it, as loading checks (it was ignored).
  flashdllm::TensorParallel tp;
  tp.world = ca.tensor_parallel;
  flashdllm::model_shard(facts.config, tp);
  const auto backend = flashdllm::make_backend(ca.device, ca.threads, 0, 1, flashdllm::cli::env_settings().backend);
  std::cout << flashdllm::describe_model(facts, *backend, ca.tensor_parallel);
  if (!check_weights) return 0;
  const flashdllm::Checkpoint ckpt = flashdllm::Checkpoint::open(ca.model_dir);
  const auto bad = flashdllm::find_non_finite_weights(ckpt);
  for (const auto& t : bad)
    std::cout << fmt::format("non-finite weights: {}: tensor '{}': {} NaN, {} Inf (first at element {})\n", t.file,
                             t.name, t.nan, t.inf, t.first_index);
  if (bad.empty()) std::cout << fmt::format("weights           all finite ({} tensors checked)\n", ckpt.names().size());
  return bad.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flashdllm: fast inference for masked diffusion language models (LLaDA, Dream, LLaDA-MoE)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("flashdllm ") + FLASHDLLM_VERSION);
  app.footer("Backend options come from FLASHDLLM_* environment variables: `flashdllm env` lists them.");
  flashdllm::cli::add_env_subcommand(app);
  CommonArgs ca;
  flashdllm::cli::GenerateArgs ga;
  CLI::App* gen = nullptr;
  flashdllm::cli::add_generate_subcommand(app, ca, ga, gen);

  flashdllm::cli::EvalArgs ea;
  CLI::App* evl = nullptr;
  flashdllm::cli::add_eval_subcommand(app, ca, ea, evl);

  flashdllm::cli::BenchArgs ba;
  CLI::App* bch = nullptr;
  flashdllm::cli::add_bench_subcommand(app, ca, ba, bch);
  for (int i = 0; i < argc; ++i)
    ba.command += (i ? " " : "") + flashdllm::cli::shell_quote(i == 0 ? std::string("flashdllm") : argv[i]);

  flashdllm::cli::ServeArgs sa;
  CLI::App* srv = nullptr;
  flashdllm::cli::add_serve_subcommand(app, ca, sa, srv);

  CLI::App* info =
      app.add_subcommand("info", "print config, parameter count, dtype and memory need (reads no weights)");
  add_common(info, ca);
  bool check_weights = false;
  info->add_flag("--check-weights", check_weights,
                 "also read every weight and name the tensors holding NaN / Inf (exit 1)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the parse error
    return rc == 0 ? 0 : 2;      // every command-line error exits 2, as bad parameter values do
  }
  flashdllm::logger().set_level(ca.verbose ? spdlog::level::info : spdlog::level::warn);
  try {
    if (*gen) return flashdllm::cli::run_generate(ca, ga);
    if (*info) return run_info(ca, check_weights);
    if (*evl) return flashdllm::cli::run_eval(ca, ea);
    if (*bch) return flashdllm::cli::run_bench(ca, ba);
    if (*srv) return flashdllm::cli::run_serve(ca, sa);
  } catch (const Error& e) {
    std::fprintf(stderr, "flashdllm: %s: %s\n", flashdllm::error_code_name(e.code()), e.what());
    return e.code() == ErrorCode::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashdllm: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
