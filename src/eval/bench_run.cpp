// `flashdllm bench`, the runner: every point's warm-up and measured repeats on an engine, with the
// peak memory of each repeat (bench.h, run_bench).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "core/check.h"
#include "core/text.h"
#include "eval/bench.h"
#include "eval/runner.h"
#include "eval/scoring.h"
#include "eval/tasks.h"

namespace flashdllm::eval {
namespace {

/// Resets the kernel's peak-RSS mark of this process (Linux >= 4.0); false when not allowed.
bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

/// VmHWM of this process in bytes, -1 if unreadable.
int64_t vm_hwm_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) {
      const auto kb = parse_int(trim(std::string_view(line).substr(6, line.size() - 6 - 3)));
      if (kb) return *kb * 1024;
    }
  return -1;
}

/// The samples a workload runs on (timing-only: the task's first prompts, cycled to the count).
std::vector<EvalSample> workload_samples(const BenchWorkload& w, int64_t batch, const std::filesystem::path& data_dir) {
  const TaskInfo& info = task_info(w.task);
  const std::filesystem::path data = w.data.empty() ? data_dir / info.default_data : w.data;
  LoadOptions lo;
  if (!w.timing_only) {
    lo.limit = w.limit;
    return load_task(w.task, data, lo);
  }
  const int64_t n = w.limit > 0 ? w.limit : batch;
  lo.limit = n;
  std::vector<EvalSample> base = load_task(w.task, data, lo);
  FDLLM_CHECK_ARG(!base.empty(), "task '{}' ({}) has no documents", w.task, data.string());
  std::vector<EvalSample> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(base[static_cast<size_t>(i) % base.size()]);
  return out;
}

}  // namespace

std::vector<PointResult> run_bench(const EngineFactory& load, const std::vector<BenchPoint>& points,
                                   const BenchRunOptions& options, std::string* backend_name) {
  std::vector<PointResult> results;
  std::map<std::string, std::vector<EvalSample>> sample_cache;
  auto samples_of = [&](const BenchPoint& p) -> const std::vector<EvalSample>& {
    const std::string key = fmt::format("{}|{}|{}|{}|{}", p.workload.task, p.workload.data.string(), p.workload.limit,
                                        p.workload.timing_only, p.workload.timing_only ? p.batch : 0);
    auto it = sample_cache.find(key);
    if (it == sample_cache.end())
      it = sample_cache.emplace(key, workload_samples(p.workload, p.batch, options.data_dir)).first;
    return it->second;
  };
  // Totals for the progress display: accuracy workloads need their sizes, so load them first.
  int64_t total = 0;
  for (const BenchPoint& p : points) {
    FDLLM_CHECK_ARG(p.workload.timing_only || !task_info(p.workload.task).code || options.sandbox,
                    "point {} ({}): task '{}' runs generated code: a sandbox is required", p.id, p.label(),
                    p.workload.task);
    total += p.repeats * static_cast<int64_t>(samples_of(p).size());
  }

  if (options.progress && !points.empty()) options.progress(0, total, points.front(), 0);

  std::unique_ptr<Engine> engine;
  int64_t done = 0;
  for (size_t pi = 0; pi < points.size(); ++pi) {
    const BenchPoint& p = points[pi];
    if (!engine || options.fresh_engine) {
      engine.reset();
      engine = load();
      FDLLM_CHECK(engine != nullptr, ErrorCode::kInternal, "the engine factory returned no engine");
    }
    const std::string backend = engine->backend_name();
    if (backend_name) *backend_name = backend;
    const bool on_cpu = backend.rfind("cpu", 0) == 0;
    const std::vector<EvalSample>& samples = samples_of(p);
    const bool chat = options.chat.value_or(p.workload.task == "arith" ? engine->chat_by_default()
                                                                       : chat_by_model_path(options.model_dir));
    const bool flash = p.options.decode.cache == CacheMode::kFlash;
    const size_t per_call = flash ? samples.size() : static_cast<size_t>(p.batch);
    auto request_of = [&](const EvalSample& s) {
      GenerateRequest r;
      r.prompt = s.prompt;
      r.chat = chat;
      return r;
    };
    for (int64_t w = 0; w < p.warmup; ++w) engine->generate({request_of(samples.front())}, p.options);

    PointResult pr;
    pr.point = p;
    for (int64_t rep = 0; rep < p.repeats; ++rep) {
      const bool rss_reset = on_cpu && reset_peak_rss();
      std::vector<SampleResult> res;
      res.reserve(samples.size());
      RepeatMeasure m;
      int64_t call = 0;
      for (size_t b = 0; b < samples.size(); b += per_call, ++call) {
        const size_t e = std::min(samples.size(), b + per_call);
        std::vector<GenerateRequest> reqs;
        for (size_t i = b; i < e; ++i) reqs.push_back(request_of(samples[i]));
        std::vector<bool> finished(reqs.size(), false);
        const int64_t done_before = done;
        ProgressCallback step = [&](const StepProgress& s) {
          if (!s.done || s.request >= finished.size() || finished[s.request]) return;
          finished[s.request] = true;
          ++done;
          if (options.progress) options.progress(done, total, p, pi);
        };
        std::vector<GenerateResult> gen = engine->generate(reqs, p.options, step);
        FDLLM_CHECK(gen.size() == reqs.size(), ErrorCode::kInternal, "engine returned {} results for {} requests",
                    gen.size(), reqs.size());
        for (size_t i = b; i < e; ++i) {
          const GenerateResult& g = gen[i - b];
          FDLLM_CHECK(g.finish_reason != FinishReason::kError, ErrorCode::kInvalidCheckpoint, "sample {}: {}", i,
                      g.error);
          res.push_back(make_sample_result(samples[i], g, call, g.seconds));
          m.forward_passes += static_cast<double>(g.forward_passes);
          m.verify_candidates += static_cast<double>(g.verify_candidates);
          m.verify_accepted += static_cast<double>(g.verify_accepted);
        }
        done = done_before + static_cast<int64_t>(e - b);
        if (options.progress) options.progress(done, total, p, pi);
      }
      if (!p.workload.timing_only) score_samples(p.workload.task, samples, res, options.sandbox);
      const EvalSummary sum = summarize(p.workload.task, res);
      const double n = static_cast<double>(res.size());
      m.seconds = sum.seconds;
      m.tokens_per_second = sum.tokens_per_second;
      m.tokens_per_second_released = sum.tokens_per_second_released;
      m.tokens_per_iteration = sum.tokens_per_iteration;
      m.mean_nfe = sum.mean_nfe;
      m.forward_passes /= n;
      m.verify_candidates /= n;
      m.verify_accepted /= n;
      m.generated_tokens = static_cast<double>(sum.generated_tokens);
      m.n = sum.n;
      if (!p.workload.timing_only) {
        m.correct = sum.correct;
        m.accuracy = sum.accuracy;
      }
      if (on_cpu) {
        m.peak_memory_bytes = static_cast<double>(rss_reset ? vm_hwm_bytes() : peak_rss_bytes());
        pr.peak_memory_kind = rss_reset ? "host peak RSS of the repeat (VmHWM, reset before it)"
                                        : "host peak RSS of the process so far (getrusage; VmHWM reset not allowed)";
      } else {
        m.peak_memory_bytes = static_cast<double>(engine->peak_memory_bytes());
        pr.peak_memory_kind = options.fresh_engine
                                  ? "device memory in use, this point (Engine::peak_memory_bytes, fresh engine)"
                                  : "device memory in use, running max since the engine was loaded "
                                    "(Engine::peak_memory_bytes)";
      }
      pr.repeats.push_back(m);
    }
    summarize_repeats(pr);
    results.push_back(std::move(pr));
    if (options.on_point) options.on_point(results.back());
  }
  return results;
}

}  // namespace flashdllm::eval
