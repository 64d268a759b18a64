#include "eval/runner.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "core/check.h"
#include "eval/scoring.h"

namespace flashdllm::eval {

SampleResult make_sample_result(const EvalSample& sample, const GenerateResult& g, int64_t call, double seconds) {
  SampleResult s;
  s.id = sample.id;
  s.prompt = sample.prompt;
  s.raw_text = g.text;
  s.text = truncate_at_stops(g.text, sample.until);
  s.gold = sample.gold;
  s.prompt_tokens = static_cast<int64_t>(g.prompt_ids.size());
  s.nfe = g.nfe;
  s.forward_passes = g.forward_passes;
  s.committed_tokens = g.committed_tokens;
  s.committed_tokens_reference = g.committed_tokens_reference;
  s.generated_tokens = g.generated_tokens();
  s.stopped_at_eos = g.stopped_at_eos;
  s.call_seconds = g.seconds;
  s.seconds = seconds;
  s.call = call;
  return s;
}

std::vector<SampleResult> generate_samples(Engine& engine, const std::vector<EvalSample>& samples,
                                           const GenerateOptions& options, const RunOptions& run) {
  FDLLM_CHECK_ARG(run.requests_per_call >= 0, "requests per generate call must be >= 0, got {}", run.requests_per_call);
  FDLLM_CHECK_ARG(!samples.empty(), "eval: no samples to generate");
  const size_t per_call = run.requests_per_call > 0 ? static_cast<size_t>(run.requests_per_call) : samples.size();
  std::vector<SampleResult> out;
  out.reserve(samples.size());
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  int64_t done_total = 0;
  int64_t call = 0;
  const auto calls = static_cast<int64_t>((samples.size() + per_call - 1) / per_call);
  const int32_t mask = engine.mask_token_id();
  for (size_t b = 0; b < samples.size(); b += per_call, ++call) {
    const size_t e = std::min(samples.size(), b + per_call);
    std::vector<GenerateRequest> reqs;
    for (size_t i = b; i < e; ++i) {
      GenerateRequest r;
      r.prompt = samples[i].prompt;
      r.chat = run.chat.value_or(samples[i].chat);
      reqs.push_back(std::move(r));
    }
    // Requests finish at different steps: the engine's step callback tells when (where the denoiser
    // reports steps); otherwise a request's latency is its call's wall time.
    std::vector<double> finished_at(reqs.size(), -1.0);
    const auto call_start = std::chrono::steady_clock::now();
    // Every iteration ticks the progress (a long call still reports periodically, with the share of
    // its canvases decoded: a static batch finishes all at once); a request's first done tick is its
    // latency.
    std::vector<double> decoded(reqs.size(), 0.0);  // per request: its canvas share decoded
    double decoded_sum = 0.0;
    auto tick = [&] {
      if (run.progress)
        run.progress(EvalTick{done_total, static_cast<int64_t>(samples.size()), since(t0), call, calls,
                              decoded_sum / static_cast<double>(reqs.size())});
    };
    ProgressCallback step_progress = [&](const StepProgress& p) {
      if (p.request >= finished_at.size()) return;
      if (p.done && finished_at[p.request] < 0) {
        finished_at[p.request] = since(call_start);
        ++done_total;
      }
      double share = 1.0;
      if (!p.done && p.canvas != nullptr && !p.canvas->empty())
        share = static_cast<double>(
                    std::count_if(p.canvas->begin(), p.canvas->end(), [&](int32_t t) { return t != mask; })) /
                static_cast<double>(p.canvas->size());
      decoded_sum += share - decoded[p.request];
      decoded[p.request] = share;
      tick();
    };
    std::vector<GenerateResult> res = engine.generate(reqs, options, step_progress);
    FDLLM_CHECK(res.size() == reqs.size(), ErrorCode::kInternal, "engine returned {} results for {} requests",
                res.size(), reqs.size());
    for (size_t i = b; i < e; ++i) {
      const GenerateResult& g = res[i - b];
      FDLLM_CHECK(g.finish_reason != FinishReason::kError, ErrorCode::kInvalidCheckpoint, "problem {}: {}", i, g.error);
      out.push_back(make_sample_result(samples[i], g, call,
                                       finished_at[i - b] >= 0 ? std::min(finished_at[i - b], g.seconds) : g.seconds));
    }
    if (done_total < static_cast<int64_t>(e)) {
      done_total = static_cast<int64_t>(e);
      decoded_sum = static_cast<double>(reqs.size());
      tick();
    }
  }
  return out;
}

void score_samples(std::string_view task, const std::vector<EvalSample>& samples, std::vector<SampleResult>& results,
                   const PythonSandbox* sandbox, const std::function<void(int64_t, int64_t)>& progress) {
  FDLLM_CHECK_ARG(samples.size() == results.size(), "score_samples: {} samples but {} results", samples.size(),
                  results.size());
  const TaskInfo& info = task_info(task);
  auto apply = [](SampleResult& r, const Score& sc) {
    r.extracted = sc.extracted;
    r.correct = sc.correct;
    r.metrics = sc.metrics;
    r.detail = sc.detail;
  };
  if (!info.code) {
    for (size_t i = 0; i < results.size(); ++i) apply(results[i], score_text(task, results[i].text, samples[i].gold));
    return;
  }
  FDLLM_CHECK_ARG(sandbox != nullptr, "task '{}' runs generated code: a sandbox is required", info.name);
  std::vector<std::string> programs;
  for (size_t i = 0; i < results.size(); ++i) programs.push_back(code_program(samples[i], results[i].text));
  const int64_t total = static_cast<int64_t>(programs.size());
  auto runs = sandbox->run_all(programs, [&](size_t d) {
    if (progress) progress(static_cast<int64_t>(d), total);
  });
  for (size_t i = 0; i < results.size(); ++i) {
    Score sc;
    sc.correct = runs[i].passed;
    sc.detail = runs[i].result;
    sc.metrics.push_back({"pass@1", "", sc.correct});
    apply(results[i], sc);
  }
}

std::vector<SampleResult> run_eval(Engine& engine, const std::vector<EvalSample>& samples,
                                   const GenerateOptions& options, int64_t batch,
                                   const std::function<Score(std::string_view, const std::string&)>& score,
                                   const EvalProgress& progress) {
  FDLLM_CHECK_ARG(batch > 0, "eval batch size must be positive, got {}", batch);
  RunOptions run;
  run.requests_per_call = batch;
  run.progress = progress;
  std::vector<SampleResult> out = generate_samples(engine, samples, options, run);
  for (SampleResult& r : out) {
    Score sc = score(r.text, r.gold);
    r.extracted = sc.extracted;
    r.correct = sc.correct;
    r.metrics = sc.metrics;
    r.detail = sc.detail;
  }
  return out;
}

EvalSummary summarize(const std::string& task, const std::vector<SampleResult>& results) {
  EvalSummary s;
  s.task = task;
  s.n = static_cast<int64_t>(results.size());
  double nfe = 0.0;
  std::map<int64_t, double> call_seconds;  // samples of one call share its wall time: count it once
  std::vector<MetricSummary> metrics;
  for (const SampleResult& r : results) {
    s.correct += r.correct;
    s.empty_answers += r.extracted.empty() && r.detail.empty();
    nfe += static_cast<double>(r.nfe);
    s.total_nfe += r.nfe;
    s.total_forward_passes += r.forward_passes;
    s.generated_tokens += r.generated_tokens;
    s.committed_tokens += r.committed_tokens;
    s.committed_tokens_reference += r.committed_tokens_reference;
    call_seconds[r.call] = r.call_seconds;
    for (size_t m = 0; m < r.metrics.size(); ++m) {
      if (metrics.size() <= m) metrics.push_back({r.metrics[m].name});
      metrics[m].correct += r.metrics[m].correct;
    }
  }
  double seconds = 0.0;
  for (const auto& [call, sec] : call_seconds) seconds += sec;
  s.generate_calls = static_cast<int64_t>(call_seconds.size());
  if (s.n > 0) {
    s.accuracy = static_cast<double>(s.correct) / static_cast<double>(s.n);
    std::tie(s.ci_low, s.ci_high) = wilson_interval(s.correct, s.n);
    s.mean_nfe = nfe / static_cast<double>(s.n);
    s.mean_forward_passes = static_cast<double>(s.total_forward_passes) / static_cast<double>(s.n);
    for (MetricSummary& m : metrics) {
      m.accuracy = static_cast<double>(m.correct) / static_cast<double>(s.n);
      std::tie(m.ci_low, m.ci_high) = wilson_interval(m.correct, s.n);
    }
  }
  s.metrics = std::move(metrics);
  s.seconds = seconds;
  s.tokens_per_second = seconds > 0 ? static_cast<double>(s.generated_tokens) / seconds : 0.0;
  s.tokens_per_second_released = seconds > 0 ? static_cast<double>(s.committed_tokens_reference) / seconds : 0.0;
  s.tokens_per_iteration = nfe > 0 ? static_cast<double>(s.committed_tokens) / nfe : 0.0;
  return s;
}

void apply_baseline(EvalSummary& s, const nlohmann::json& b, const std::string& what) {
  auto num = [&](const char* key) {
    FDLLM_CHECK_ARG(b.contains(key) && b[key].is_number(), "baseline '{}': missing number \"{}\"", what, key);
    return b[key].get<double>();
  };
  FDLLM_CHECK_ARG(b.is_object() && b.contains("task") && b["task"].is_string(),
                  "baseline '{}': not an eval summary (no \"task\")", what);
  FDLLM_CHECK_ARG(b["task"].get<std::string>() == s.task, "baseline '{}' is for task '{}', this run is '{}'", what,
                  b["task"].get<std::string>(), s.task);
  const double ours = num("tokens_per_second"), released = num("tokens_per_second_released");
  FDLLM_CHECK_ARG(ours > 0 && released > 0, "baseline '{}': tokens/s must be positive", what);
  s.baseline_tokens_per_second = ours;
  s.speedup = s.tokens_per_second / ours;
  s.speedup_released = s.tokens_per_second_released / released;
}

int64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

nlohmann::json to_json(const SampleResult& r) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const Score::Metric& m : r.metrics) metrics[m.name] = {{"extracted", m.extracted}, {"correct", m.correct}};
  nlohmann::json j = {{"id", r.id},
                      {"prompt", r.prompt},
                      {"text", r.text},
                      {"raw_text", r.raw_text},
                      {"extracted", r.extracted},
                      {"gold", r.gold},
                      {"correct", r.correct},
                      {"metrics", metrics},
                      {"nfe", r.nfe},
                      {"forward_passes", r.forward_passes},
                      {"prompt_tokens", r.prompt_tokens},
                      {"generated_tokens", r.generated_tokens},
                      {"committed_tokens", r.committed_tokens},
                      {"committed_tokens_reference", r.committed_tokens_reference},
                      {"stopped_at_eos", r.stopped_at_eos},
                      {"latency_s", r.seconds},
                      {"call", r.call},
                      {"call_seconds", r.call_seconds}};
  if (!r.detail.empty()) j["sandbox_result"] = r.detail;
  return j;
}

nlohmann::json to_json(const EvalSummary& s) {
  nlohmann::json metrics = nlohmann::json::array();
  for (const MetricSummary& m : s.metrics)
    metrics.push_back({{"name", m.name}, {"correct", m.correct}, {"accuracy", m.accuracy}, {"ci95", {m.ci_low, m.ci_high}}});
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"task", s.task},
          {"method", s.method},
          {"gen_length", s.gen_length},
          {"n", s.n},
          {"correct", s.correct},
          {"accuracy", s.accuracy},
          {"accuracy_ci95", {s.ci_low, s.ci_high}},
          {"metrics", metrics},
          {"empty_answers", s.empty_answers},
          {"mean_nfe", s.mean_nfe},
          {"total_nfe", s.total_nfe},
          {"mean_forward_passes", s.mean_forward_passes},
          {"total_forward_passes", s.total_forward_passes},
          {"generated_tokens", s.generated_tokens},
          {"committed_tokens", s.committed_tokens},
          {"tokens_per_iteration", s.tokens_per_iteration},
          {"tokens_per_second", s.tokens_per_second},
          {"tokens_per_second_released", s.tokens_per_second_released},
          {"speedup", opt(s.speedup)},
          {"speedup_released", opt(s.speedup_released)},
          {"baseline_tokens_per_second", opt(s.baseline_tokens_per_second)},
          {"peak_memory_bytes", s.peak_memory_bytes >= 0 ? nlohmann::json(s.peak_memory_bytes) : nlohmann::json()},
          {"peak_memory_kind", s.peak_memory_kind},
          {"seconds", s.seconds},
          {"generate_calls", s.generate_calls}};
}

std::string to_markdown(const std::vector<EvalSummary>& rows) {
  std::string m =
      "| benchmark | length | method | n | accuracy % (95% CI) | other metrics | tokens/s | tokens/s (released def.) | "
      "speed-up (released) | NFE | tokens/iter | peak memory |\n";
  m += "|---|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const EvalSummary& s : rows) {
    std::string other;
    for (size_t i = 1; i < s.metrics.size(); ++i)
      other += fmt::format("{}{} {:.1f}", other.empty() ? "" : ", ", s.metrics[i].name, 100 * s.metrics[i].accuracy);
    const std::string headline = s.metrics.empty() ? "" : s.metrics.front().name + " ";
    const std::string speed =
        s.speedup ? fmt::format("{:.1f}x ({:.1f}x)", *s.speedup, s.speedup_released.value_or(0.0)) : "—";
    const std::string mem = s.peak_memory_bytes >= 0
                                ? fmt::format("{:.2f} GiB", static_cast<double>(s.peak_memory_bytes) / (1024.0 * 1024 * 1024))
                                : "—";
    // Flash-Verify: the NFE (main passes) and, after it, every model pass the requests took.
    const std::string nfe = s.total_forward_passes > s.total_nfe
                                ? fmt::format("{:.1f} ({:.1f} passes)", s.mean_nfe, s.mean_forward_passes)
                                : fmt::format("{:.1f}", s.mean_nfe);
    m +=
        fmt::format("| {} | {} | {} | {} | {}{:.2f} ({:.1f}–{:.1f}) | {} | {:.1f} | {:.1f} | {} | {} | {:.2f} | {} |\n",
                    s.task, s.gen_length, s.method.empty() ? "—" : s.method, s.n, headline, 100 * s.accuracy,
                    100 * s.ci_low, 100 * s.ci_high, other.empty() ? "—" : other, s.tokens_per_second,
                    s.tokens_per_second_released, speed, nfe, s.tokens_per_iteration, mem);
  }
  return m;
}

}  // namespace flashdllm::eval
