#include "generate.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string_view>

#include "eval/progress.h"
#include "io/file.h"
#include "live_view.h"
#include "model/model_config.h"

namespace flashdllm::cli {
namespace {

/// The --profile-ops table on stderr: per op kind, calls, total ms, mean µs and share of the call's
/// wall time; the remainder is host work between ops (planning, decisions) plus profiling overhead.
void print_op_profile(const std::vector<OpProfileEntry>& ops, double wall_seconds) {
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
int report_failures(const std::vector<GenerateResult>& results) {
  int failed = 0;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].finish_reason == FinishReason::kError) {
      std::fprintf(stderr, "flashdllm: request %zu of %zu failed: %s\n", i, results.size(), results[i].error.c_str());
      ++failed;
    }
  if (failed > 0 && results.size() > 1)
    std::fprintf(stderr, "flashdllm: %d of %zu requests failed; the others' answers are above\n", failed,
                 results.size());
  return failed > 0 ? 1 : 0;
}

/// --prompt-file's bounds: its size (a batch of 1,319 GSM8K questions is 0.4 MB; before the bound
/// /dev/zero was read without end, 2.3 GB in 15 s) and the wait for a FIFO's writer.
constexpr size_t kMaxPromptFileBytes = size_t{16} << 20;
constexpr int kPromptFifoWaitSeconds = 10;

/// Appends the non-empty lines of --prompt-file (CRLF or LF; a regular file or a stream: /dev/stdin,
/// a pipe, a FIFO) to `prompts`. Read with read_input_file (io/file.h): at most 16 MiB, and a FIFO
/// nobody writes to fails after 10 s instead of blocking in open(). Throws Error(kIo) for an
/// unreadable file, a directory, or those limits, and Error(kInvalidArgument) for a line holding a
/// NUL byte.
void read_prompt_file(const std::string& path, std::vector<std::string>& prompts) {
  const std::string text = read_input_file(path, kMaxPromptFileBytes, kPromptFifoWaitSeconds, "--prompt-file");
  int64_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF files
    if (line.find('\0') != std::string_view::npos)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("--prompt-file '{}': line {} holds a NUL byte (prompts are text)", path, line_no));
    if (!line.empty()) prompts.emplace_back(line);
  }
}

/// The requests: the text prompts (with the chat template as --chat / --raw / the checkpoint's
/// default say), then the id prompts. Throws Error(kInvalidArgument) for --chat without a template.
std::vector<GenerateRequest> make_requests(const CommonArgs& ca, const GenerateArgs& ga, Engine& engine) {
  if (ga.chat && !engine.has_chat_template())
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("--chat: '{}' has no chat template (tokenizer_config.json); drop --chat", ca.model_dir));
  const bool chat = ga.raw ? false : (ga.chat ? true : engine.chat_by_default());
  std::vector<GenerateRequest> reqs;
  const int64_t context = engine.config().max_sequence_length;
  for (size_t i = 0; i < ga.prompts.size(); ++i) {
    const std::string& p = ga.prompts[i];
    // A prompt its bytes prove longer than the model's context is refused before it is tokenised
    // (tokenising holds ~86 bytes per byte: a 50 MB prompt file ran for minutes at 5 GB).
    if (const int64_t least = engine.min_prompt_tokens(p, chat); least >= context)
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("prompt {} ({} bytes) makes at least {} tokens, more than the model's context of {} "
                              "(max_sequence_length) holds",
                              i + 1, p.size(), least, context));
    GenerateRequest r;
    r.prompt = p;
    r.chat = chat;
    reqs.push_back(std::move(r));
  }
  for (const std::string& s : ga.prompt_ids) {
    GenerateRequest r;
    r.prompt_ids = parse_ids(s);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

/// Runs the requests with what the user sees meanwhile: the live canvas for one text request on a
/// terminal, a progress bar for several (plain lines every 10 s when stderr is not a terminal).
std::vector<GenerateResult> generate_with_display(Engine& engine, const std::vector<GenerateRequest>& reqs,
                                                  const GenerateArgs& ga) {
  const bool live = !ga.no_live && !ga.json && reqs.size() == 1 && engine.has_tokenizer() && is_tty(fileno(stderr));
  std::vector<int32_t> stops = {engine.config().eos_token_id};
  if (engine.eot_token_id() >= 0) stops.push_back(engine.eot_token_id());
  LiveView view([&](const std::vector<int32_t>& ids) { return engine.decode(ids); }, engine.mask_token_id(), stops);
  std::optional<eval::ProgressBar> bar;
  std::vector<bool> finished(reqs.size(), false);
  int64_t done = 0;
  if (reqs.size() > 1) {
    bar.emplace("generate", static_cast<int64_t>(reqs.size()), "requests");
    bar->update(0);
  }
  ProgressCallback progress = [&](const StepProgress& p) {
    if (live) view.update(p.request, *p.canvas, p.done);
    if (p.done && p.request < finished.size() && !finished[p.request]) {
      finished[p.request] = true;
      ++done;
    }
    if (bar) bar->update(done);
  };
  auto results = engine.generate(reqs, ga.go, progress);
  if (live) view.finish();
  if (bar) bar->finish();
  return results;
}

/// One request's entry of the --json "results" array.
nlohmann::json result_json(const GenerateResult& r, const std::string* prompt, Engine& engine, bool verify) {
  nlohmann::json e;
  if (prompt) e["prompt"] = *prompt;
  e["chat_template"] = r.chat_template;
  e["prompt_ids"] = r.prompt_ids;
  e["prompt_tokens"] = r.prompt_ids.size();
  e["canvas_ids"] = r.canvas_ids;
  e["output_ids"] = r.output_ids;
  if (engine.has_tokenizer()) e["text"] = r.text;
  e["stopped_at_eos"] = r.stopped_at_eos;
  e["finish_reason"] = finish_reason_name(r.finish_reason);
  if (!r.error.empty()) e["error"] = r.error;
  e["nfe"] = r.nfe;
  e["committed_tokens"] = r.committed_tokens;
  e["committed_tokens_reference"] = r.committed_tokens_reference;
  e["forward_passes"] = r.forward_passes;
  if (verify) {
    e["verify_candidates"] = r.verify_candidates;
    e["verify_accepted"] = r.verify_accepted;
  }
  e["tokens_per_iteration"] = r.nfe > 0 ? static_cast<double>(r.committed_tokens) / static_cast<double>(r.nfe) : 0.0;
  if (!r.call_kinds.empty()) e["call_kinds"] = r.call_kinds;
  e["generated_tokens"] = r.generated_tokens();  // answer + the ending EOS/EOT (request.h)
  e["seconds"] = r.seconds;
  e["latency_seconds"] = r.latency_seconds;
  e["tokens_per_second"] = r.seconds > 0 ? static_cast<double>(r.generated_tokens()) / r.seconds : 0.0;
  return e;
}

/// Iteration wall times in ms (EngineMetrics::IterationTimes), with the host time by phase as mean
/// ms per iteration of the kind.
nlohmann::json iteration_times_json(const EngineMetrics::IterationTimes& t) {
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
}

/// The --json document: the run's load, options, every result, peak memory, iteration times, the
/// layer loops and (--profile-ops) the per-op profile.
nlohmann::json generate_json(const CommonArgs& ca, const GenerateArgs& ga, Engine& engine,
                             const std::vector<GenerateResult>& results) {
  nlohmann::json j;
  j["model"] = ca.model_dir;
  j["backend"] = engine.backend_name();
  // Load time covers config, tokenizer, backend start-up, weights and RoPE tables; the rate is the
  // checkpoint's bytes over that time (no rate for --load-format dummy: nothing is read).
  j["load_format"] = ca.load_format;
  j["load_seconds"] = engine.load_seconds();
  j["weight_bytes"] = engine.weight_bytes();
  j["load_gb_per_s"] = engine.weight_bytes() > 0 && engine.load_seconds() > 0
                           ? nlohmann::json(static_cast<double>(engine.weight_bytes()) / engine.load_seconds() / 1e9)
                           : nlohmann::json();
  j["options"] = to_json(ga.go);
  nlohmann::json arr = nlohmann::json::array();
  for (size_t i = 0; i < results.size(); ++i)
    arr.push_back(
        result_json(results[i], i < ga.prompts.size() ? &ga.prompts[i] : nullptr, engine, ga.go.decode.verify));
  j["results"] = std::move(arr);
  const PeakMemory peak = peak_memory(engine);
  j["peak_memory_bytes"] = peak.bytes;
  j["peak_memory"] = peak.kind;
  // Iteration wall times: the steady state (no admission) and the admissions (prefill rows, the
  // first one with the device's warm-up); ms per iteration in benchmarks is decode.median.
  const EngineMetrics m = engine.metrics();
  j["iterations"] = {{"decode", iteration_times_json(m.decode_iterations)},
                     {"admission", iteration_times_json(m.admission_iterations)}};
  // The forwards' layer loops: op by op, recorded into a CUDA graph, or replayed (Engine::GraphStats).
  const auto gs = engine.graph_stats();
  j["layer_loops"] = {{"direct", gs.direct}, {"captures", gs.captures}, {"replays", gs.replays}, {"failed", gs.failed}};
  if (ca.profile_ops) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& e : engine.op_profile()) ops.push_back({{"op", e.op}, {"calls", e.calls}, {"seconds", e.seconds}});
    j["op_profile"] = std::move(ops);
  }
  return j;
}

/// The answers on stdout (text, or ids up to the EOS / EOT; "### i" headers for several).
void print_answers(const GenerateArgs& ga, Engine& engine, const std::vector<GenerateResult>& results) {
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (results.size() > 1) std::cout << "### " << i << "\n";
    if (engine.has_tokenizer() && i < ga.prompts.size())
      std::cout << r.text << "\n";
    else
      std::cout << ids_to_string(r.output_ids) << "\n";  // up to the EOS / EOT, as the text
  }
  std::cout.flush();  // answers first, then the timing line on stderr
}

/// The notes and the timing line on stderr after the answers: cut-off and empty answers, the verify
/// counters, the op profile, tokens, NFE and speed.
void print_run_summary(const CommonArgs& ca, const GenerateArgs& ga, Engine& engine,
                       const std::vector<GenerateResult>& results) {
  int64_t nfe = 0, toks = 0, cand = 0, acc = 0, passes = 0, empty_raw = 0, cut = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    nfe = std::max(nfe, r.nfe);
    toks += r.generated_tokens();
    cand += r.verify_candidates;
    acc += r.verify_accepted;
    passes = std::max(passes, r.forward_passes);
    if (i < ga.prompts.size() && r.output_ids.empty() && ga.raw && engine.has_chat_template()) ++empty_raw;
    cut += r.finish_reason == FinishReason::kLength ? 1 : 0;
  }
  if (cut > 0)
    std::fprintf(stderr,
                 "[flashdllm] %lld answer(s) filled the canvas without an end (finish_reason length): they may be cut "
                 "off; raise --gen-length (now %lld)\n",
                 static_cast<long long>(cut), static_cast<long long>(ga.go.sampling.gen_length));
  if (empty_raw > 0)
    std::fprintf(
        stderr,
        "[flashdllm] %lld empty answer(s): this checkpoint is a chat model and --raw skipped its chat template "
        "(drop --raw)\n",
        static_cast<long long>(empty_raw));
  if (ga.go.decode.verify)
    std::fprintf(stderr,
                 "[flashdllm] verify: %lld forward passes (main + verify) for NFE %lld, drafts accepted %lld of %lld\n",
                 static_cast<long long>(passes), static_cast<long long>(nfe), static_cast<long long>(acc),
                 static_cast<long long>(cand));
  const double sec = results.front().seconds;
  if (ca.profile_ops) print_op_profile(engine.op_profile(), sec);
  std::fprintf(stderr,
               "[flashdllm] %zu request(s), %lld tokens (with the ending EOS), NFE %lld, %.2f s, %.1f tokens/s (%s, "
               "%s; load %.2f s)\n",
               results.size(), static_cast<long long>(toks), static_cast<long long>(nfe), sec,
               sec > 0 ? static_cast<double>(toks) / sec : 0.0, cache_mode_name(ga.go.decode.cache),
               engine.backend_name().c_str(), engine.load_seconds());
}

}  // namespace

void add_generate_subcommand(CLI::App& app, CommonArgs& ca, GenerateArgs& ga, CLI::App*& cmd) {
  CLI::App* gen = app.add_subcommand(
      "generate", "generate text from prompts (Flash-Cache by default; --cache none is LLaDA's own sampler)");
  cmd = gen;
  add_common(gen, ca);
  gen->add_option("-p,--prompt", ga.prompts, "prompt text (repeat for a batch)");
  gen->add_option("--prompt-file", ga.prompt_file,
                  "file with one prompt per line (a batch; at most 16 MiB; a FIFO or pipe gets 10 s to start)");
  gen->add_option("--prompt-ids", ga.prompt_ids, "comma-separated prompt token ids (repeat for a batch)");
  gen->add_flag("--chat", ga.chat, "apply the chat template (default when the model has one)");
  gen->add_flag("--raw", ga.raw, "do not apply the chat template");
  add_decode_options(gen, ga.dec);
  gen->add_flag("--json", ga.json, "machine-readable output with ids, timings and NFE");
  gen->add_flag("--no-live", ga.no_live, "no live denoising view on the terminal");
  gen->add_flag("--profile-ops", ca.profile_ops,
                "time every backend op (synchronising around each: slower) and print the per-op table "
                "(stderr; \"op_profile\" with --json)");
}

int run_generate(const CommonArgs& ca, GenerateArgs& ga) {
  if (ga.chat && ga.raw) throw Error(ErrorCode::kInvalidArgument, "--chat and --raw exclude each other");
  ga.go = ga.dec.options();
  if (!ga.prompt_file.empty()) read_prompt_file(ga.prompt_file, ga.prompts);
  if (ga.prompts.empty() && ga.prompt_ids.empty())
    throw Error(ErrorCode::kInvalidArgument, "give a prompt with -p TEXT, --prompt-file FILE or --prompt-ids IDS");
  if ((ga.chat || ga.raw) && ga.prompts.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "--chat / --raw apply to text prompts (-p, --prompt-file), not to --prompt-ids");

  auto engine = load_engine(ca);
  ga.dec.fit_to_model(ga.go, engine->config());
  const std::vector<GenerateRequest> reqs = make_requests(ca, ga, *engine);
  const std::vector<GenerateResult> results = generate_with_display(*engine, reqs, ga);
  if (ga.json) {
    std::cout << generate_json(ca, ga, *engine, results).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    return report_failures(results);
  }
  print_answers(ga, *engine, results);
  print_run_summary(ca, ga, *engine, results);
  return report_failures(results);
}

}  // namespace flashdllm::cli
