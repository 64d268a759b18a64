// flashdllm command-line tool: thin layer over the engine (include/flashdllm/engine.h).
//   flashdllm generate [-m DIR] -p TEXT ...     generate text (or ids); Flash-Cache by default
//   flashdllm info [-m DIR] [--check-weights]    print config, parameter count, dtype, memory need
//   flashdllm bench --methods ... --sweep ...    sweeps of decoding settings and batch sizes (docs/bench.md)
//   flashdllm serve [-m DIR] [--port N]          OpenAI-compatible server (docs/serving.md)
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "backend/backend.h"
#include "eval/bench.h"
#include "eval/progress.h"
#include "eval/runner.h"
#include "eval/sandbox.h"
#include "eval/tasks.h"
#include "flashdllm/engine.h"
#include "core/log.h"
#include "env_command.h"
#include "env_registry.h"
#include "denoise/flash_cache.h"
#include "live_view.h"
#include "options.h"
#include "serve.h"
#include "model/llada_config.h"
#include "model/llada_info.h"

namespace {

using flashdllm::Error;
using flashdllm::ErrorCode;
using flashdllm::cli::CommonArgs;
using flashdllm::cli::DecodeArgs;
using flashdllm::cli::PeakMemory;
using flashdllm::cli::add_common;
using flashdllm::cli::add_decode_options;
using flashdllm::cli::ids_to_string;
using flashdllm::cli::kNonNegativeInt;
using flashdllm::cli::load_engine;
using flashdllm::cli::parse_ids;
using flashdllm::cli::peak_memory;

struct GenerateArgs {
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_ids;
  std::string prompt_file;
  bool chat = false, raw = false, json = false, no_live = false;
  DecodeArgs dec;
  flashdllm::GenerateOptions go;
};

/// The --profile-ops table on stderr: per op kind, calls, total ms, mean µs and share of the call's
/// wall time; the remainder is host work between ops (planning, decisions) plus profiling overhead.
void print_op_profile(const std::vector<flashdllm::OpProfileEntry>& ops, double wall_seconds) {
  double sum = 0.0;
  std::fprintf(stderr, "[flashdllm] op profile (each op timed alone between synchronisations):\n");
  std::fprintf(stderr, "  %-28s %8s %11s %10s %7s\n", "op", "calls", "total ms", "mean us", "share");
  for (const auto& e : ops) {
    sum += e.seconds;
    std::fprintf(stderr, "  %-28s %8lld %11.2f %10.1f %6.1f%%\n", e.op.c_str(), static_cast<long long>(e.calls),
                 e.seconds * 1e3, e.calls > 0 ? e.seconds * 1e6 / static_cast<double>(e.calls) : 0.0,
                 wall_seconds > 0 ? 100.0 * e.seconds / wall_seconds : 0.0);
  }
  std::fprintf(stderr, "  %-28s %8s %11.2f %10s %6.1f%%\n", "outside ops (host)", "", (wall_seconds - sum) * 1e3, "",
               wall_seconds > 0 ? 100.0 * (wall_seconds - sum) / wall_seconds : 0.0);
}

// Requests that failed alone (GenerateResult::error): one stderr line each, numbered like the
// answers; exit code 1 when any did (the other answers are printed first).
int report_failures(const std::vector<flashdllm::GenerateResult>& results) {
  int failed = 0;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].finish_reason == flashdllm::FinishReason::kError) {
      std::fprintf(stderr, "flashdllm: request %zu of %zu failed: %s\n", i, results.size(), results[i].error.c_str());
      ++failed;
    }
  if (failed > 0 && results.size() > 1)
    std::fprintf(stderr, "flashdllm: %d of %zu requests failed; the others' answers are above\n", failed,
                 results.size());
  return failed > 0 ? 1 : 0;
}

int run_generate(const CommonArgs& ca, GenerateArgs& ga) {
  if (ga.chat && ga.raw) throw Error(ErrorCode::kInvalidArgument, "--chat and --raw exclude each other");
  ga.go = ga.dec.options();
  if (!ga.prompt_file.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(ga.prompt_file, ec))
      throw Error(ErrorCode::kIo, fmt::format("cannot read --prompt-file '{}': it is a directory", ga.prompt_file));
    std::ifstream in(ga.prompt_file, std::ios::binary);  // a stream: /dev/stdin and FIFOs work too
    if (!in)
      throw Error(ErrorCode::kIo,
                  fmt::format("cannot read --prompt-file '{}': {}", ga.prompt_file, std::strerror(errno)));
    int64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
      if (line.find('\0') != std::string::npos)
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("--prompt-file '{}': line {} holds a NUL byte (prompts are text)", ga.prompt_file, line_no));
      if (!line.empty()) ga.prompts.push_back(line);
    }
  }
  if (ga.prompts.empty() && ga.prompt_ids.empty())
    throw Error(ErrorCode::kInvalidArgument, "give a prompt with -p TEXT, --prompt-file FILE or --prompt-ids IDS");
  if ((ga.chat || ga.raw) && ga.prompts.empty())
    throw Error(ErrorCode::kInvalidArgument, "--chat / --raw apply to text prompts (-p, --prompt-file), not to --prompt-ids");

  auto engine = load_engine(ca);
  if (ga.chat && !engine->has_chat_template())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--chat: '{}' has no chat template (tokenizer_config.json); drop --chat", ca.model_dir));
  const bool chat = ga.raw ? false : (ga.chat ? true : engine->chat_by_default());
  std::vector<flashdllm::GenerateRequest> reqs;
  for (const std::string& p : ga.prompts) {
    flashdllm::GenerateRequest r;
    r.prompt = p;
    r.chat = chat;
    reqs.push_back(std::move(r));
  }
  for (const std::string& s : ga.prompt_ids) {
    flashdllm::GenerateRequest r;
    r.prompt_ids = parse_ids(s);
    reqs.push_back(std::move(r));
  }

  const bool live = !ga.no_live && !ga.json && reqs.size() == 1 && engine->has_tokenizer() &&
                    flashdllm::cli::is_tty(fileno(stderr));
  std::vector<int32_t> stops = {engine->config().eos_token_id};
  if (engine->eot_token_id() >= 0) stops.push_back(engine->eot_token_id());
  flashdllm::cli::LiveView view([&](const std::vector<int32_t>& ids) { return engine->decode(ids); },
                                engine->mask_token_id(), stops);
  // Several prompts: a progress bar (plain lines every 10 s when stderr is not a terminal).
  std::optional<flashdllm::eval::ProgressBar> bar;
  std::vector<bool> finished(reqs.size(), false);
  int64_t done = 0;
  if (reqs.size() > 1) {
    bar.emplace("generate", static_cast<int64_t>(reqs.size()), "requests");
    bar->update(0);
  }
  flashdllm::ProgressCallback progress = [&](const flashdllm::StepProgress& p) {
    if (live) view.update(p.request, *p.canvas, p.done);
    if (p.done && p.request < finished.size() && !finished[p.request]) {
      finished[p.request] = true;
      ++done;
    }
    if (bar) bar->update(done);
  };

  auto results = engine->generate(reqs, ga.go, progress);
  if (live) view.finish();
  if (bar) bar->finish();

  if (ga.json) {
    nlohmann::json j;
    j["model"] = ca.model_dir;
    j["backend"] = engine->backend_name();
    // Load time covers config, tokenizer, backend start-up, weights and RoPE tables; the rate is the
    // checkpoint's bytes over that time (no rate for --load-format dummy: nothing is read).
    j["load_format"] = ca.load_format;
    j["load_seconds"] = engine->load_seconds();
    j["weight_bytes"] = engine->weight_bytes();
    j["load_gb_per_s"] = engine->weight_bytes() > 0 && engine->load_seconds() > 0
                             ? nlohmann::json(static_cast<double>(engine->weight_bytes()) / engine->load_seconds() / 1e9)
                             : nlohmann::json();
    j["options"] = flashdllm::to_json(ga.go);
    nlohmann::json arr = nlohmann::json::array();
    for (size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      nlohmann::json e;
      if (i < ga.prompts.size()) e["prompt"] = ga.prompts[i];
      e["chat_template"] = r.chat_template;
      e["prompt_ids"] = r.prompt_ids;
      e["prompt_tokens"] = r.prompt_ids.size();
      e["canvas_ids"] = r.canvas_ids;
      e["output_ids"] = r.output_ids;
      if (engine->has_tokenizer()) e["text"] = r.text;
      e["stopped_at_eos"] = r.stopped_at_eos;
      e["finish_reason"] = flashdllm::finish_reason_name(r.finish_reason);
      if (!r.error.empty()) e["error"] = r.error;
      e["nfe"] = r.nfe;
      e["committed_tokens"] = r.committed_tokens;
      e["committed_tokens_reference"] = r.committed_tokens_reference;
      e["forward_passes"] = r.forward_passes;
      if (ga.go.decode.verify) {
        e["verify_candidates"] = r.verify_candidates;
        e["verify_accepted"] = r.verify_accepted;
      }
      e["tokens_per_iteration"] = r.nfe > 0 ? static_cast<double>(r.committed_tokens) / static_cast<double>(r.nfe) : 0.0;
      if (!r.call_kinds.empty()) e["call_kinds"] = r.call_kinds;
      e["generated_tokens"] = r.generated_tokens();  // answer + the ending EOS/EOT (request.h)
      e["seconds"] = r.seconds;
      e["latency_seconds"] = r.latency_seconds;
      e["tokens_per_second"] = r.seconds > 0 ? static_cast<double>(r.generated_tokens()) / r.seconds : 0.0;
      arr.push_back(std::move(e));
    }
    j["results"] = std::move(arr);
    const PeakMemory peak = peak_memory(*engine);
    j["peak_memory_bytes"] = peak.bytes;
    j["peak_memory"] = peak.kind;
    // Iteration wall times in ms: the steady state (no admission) and the admissions (prefill rows,
    // the first one with the device's warm-up); ms per iteration in benchmarks is decode.median.
    const flashdllm::EngineMetrics m = engine->metrics();
    // With the host time by phase (IterationTimes::host_phases), as mean ms per iteration of the kind.
    auto times = [](const flashdllm::EngineMetrics::IterationTimes& t) {
      nlohmann::json phases = nlohmann::json::object();
      for (const auto& p : t.host_phases)
        phases[p.name] = t.count > 0 ? 1e3 * p.seconds / static_cast<double>(t.count) : 0.0;
      return nlohmann::json{{"count", t.count},
                            {"mean_ms", 1e3 * t.mean},
                            {"median_ms", 1e3 * t.median},
                            {"p10_ms", 1e3 * t.p10},
                            {"p90_ms", 1e3 * t.p90},
                            {"min_ms", 1e3 * t.min},
                            {"max_ms", 1e3 * t.max},
                            {"host_phase_ms", std::move(phases)}};
    };
    j["iterations"] = {{"decode", times(m.decode_iterations)}, {"admission", times(m.admission_iterations)}};
    // The forwards' layer loops: op by op, recorded into a CUDA graph, or replayed (Engine::GraphStats).
    const auto gs = engine->graph_stats();
    j["layer_loops"] = {
        {"direct", gs.direct}, {"captures", gs.captures}, {"replays", gs.replays}, {"failed", gs.failed}};
    if (ca.profile_ops) {
      nlohmann::json ops = nlohmann::json::array();
      for (const auto& e : engine->op_profile()) ops.push_back({{"op", e.op}, {"calls", e.calls}, {"seconds", e.seconds}});
      j["op_profile"] = std::move(ops);
    }
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return report_failures(results);
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (results.size() > 1) std::cout << "### " << i << "\n";
    if (engine->has_tokenizer() && i < ga.prompts.size())
      std::cout << r.text << "\n";
    else
      std::cout << ids_to_string(r.output_ids) << "\n";  // up to the EOS / EOT, as the text
  }
  std::cout.flush();  // answers first, then the timing line on stderr
  int64_t nfe = 0, toks = 0, cand = 0, acc = 0, passes = 0, empty_raw = 0, cut = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    nfe = std::max(nfe, r.nfe);
    toks += r.generated_tokens();
    cand += r.verify_candidates;
    acc += r.verify_accepted;
    passes = std::max(passes, r.forward_passes);
    if (i < ga.prompts.size() && r.output_ids.empty() && ga.raw && engine->has_chat_template()) ++empty_raw;
    cut += r.finish_reason == flashdllm::FinishReason::kLength ? 1 : 0;
  }
  if (cut > 0)
    std::fprintf(stderr,
                 "[flashdllm] %lld answer(s) filled the canvas without an end (finish_reason length): they may be cut "
                 "off; raise --gen-length (now %lld)\n",
                 static_cast<long long>(cut), static_cast<long long>(ga.go.sampling.gen_length));
  if (empty_raw > 0)
    std::fprintf(stderr,
                 "[flashdllm] %lld empty answer(s): this checkpoint is a chat model and --raw skipped its chat template "
                 "(drop --raw)\n",
                 static_cast<long long>(empty_raw));
  if (ga.go.decode.verify)
    std::fprintf(stderr, "[flashdllm] verify: %lld forward passes (main + verify) for NFE %lld, drafts accepted %lld of %lld\n",
                 static_cast<long long>(passes), static_cast<long long>(nfe), static_cast<long long>(acc),
                 static_cast<long long>(cand));
  const double sec = results.front().seconds;
  if (ca.profile_ops) print_op_profile(engine->op_profile(), sec);
  std::fprintf(stderr,
               "[flashdllm] %zu request(s), %lld tokens (with the ending EOS), NFE %lld, %.2f s, %.1f tokens/s (%s, "
               "%s; load %.2f s)\n",
               results.size(), static_cast<long long>(toks), static_cast<long long>(nfe), sec,
               sec > 0 ? static_cast<double>(toks) / sec : 0.0, flashdllm::cache_mode_name(ga.go.decode.cache),
               engine->backend_name().c_str(), engine->load_seconds());
  return report_failures(results);
}

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

/// The default method label of a decoding setting (the column of the paper's Table 1).
std::string eval_method_label(const flashdllm::GenerateOptions& go) {
  using flashdllm::CacheMode;
  const flashdllm::DecodeSettings& d = go.decode;
  std::string m = d.cache == CacheMode::kNone     ? "LLaDA (no cache)"
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
      throw Error(ErrorCode::kIo, fmt::format("--out: '{}' is a directory, so results cannot be written there",
                                              (dir / n).string()));
  const std::filesystem::path probe = dir / ".flashdllm-write-check";
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    f << "ok";
    if (!f) throw Error(ErrorCode::kIo, fmt::format("--out '{}' is not writable", dir.string()));
  }
  std::filesystem::remove(probe, ec);
}

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
  if (ea.chunk < 0) throw Error(ErrorCode::kInvalidArgument, fmt::format("--chunk must be >= 0 (0 = all), got {}", ea.chunk));
  flashdllm::GenerateOptions go = ea.dec.options();  // refuse bad flags before any work
  std::vector<ev::EvalSample> samples = ev::load_task(ea.task, data, lo);
  // Every output path is checked before the run, so a long run cannot fail at its end.
  if (!ea.out_dir.empty())
    check_output_dir(ea.out_dir, ea.dry_run ? std::vector<std::string>{"prompts.jsonl"}
                                            : std::vector<std::string>{"samples.jsonl", "summary.json", "summary.md"});

  if (ea.dry_run) {  // prompts only: no model is loaded
    std::string lines;
    for (const auto& s : samples)
      lines += nlohmann::json({{"id", s.id}, {"prompt", s.prompt}, {"gold", s.gold}, {"until", s.until}}).dump() + "\n";
    if (ea.out_dir.empty())
      std::cout << lines;
    else
      write_file(fs::path(ea.out_dir) / "prompts.jsonl", lines);
    std::fprintf(stderr, "[flashdllm] %s: %zu prompts built (%d-shot)\n", info.name.c_str(), samples.size(),
                 info.num_fewshot);
    return 0;
  }

  std::unique_ptr<ev::PythonSandbox> sandbox;  // before the model: a missing interpreter fails fast
  if (info.code) {
    ev::SandboxOptions so;
    so.python = ea.python;
    so.timeout_s = ea.code_timeout;
    so.memory_bytes = static_cast<uint64_t>(std::max<int64_t>(ea.code_memory_mb, 0)) << 20;
    so.jobs = ea.code_jobs;
    sandbox = std::make_unique<ev::PythonSandbox>(so);
  }
  nlohmann::json baseline;
  if (!ea.baseline.empty()) {
    std::ifstream in(ea.baseline);
    if (!in) throw Error(ErrorCode::kIo, fmt::format("cannot read --baseline '{}'", ea.baseline));
    try {
      in >> baseline;
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--baseline '{}' is not JSON: {}", ea.baseline, e.what()));
    }
    ev::EvalSummary probe;  // check the baseline before the model is loaded
    probe.task = ea.task;
    ev::apply_baseline(probe, baseline, ea.baseline);
  }

  auto engine = load_engine(ca);
  const bool flash = go.decode.cache == flashdllm::CacheMode::kFlash;
  if (flash && ea.app->get_option("--slots")->count() == 0) go.decode.n_slots = ea.batch;  // --batch = slots, as lm-eval's batch_size
  flashdllm::validate(go, engine->config());
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
  sum.method = ea.label.empty() ? eval_method_label(go) : ea.label;
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
  evl->add_option("--fewshot-data", ea.fewshot_data, "gsm8k: train split for the exemplars (default: gsm8k_train.jsonl beside --data)");
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
  evl->add_flag("--chat", ea.chat, "apply the chat template (default: arith yes; benchmarks only for *instruct* models)");
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
      ->capture_default_str();
  add_decode_options(evl, ea.dec);
  // eval's slot count follows --batch unless --slots is given (the decode options' default is generate's).
  evl->get_option("--slots")
      ->description("flash: concurrent slots (continuous batching; default: --batch; 0 = as many as fit)")
      ->default_str("");
}

// ---- bench: sweeps of decoding settings and batch sizes (docs/bench.md) -------------------------

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

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=.,/:+@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_bench(const CommonArgs& ca, BenchArgs& ba) {
  namespace ev = flashdllm::eval;
  namespace fs = std::filesystem;
  auto given = [&](const char* flag) { return ba.app->get_option(flag)->count() > 0; };
  if (ba.chat && ba.raw) throw Error(ErrorCode::kInvalidArgument, "--chat and --raw exclude each other");
  for (const char* f : {"--cache", "--verify", "--slots", "--preset"})
    if (given(f))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("bench: {} is set per point: use --methods (none, prefix, dual, flash, flash+verify) and "
                              "--batches (flash: slots); sweep the rest with --sweep",
                              f));
  if (ba.fresh_engine != "auto" && ba.fresh_engine != "yes" && ba.fresh_engine != "no")
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--fresh-engine must be auto, yes or no, got '{}'", ba.fresh_engine));

  const flashdllm::GenerateOptions base = ba.dec.options(/*one_mode=*/false);
  std::vector<ev::BenchGroup> groups;
  if (!ba.grid.empty()) {
    for (const char* f : {"--task", "--data", "--timing-only", "--methods", "--sweep", "--batches", "--warmup"})
      if (given(f))
        throw Error(ErrorCode::kInvalidArgument, fmt::format("{} cannot be combined with --grid: set it in the grid file", f));
    std::ifstream in(ba.grid);
    if (!in) throw Error(ErrorCode::kIo, fmt::format("cannot read --grid '{}'", ba.grid));
    nlohmann::ordered_json j;
    try {
      in >> j;
    } catch (const std::exception& e) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--grid '{}' is not JSON: {}", ba.grid, e.what()));
    }
    groups = ev::parse_grid(j, ba.grid);
    for (auto& g : groups) {  // --limit / --repeats on the command line override the file (smoke runs)
      if (given("--limit")) g.workload.limit = ba.limit;
      if (given("--repeats")) g.repeats = ba.repeats;
    }
  } else {
    ev::BenchGroup g;
    g.name = "cli";
    g.workload.task = ba.task;
    ev::task_info(ba.task);
    g.workload.data = ba.data;
    g.workload.limit = ba.limit;
    g.workload.timing_only = ba.timing_only;
    g.methods = ev::split_list(ba.methods);
    if (g.methods.empty()) throw Error(ErrorCode::kInvalidArgument, "--methods: no methods given");
    for (const std::string& s : ba.sweeps) g.sweeps.push_back(ev::parse_sweep(s));
    g.batches = ev::parse_positive_list(ba.batches, "--batches");
    if (ba.repeats < 1) throw Error(ErrorCode::kInvalidArgument, "--repeats must be >= 1");
    if (ba.warmup < 0) throw Error(ErrorCode::kInvalidArgument, "--warmup must be >= 0");
    g.repeats = ba.repeats;
    g.warmup = ba.warmup;
    groups.push_back(std::move(g));
  }
  const std::vector<ev::BenchPoint> points = ev::expand_grid(groups, base);
  std::vector<std::pair<std::string, std::string>> table_setting;
  for (const std::string& kv : ev::split_list(ba.table_setting)) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos)
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--table-setting: '{}' is not KEY=VALUE", kv));
    table_setting.emplace_back(flashdllm::canonical_option_key(kv.substr(0, eq)), kv.substr(eq + 1));
  }
  if (std::find(ev::bench_method_names().begin(), ev::bench_method_names().end(), ba.baseline_method) ==
      ev::bench_method_names().end())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--baseline-method: unknown method '{}'", ba.baseline_method));

  if (ba.dry_run) {
    for (const auto& p : points)
      std::cout << fmt::format("{}  {}  {} {}  batch {}  x{}  {}\n", p.id, p.group, p.workload.task,
                               p.workload.timing_only ? "timing-only" : "accuracy", p.batch, p.repeats, p.label());
    std::cout << fmt::format("{} points\n", points.size());
    return 0;
  }

  std::unique_ptr<ev::PythonSandbox> sandbox;
  for (const auto& p : points)
    if (!sandbox && !p.workload.timing_only && ev::task_info(p.workload.task).code) {
      ev::SandboxOptions so;
      so.python = ba.python;
      so.timeout_s = ba.code_timeout;
      so.jobs = ba.code_jobs;
      sandbox = std::make_unique<ev::PythonSandbox>(so);
    }
  const fs::path out = ba.out_dir;
  std::ofstream partial;
  if (!out.empty()) {
    fs::create_directories(out);
    partial.open(out / "results.jsonl", std::ios::binary | std::ios::trunc);
    if (!partial) throw Error(ErrorCode::kIo, fmt::format("cannot write '{}'", (out / "results.jsonl").string()));
  }

  ev::BenchRunOptions ro;
  ro.data_dir = FLASHDLLM_DATA_DIR;
  ro.model_dir = ca.model_dir;
  if (ba.chat || ba.raw) ro.chat = ba.chat;
  ro.fresh_engine = ba.fresh_engine == "yes" || (ba.fresh_engine == "auto" && ca.device != "cpu");
  ro.sandbox = sandbox.get();
  std::optional<ev::ProgressBar> bar;
  ro.progress = [&](int64_t done, int64_t total, const ev::BenchPoint& p, size_t i) {
    if (!bar) bar.emplace("bench", total, "requests");
    bar->update(done, fmt::format("{} {}/{} {} b{}", p.id, i + 1, points.size(), p.label(), p.batch));
  };
  ro.on_point = [&](const ev::PointResult& r) {
    if (partial.is_open()) partial << ev::point_to_json(r).dump() << "\n" << std::flush;
  };
  std::string backend;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<ev::PointResult> results = ev::run_bench([&] { return load_engine(ca); }, points, ro, &backend);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bar) bar->finish();
  partial.close();
  ev::finalize_results(results, ba.baseline_method, table_setting);
  nlohmann::ordered_json meta =
      ev::bench_meta(ba.command, fs::path(FLASHDLLM_DATA_DIR).parent_path(), backend, ca.model_dir);
  meta["hardware"]["load_average_end"] = ev::host_info()["load_average"];
  meta["wall_seconds"] = wall;
  meta["cpu_seconds"] = ev::process_cpu_seconds();
  meta["device"] = ca.device;
  meta["threads"] = ca.threads;
  meta["baseline_method"] = ba.baseline_method;
  meta["table_setting"] = ba.table_setting;
  if (!ba.grid.empty()) {
    std::ifstream in(ba.grid);
    meta["grid"] = nlohmann::ordered_json::parse(in);
  }
  const std::string md = ev::bench_markdown(meta, results);
  if (!out.empty()) ev::write_bench_outputs(out, meta, results);
  std::cout << md;
  std::cout.flush();
  if (ba.plot) {
    if (out.empty()) throw Error(ErrorCode::kInvalidArgument, "--plot needs --out (the plots are drawn from summary.json)");
    const fs::path script = fs::path(FLASHDLLM_DATA_DIR).parent_path() / "tools" / "plots" / "plot_bench.py";
    const std::string cmd = fmt::format("{} {} {} --out {}", shell_quote(ba.python), shell_quote(script.string()),
                                        shell_quote((out / "summary.json").string()), shell_quote(out.string()));
    const int rc = std::system(cmd.c_str());
    if (rc != 0) throw Error(ErrorCode::kIo, fmt::format("the plot step failed ({}): {}", rc, cmd));
  }
  return 0;
}

void add_bench_subcommand(CLI::App& app, CommonArgs& ca, BenchArgs& ba, CLI::App*& bch) {
  bch = app.add_subcommand("bench", "sweep decoding settings and batch sizes: accuracy, tokens/s, NFE, tokens/iteration, "
                                    "memory; medians over repeats (docs/bench.md)");
  ba.app = bch;
  add_common(bch, ca);
  bch->add_option("--grid", ba.grid, "grid file (JSON: defaults + groups, see docs/bench.md) instead of the flags below");
  bch->add_option("--task", ba.task, "task of the workload (as for eval)")->capture_default_str();
  bch->add_option("--data", ba.data, "test-split file (default: the task's file under data/)");
  bch->add_option("--limit", ba.limit,
                  "accuracy: the first N documents (0 = all); timing-only: prompts per repeat (0 = the batch size)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  bch->add_flag("--timing-only", ba.timing_only, "fixed prompts (the task's first ones), no scoring");
  bch->add_option("--methods", ba.methods, "comma-separated: none, prefix, dual, flash, flash+verify")
      ->capture_default_str();
  bch->add_option("--sweep", ba.sweeps,
                  "KEY=V1,V2,... (repeatable; keys: threshold (or off), gamma, track_num, mask_num, block_length, "
                  "gen_length, steps, verify_rule, max_candidates, verify_kept, tokens_per_step, temperature, seed)");
  bch->add_option("--batches", ba.batches, "comma-separated batch sizes (none/prefix/dual: requests per call; flash: slots)")
      ->capture_default_str();
  bch->add_option("--repeats", ba.repeats, "measured runs per point (medians and min/max over them)")->capture_default_str();
  bch->add_option("--warmup", ba.warmup, "unmeasured one-request generate calls before each point")->capture_default_str();
  bch->add_option("--out", ba.out_dir, "write results.jsonl, summary.json, summary.md and summary.csv here");
  bch->add_flag("--plot", ba.plot, "draw the PNG plots into --out (tools/plots/plot_bench.py, needs matplotlib)");
  bch->add_option("--baseline-method", ba.baseline_method, "method whose points give the speed-ups")->capture_default_str();
  bch->add_option("--table-setting", ba.table_setting, "the setting shown per method in the Table 1-style table")
      ->capture_default_str();
  bch->add_option("--fresh-engine", ba.fresh_engine,
                  "reload the model before every point (isolated device peak memory): auto (= on for GPUs) | yes | no")
      ->capture_default_str();
  bch->add_flag("--chat", ba.chat, "apply the chat template (default as eval)");
  bch->add_flag("--raw", ba.raw, "do not apply the chat template");
  bch->add_flag("--dry-run", ba.dry_run, "list the points and exit (no model is loaded)");
  bch->add_option("--python", ba.python, "interpreter for the code tasks' sandbox and for --plot")->capture_default_str();
  bch->add_option("--code-timeout", ba.code_timeout, "humaneval/mbpp: seconds per program")->capture_default_str();
  bch->add_option("--code-jobs", ba.code_jobs, "humaneval/mbpp: programs run in parallel (0 = all cores)")
      ->capture_default_str();
  add_decode_options(bch, ba.dec);
}

/// `info`: config.json, the safetensors headers and the tokenizer files only (no weights are read, so
/// an 8B checkpoint answers at once); `--check-weights` then scans every tensor for NaN / Inf.
int run_info(const CommonArgs& ca, bool check_weights) {
  if (ca.load_format != "auto" && ca.load_format != "dummy")
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--load-format must be 'auto' or 'dummy', got '{}'", ca.load_format));
  const bool dummy = ca.load_format == "dummy";
  if (dummy && check_weights)
    throw Error(ErrorCode::kInvalidArgument, "--check-weights needs a checkpoint (not --load-format dummy)");
  const flashdllm::LladaModelFacts facts = flashdllm::inspect_llada_checkpoint(ca.model_dir, dummy);
  const auto backend = flashdllm::make_backend(ca.device, ca.threads, 0, 1, flashdllm::cli::env_settings().backend);
  std::cout << flashdllm::describe_llada_model(facts, *backend);
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
  CLI::App app{"flashdllm: fast inference for LLaDA diffusion language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("flashdllm ") + FLASHDLLM_VERSION);
  app.footer("Backend options come from FLASHDLLM_* environment variables: `flashdllm env` lists them.");
  flashdllm::cli::add_env_subcommand(app);
  CommonArgs ca;
  GenerateArgs ga;

  CLI::App* gen = app.add_subcommand(
      "generate", "generate text from prompts (Flash-Cache by default; --cache none is LLaDA's own sampler)");
  add_common(gen, ca);
  gen->add_option("-p,--prompt", ga.prompts, "prompt text (repeat for a batch)");
  gen->add_option("--prompt-file", ga.prompt_file, "file with one prompt per line (a batch)");
  gen->add_option("--prompt-ids", ga.prompt_ids, "comma-separated prompt token ids (repeat for a batch)");
  gen->add_flag("--chat", ga.chat, "apply the chat template (default when the model has one)");
  gen->add_flag("--raw", ga.raw, "do not apply the chat template");
  add_decode_options(gen, ga.dec);
  gen->add_flag("--json", ga.json, "machine-readable output with ids, timings and NFE");
  gen->add_flag("--no-live", ga.no_live, "no live denoising view on the terminal");
  gen->add_flag("--profile-ops", ca.profile_ops,
                "time every backend op (synchronising around each: slower) and print the per-op table "
                "(stderr; \"op_profile\" with --json)");

  EvalArgs ea;
  CLI::App* evl = nullptr;
  add_eval_subcommand(app, ca, ea, evl);

  BenchArgs ba;
  CLI::App* bch = nullptr;
  add_bench_subcommand(app, ca, ba, bch);
  for (int i = 0; i < argc; ++i) ba.command += (i ? " " : "") + shell_quote(i == 0 ? std::string("flashdllm") : argv[i]);

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
    if (*gen) return run_generate(ca, ga);
    if (*info) return run_info(ca, check_weights);
    if (*evl) return run_eval(ca, ea);
    if (*bch) return run_bench(ca, ba);
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
