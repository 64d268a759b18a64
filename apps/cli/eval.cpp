#include "eval.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "eval/progress.h"
#include "eval/runner.h"
#include "eval/sandbox.h"
#include "eval/tasks.h"

namespace flashdllm::cli {
namespace {

/// The default method label of a decoding setting (the column of the paper's Table 1); `sampler`:
/// the full-recompute sampler cache none runs (effective_sampler: Dream's for a Dream checkpoint).
std::string eval_method_label(const flashdllm::GenerateOptions& go, flashdllm::Sampler sampler) {
  using flashdllm::CacheMode;
  const flashdllm::DecodeSettings& d = go.decode;
  const std::string none = sampler == flashdllm::Sampler::kDream
                               ? fmt::format("Dream sampler (no cache, alg {})", flashdllm::dream_alg_name(d.dream_alg))
                               : "LLaDA (no cache)";
  std::string m = d.cache == CacheMode::kNone     ? none
                  : d.cache == CacheMode::kPrefix ? "Fast-dLLM prefix cache"
                  : d.cache == CacheMode::kDual   ? "Fast-dLLM dual cache"
                                                  : "Flash-Cache";
  if (d.cache == CacheMode::kFlash) {
    if (d.verify)
      m += fmt::format(" + Verify (gamma {}, {}{})", d.gamma, flashdllm::verify_rule_name(d.verify_rule),
                       d.verify_kept == flashdllm::VerifyKept::kCommits ? ", kept: commits" : "");
    m += fmt::format(", track {} mask {}", d.track_num, d.mask_num);
  }
  if (const auto t = flashdllm::effective_threshold(d, go.sampling))
    m += fmt::format(", threshold {}", *t);
  else if (d.cache != CacheMode::kFlash)
    m += fmt::format(", {} steps", flashdllm::option_text(go, "steps"));
  return m;
}

/// Writes `text` to `p` atomically: a temporary file beside it, then a rename, so a failed or
/// interrupted run never leaves a partial file under the final name.
void write_file(const std::filesystem::path& p, const std::string& text) {
  const std::filesystem::path tmp = p.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw Error(ErrorCode::kIo, fmt::format("cannot write '{}'", tmp.string()));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, p, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw Error(ErrorCode::kIo, fmt::format("cannot write '{}': {}", p.string(), ec.message()));
  }
}

/// Checks before a long run that `dir` exists or can be made and that files can be created in it
/// (and that none of `names` is a directory), so the run does not fail at its end.
void check_output_dir(const std::filesystem::path& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw Error(ErrorCode::kIo, fmt::format("--out '{}' is not a directory that can be created ({})", dir.string(),
                                            ec ? ec.message() : "a file of that name exists"));
  for (const std::string& n : names)
    if (std::filesystem::is_directory(dir / n))
      throw Error(ErrorCode::kIo,
                  fmt::format("--out: '{}' is a directory, so results cannot be written there", (dir / n).string()));
  const std::filesystem::path probe = dir / ".flashdllm-write-check";
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    f << "ok";
    if (!f) throw Error(ErrorCode::kIo, fmt::format("--out '{}' is not writable", dir.string()));
  }
  std::filesystem::remove(probe, ec);
}

/// --dry-run: the built prompts as JSON lines (prompts.jsonl in --out, else stdout); exit code 0.
int write_prompts(const EvalArgs& ea, const eval::TaskInfo& info, const std::vector<eval::EvalSample>& samples) {
  std::string lines;
  for (const auto& s : samples)
    lines += nlohmann::json({{"id", s.id}, {"prompt", s.prompt}, {"gold", s.gold}, {"until", s.until}}).dump() + "\n";
  if (ea.out_dir.empty())
    std::cout << lines;
  else
    write_file(std::filesystem::path(ea.out_dir) / "prompts.jsonl", lines);
  std::fprintf(stderr, "[flashdllm] %s: %zu prompts built (%d-shot)\n", info.name.c_str(), samples.size(),
               info.num_fewshot);
  return 0;
}

/// --baseline's summary.json (null when not given), checked against the task before the model loads.
nlohmann::json read_baseline(const EvalArgs& ea) {
  nlohmann::json baseline;
  if (ea.baseline.empty()) return baseline;
  std::ifstream in(ea.baseline);
  if (!in) throw Error(ErrorCode::kIo, fmt::format("cannot read --baseline '{}'", ea.baseline));
  try {
    in >> baseline;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--baseline '{}' is not JSON: {}", ea.baseline, e.what()));
  }
  eval::EvalSummary probe;
  probe.task = ea.task;
  eval::apply_baseline(probe, baseline, ea.baseline);
  return baseline;
}

}  // namespace

int run_eval(const CommonArgs& ca, EvalArgs& ea) {
  namespace ev = flashdllm::eval;
  namespace fs = std::filesystem;
  if (ea.chat && ea.raw) throw Error(ErrorCode::kInvalidArgument, "--chat and --raw exclude each other");
  const ev::TaskInfo& info = ev::task_info(ea.task);
  const std::string data = ea.data.empty() ? std::string(FLASHDLLM_DATA_DIR) + "/" + info.default_data : ea.data;
  ev::LoadOptions lo;
  lo.limit = ea.limit;
  lo.fewshot_data = ea.fewshot_data;
  lo.fewshot_seed = ea.fewshot_seed;
  lo.fewshot_processes = ea.fewshot_processes;
  if (ea.batch < 1) throw Error(ErrorCode::kInvalidArgument, fmt::format("--batch must be >= 1, got {}", ea.batch));
  if (ea.chunk < 0)
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--chunk must be >= 0 (0 = all), got {}", ea.chunk));
  flashdllm::GenerateOptions go = ea.dec.options();  // refuse bad flags before any work
  // Their values too, before any work and with --dry-run (which loads no model): the checks that
  // need no config.json (params.cpp); generation checks the rest against the model.
  flashdllm::validate_without_model(go);
  std::vector<ev::EvalSample> samples = ev::load_task(ea.task, data, lo);
  // Every output path is checked before the run, so a long run cannot fail at its end.
  if (!ea.out_dir.empty())
    check_output_dir(ea.out_dir, ea.dry_run ? std::vector<std::string>{"prompts.jsonl"}
                                            : std::vector<std::string>{"samples.jsonl", "summary.json", "summary.md"});

  if (ea.dry_run) return write_prompts(ea, info, samples);  // prompts only: no model is loaded

  std::unique_ptr<ev::PythonSandbox> sandbox;  // before the model: a missing interpreter fails fast
  if (info.code) {
    ev::SandboxOptions so;
    so.python = ea.python;
    so.timeout_s = ea.code_timeout;
    so.memory_bytes = static_cast<uint64_t>(std::max<int64_t>(ea.code_memory_mb, 0)) << 20;
    so.jobs = ea.code_jobs;
    sandbox = std::make_unique<ev::PythonSandbox>(so);
  }
  const nlohmann::json baseline = read_baseline(ea);

  auto engine = load_engine(ca);
  ea.dec.fit_to_model(go, engine->config());
  const bool flash = go.decode.cache == flashdllm::CacheMode::kFlash;
  if (flash && ea.app->get_option("--slots")->count() == 0)
    go.decode.n_slots = ea.batch;  // --batch = slots, as lm-eval's batch_size
  flashdllm::validate(go, engine->config());
  const flashdllm::Sampler sampler = flashdllm::effective_sampler(go.decode, engine->config());
  // Chat template: --chat/--raw; otherwise the task's rule (arith: the model's template; benchmarks:
  // Flash-dLLM's wrapper, which templates only model paths containing "instruct").
  std::optional<bool> chat;
  if (ea.chat || ea.raw)
    chat = ea.chat;
  else if (ea.task == "arith")
    chat = engine->chat_by_default();
  else
    chat = ev::chat_by_model_path(ca.model_dir);

  ev::RunOptions run;
  run.requests_per_call = flash ? ea.chunk : ea.batch;
  run.chat = chat;
  ev::ProgressBar bar("eval " + ea.task, static_cast<int64_t>(samples.size()));
  bar.update(0);  // a line at the start; then redrawn / a plain line every 10 s (on every iteration's tick)
  run.progress = [&](const ev::EvalTick& t) {
    // A static batch (none/prefix/dual) finishes its requests together: show how far its canvases are.
    bar.update(t.done, t.done < t.total
                           ? fmt::format("call {}/{}: {:.0f}% decoded", t.call + 1, t.calls, 100 * t.decoded)
                           : std::string());
  };
  auto results = ev::generate_samples(*engine, samples, go, run);
  bar.finish();
  const std::string backend = engine->backend_name();
  const PeakMemory peak = peak_memory(*engine);
  engine.reset();  // free the model before forking sandboxed programs

  if (info.code) {
    ev::ProgressBar sbar("sandbox " + ea.task, static_cast<int64_t>(results.size()), "programs");
    ev::score_samples(ea.task, samples, results, sandbox.get(), [&](int64_t d, int64_t) { sbar.update(d); });
    sbar.finish();
  } else {
    ev::score_samples(ea.task, samples, results, nullptr);
  }

  ev::EvalSummary sum = ev::summarize(ea.task, results);
  sum.gen_length = go.sampling.gen_length;
  sum.method = ea.label.empty() ? eval_method_label(go, sampler) : ea.label;
  sum.peak_memory_bytes = peak.bytes;
  sum.peak_memory_kind = peak.kind;
  if (!ea.baseline.empty()) ev::apply_baseline(sum, baseline, ea.baseline);
  nlohmann::json summary = ev::to_json(sum);
  summary["model"] = ca.model_dir;
  summary["data"] = data;
  summary["backend"] = backend;
  summary["chat_template"] = *chat;
  summary["num_fewshot"] = info.num_fewshot;
  if (ea.task == "gsm8k") summary["fewshot"] = {{"seed", ea.fewshot_seed}, {"processes", ea.fewshot_processes}};
  if (sandbox)
    summary["sandbox"] = {{"python", sandbox->python_version()},
                          {"timeout_s", ea.code_timeout},
                          {"memory_mb", ea.code_memory_mb},
                          {"network_isolation", sandbox->network_isolation()}};
  summary["options"] = flashdllm::to_json(go);
  summary["options"]["batch"] = ea.batch;
  summary["options"]["requests_per_call"] = run.requests_per_call;
  const std::string md = ev::to_markdown({sum});
  if (!ea.out_dir.empty()) {
    std::string lines;
    for (const auto& r : results) lines += ev::to_json(r).dump() + "\n";
    write_file(fs::path(ea.out_dir) / "samples.jsonl", lines);
    write_file(fs::path(ea.out_dir) / "summary.json", summary.dump(2) + "\n");
    write_file(fs::path(ea.out_dir) / "summary.md", md);
  }
  std::cout << md;
  std::cout.flush();
  return 0;
}

void add_eval_subcommand(CLI::App& app, CommonArgs& ca, EvalArgs& ea, CLI::App*& evl) {
  std::string tasks;
  for (const auto& t : flashdllm::eval::task_infos()) tasks += (tasks.empty() ? "" : " | ") + t.name;
  evl = app.add_subcommand("eval", "evaluate a task: accuracy, NFE, tokens/iteration, tokens/s (docs/eval.md)");
  ea.app = evl;
  add_common(evl, ca);
  evl->add_option("--task", ea.task, tasks)->capture_default_str();
  evl->add_option("--data", ea.data, "test-split file (default: the task's file under data/ of this source tree)");
  evl->add_option("--fewshot-data", ea.fewshot_data,
                  "gsm8k: train split for the exemplars (default: gsm8k_train.jsonl beside --data)");
  evl->add_option("--fewshot-seed", ea.fewshot_seed, "gsm8k: lm-eval few-shot sampler seed")->capture_default_str();
  evl->add_option("--fewshot-processes", ea.fewshot_processes,
                  "gsm8k: lm-eval processes that built the prompts (each seeds its own sampler)")
      ->capture_default_str();
  evl->add_option("--limit", ea.limit, "evaluate only the first N samples (0 = all)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  evl->add_option("--batch", ea.batch,
                  "none/prefix/dual: requests per generate call; flash: slots (continuous batching) unless --slots")
      ->capture_default_str();
  evl->add_option("--chunk", ea.chunk, "flash: requests per generate call (0 = all at once, as Flash-dLLM)")
      ->capture_default_str();
  evl->add_flag("--chat", ea.chat,
                "apply the chat template (default: arith yes; benchmarks only for *instruct* models)");
  evl->add_flag("--raw", ea.raw, "do not apply the chat template");
  evl->add_flag("--dry-run", ea.dry_run, "build the prompts only (prompts.jsonl in --out, else stdout); no model");
  evl->add_option("--out", ea.out_dir, "write samples.jsonl, summary.json and summary.md here");
  evl->add_option("--baseline", ea.baseline, "summary.json of the no-cache greedy run: adds the speed-up");
  evl->add_option("--label", ea.label, "method name in the table (default: from the decoding options)");
  evl->add_option("--python", ea.python, "humaneval/mbpp: interpreter for the sandbox")->capture_default_str();
  evl->add_option("--code-timeout", ea.code_timeout, "humaneval/mbpp: seconds per program (code_eval's 3)")
      ->capture_default_str();
  evl->add_option("--code-memory-mb", ea.code_memory_mb, "humaneval/mbpp: address-space limit per program")
      ->capture_default_str();
  evl->add_option("--code-jobs", ea.code_jobs, "humaneval/mbpp: programs run in parallel (0 = all cores)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  add_decode_options(evl, ea.dec);
  // eval's slot count follows --batch unless --slots is given (the decode options' default is generate's).
  evl->get_option("--slots")
      ->description("flash: concurrent slots (continuous batching; default: --batch; 0 = as many as fit)")
      ->default_str("");
}

}  // namespace flashdllm::cli
