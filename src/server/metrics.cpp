#include "server/metrics.h"

#include <fmt/format.h>

namespace flashdllm::server {
namespace {

std::string route_of(const std::string& path) {
  for (const char* r : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "/"})
    if (path == r) return r;
  return "other";
}

std::string bound_text(double b) { return b > 1e299 ? "+Inf" : fmt::format("{}", b); }

void histogram(std::string& out, const char* name, const char* help, const std::vector<double>& bounds,
               const std::vector<int64_t>& counts, double sum) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cum = 0;
  for (size_t i = 0; i < bounds.size() && i < counts.size(); ++i) {
    cum += counts[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bound_text(bounds[i]), cum);
  }
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum, name, cum);
}

// A Prometheus summary of iteration times: quantiles over the newest iterations of the kind
// (EngineMetrics::kIterationWindow), _sum and _count over all of them.
void summary(std::string& out, const char* name, const char* help, const EngineMetrics::IterationTimes& t) {
  out += fmt::format("# HELP {} {} (quantiles over the newest {}).\n# TYPE {} summary\n", name, help,
                     EngineMetrics::kIterationWindow, name);
  if (t.count > 0)
    for (const auto& [q, v] : {std::pair{"0.1", t.p10}, std::pair{"0.5", t.median}, std::pair{"0.9", t.p90}})
      out += fmt::format("{}{{quantile=\"{}\"}} {}\n", name, q, v);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, t.sum, name, t.count);
}

void scalar(std::string& out, const char* name, const char* type, const char* help, double v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}

}  // namespace

void HttpCounters::count(const std::string& path, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++counts_[{route_of(path), status}];
}

std::map<std::pair<std::string, int>, int64_t> HttpCounters::snapshot() const {
  std::lock_guard<std::mutex> lk(mu_);
  return counts_;
}

std::string prometheus_text(const EngineMetrics& m, const HttpCounters& http) {
  std::string out;
  out += "# HELP flashdllm_requests_total Requests the engine ended, by how they ended.\n"
         "# TYPE flashdllm_requests_total counter\n";
  out += fmt::format("flashdllm_requests_total{{status=\"stop\"}} {}\n", m.requests_finished_stop);
  out += fmt::format("flashdllm_requests_total{{status=\"length\"}} {}\n", m.requests_finished_length);
  out += fmt::format("flashdllm_requests_total{{status=\"cancelled\"}} {}\n", m.requests_cancelled);
  out += fmt::format("flashdllm_requests_total{{status=\"error\"}} {}\n", m.requests_failed);
  out += "# HELP flashdllm_http_responses_total HTTP responses by route and status code.\n"
         "# TYPE flashdllm_http_responses_total counter\n";
  for (const auto& [key, n] : http.snapshot())
    out += fmt::format("flashdllm_http_responses_total{{route=\"{}\",code=\"{}\"}} {}\n", key.first, key.second, n);
  scalar(out, "flashdllm_queue_depth", "gauge", "Requests waiting for a slot.", static_cast<double>(m.queue_depth));
  scalar(out, "flashdllm_slots_busy", "gauge", "Slots holding a request.", static_cast<double>(m.slots_busy));
  scalar(out, "flashdllm_slots", "gauge", "Slots of the pool (all replicas).", static_cast<double>(m.n_slots));
  scalar(out, "flashdllm_replicas", "gauge", "Data-parallel engine replicas behind the queue.",
         static_cast<double>(m.replicas));
  out +=
      "# HELP flashdllm_replica_slots_busy Slots holding a request, by data-parallel replica.\n"
      "# TYPE flashdllm_replica_slots_busy gauge\n";
  for (size_t i = 0; i < m.replica_slots_busy.size(); ++i)
    out += fmt::format("flashdllm_replica_slots_busy{{replica=\"{}\"}} {}\n", i, m.replica_slots_busy[i]);
  out +=
      "# HELP flashdllm_replica_iterations_total Engine iterations run, by data-parallel replica.\n"
      "# TYPE flashdllm_replica_iterations_total counter\n";
  for (size_t i = 0; i < m.replica_iterations.size(); ++i)
    out += fmt::format("flashdllm_replica_iterations_total{{replica=\"{}\"}} {}\n", i, m.replica_iterations[i]);
  scalar(out, "flashdllm_max_model_len", "gauge", "Longest prompt + canvas a request may have.",
         static_cast<double>(m.max_model_len));
  scalar(out, "flashdllm_iterations_total", "counter", "Engine iterations run (summed over replicas).",
         static_cast<double>(m.iterations));
  scalar(out, "flashdllm_forward_passes_total", "counter", "Model forward passes (verify passes included).",
         static_cast<double>(m.forward_passes));
  scalar(out, "flashdllm_committed_tokens_total", "counter", "Canvas positions committed.",
         static_cast<double>(m.committed_tokens));
  scalar(out, "flashdllm_generated_tokens_total", "counter", "Answer tokens of finished requests.",
         static_cast<double>(m.generated_tokens));
  scalar(out, "flashdllm_busy_seconds_total", "counter", "Seconds spent inside iterations (summed over replicas).",
         m.busy_seconds);
  scalar(out, "flashdllm_tokens_per_second", "gauge", "Committed tokens per second over the last 10 s.",
         m.tokens_per_second);
  histogram(out, "flashdllm_iteration_seconds", "Wall time of one engine iteration.", m.iteration_seconds_bounds,
            m.iteration_seconds_counts, m.iteration_seconds_sum);
  summary(out, "flashdllm_decode_iteration_seconds",
          "Wall time of an iteration that admitted no request (the steady state)", m.decode_iterations);
  summary(out, "flashdllm_admission_iteration_seconds",
          "Wall time of an iteration that admitted a request (its prefill rows)", m.admission_iterations);
  histogram(out, "flashdllm_tokens_per_iteration", "Canvas positions committed by one iteration (all slots).",
            m.tokens_per_iteration_bounds, m.tokens_per_iteration_counts, m.tokens_per_iteration_sum);
  out +=
      "# HELP flashdllm_host_phase_seconds_total Host wall time of the iterations' phases (waits for the device "
      "included) by iteration kind, summed over replicas.\n"
      "# TYPE flashdllm_host_phase_seconds_total counter\n";
  for (const auto& [kind, t] :
       {std::pair{"decode", &m.decode_iterations}, std::pair{"admission", &m.admission_iterations}})
    for (const EngineMetrics::HostPhase& p : t->host_phases)
      out +=
          fmt::format("flashdllm_host_phase_seconds_total{{kind=\"{}\",phase=\"{}\"}} {}\n", kind, p.name, p.seconds);
  return out;
}

}  // namespace flashdllm::server
