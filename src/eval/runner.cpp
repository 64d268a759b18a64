#include "eval/runner.h"

#include <chrono>

#include <fmt/format.h>

#include "core/check.h"

namespace flashdllm::eval {

std::vector<SampleResult> run_eval(Engine& engine, const std::vector<EvalSample>& samples,
                                   const GenerateOptions& options, int64_t batch,
                                   const std::function<Score(std::string_view, const std::string&)>& score,
                                   const EvalProgress& progress) {
  FDLLM_CHECK_ARG(batch > 0, "eval batch size must be positive, got {}", batch);
  std::vector<SampleResult> out;
  out.reserve(samples.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t b = 0; b < samples.size(); b += static_cast<size_t>(batch)) {
    const size_t e = std::min(samples.size(), b + static_cast<size_t>(batch));
    std::vector<GenerateRequest> reqs;
    for (size_t i = b; i < e; ++i) {
      GenerateRequest r;
      r.prompt = samples[i].prompt;
      r.chat = samples[i].chat;
      reqs.push_back(std::move(r));
    }
    std::vector<GenerateResult> res = engine.generate(reqs, options);
    for (size_t i = b; i < e; ++i) {
      const GenerateResult& g = res[i - b];
      SampleResult s;
      s.id = samples[i].id;
      s.prompt = samples[i].prompt;
      s.text = g.text;
      s.gold = samples[i].gold;
      Score sc = score(g.text, samples[i].gold);
      s.extracted = sc.extracted;
      s.correct = sc.correct;
      s.nfe = g.nfe;
      s.committed_tokens = g.committed_tokens;
      s.generated_tokens = static_cast<int64_t>(g.output_ids.size()) + (g.stopped_at_eos ? 1 : 0);
      s.seconds = g.seconds;
      out.push_back(std::move(s));
    }
    if (progress)
      progress(static_cast<int64_t>(e), static_cast<int64_t>(samples.size()),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

EvalSummary summarize(const std::string& task, const std::vector<SampleResult>& results) {
  EvalSummary s;
  s.task = task;
  s.n = static_cast<int64_t>(results.size());
  double nfe = 0.0, tokens = 0.0, canvas = 0.0;
  // Samples of one batch share its wall time: count each batch once.
  double seconds = 0.0;
  for (size_t i = 0; i < results.size(); ++i) {
    const SampleResult& r = results[i];
    s.correct += r.correct;
    s.empty_answers += r.extracted.empty();
    nfe += static_cast<double>(r.nfe);
    tokens += static_cast<double>(r.generated_tokens);
    canvas += static_cast<double>(r.committed_tokens);
    if (i == 0 || r.seconds != results[i - 1].seconds) seconds += r.seconds;
  }
  if (s.n > 0) {
    s.accuracy = static_cast<double>(s.correct) / static_cast<double>(s.n);
    std::tie(s.ci_low, s.ci_high) = wilson_interval(s.correct, s.n);
    s.mean_nfe = nfe / static_cast<double>(s.n);
  }
  s.seconds = seconds;
  s.tokens_per_second = seconds > 0 ? tokens / seconds : 0.0;
  s.tokens_per_forward = nfe > 0 ? canvas / nfe : 0.0;
  return s;
}

nlohmann::json to_json(const SampleResult& r) {
  return {{"id", r.id},       {"prompt", r.prompt}, {"text", r.text},
          {"extracted", r.extracted}, {"gold", r.gold}, {"correct", r.correct},
          {"nfe", r.nfe},     {"committed_tokens", r.committed_tokens},
          {"generated_tokens", r.generated_tokens}, {"latency_s", r.seconds}};
}

nlohmann::json to_json(const EvalSummary& s) {
  return {{"task", s.task},
          {"n", s.n},
          {"correct", s.correct},
          {"accuracy", s.accuracy},
          {"accuracy_ci95", {s.ci_low, s.ci_high}},
          {"empty_answers", s.empty_answers},
          {"mean_nfe", s.mean_nfe},
          {"tokens_per_forward", s.tokens_per_forward},
          {"tokens_per_second", s.tokens_per_second},
          {"seconds", s.seconds}};
}

std::string to_markdown(const std::vector<EvalSummary>& rows) {
  std::string m = "| task | n | accuracy (95% CI) | mean NFE | tokens/forward | tokens/s | seconds |\n";
  m += "|---|---:|---|---:|---:|---:|---:|\n";
  for (const EvalSummary& s : rows)
    m += fmt::format("| {} | {} | {:.1f}% ({:.1f}–{:.1f}) | {:.1f} | {:.2f} | {:.1f} | {:.1f} |\n", s.task, s.n,
                     100 * s.accuracy, 100 * s.ci_low, 100 * s.ci_high, s.mean_nfe, s.tokens_per_forward,
                     s.tokens_per_second, s.seconds);
  return m;
}

}  // namespace flashdllm::eval
