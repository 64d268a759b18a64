// /metrics of `flashdllm serve`: the engine's counters and the HTTP responses by route and status,
// in the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "flashdllm/engine.h"

namespace flashdllm::server {

/// HTTP responses by (route, status). Thread-safe.
class HttpCounters {
 public:
  /// Counts one response; paths outside the served routes count as "other".
  void count(const std::string& path, int status);
  std::map<std::pair<std::string, int>, int64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
};

/// The exposition text: flashdllm_requests_total{status} (finished requests by how they ended),
/// flashdllm_http_responses_total{route,code}, flashdllm_queue_depth, flashdllm_slots_busy,
/// flashdllm_slots, flashdllm_max_model_len, flashdllm_iterations_total,
/// flashdllm_forward_passes_total, flashdllm_committed_tokens_total,
/// flashdllm_generated_tokens_total, flashdllm_busy_seconds_total, flashdllm_tokens_per_second
/// (committed, last 10 s), the histograms flashdllm_iteration_seconds and
/// flashdllm_tokens_per_iteration, and flashdllm_host_phase_seconds_total{kind,phase}
/// (EngineMetrics::IterationTimes::host_phases of the decode and admission iterations).
std::string prometheus_text(const EngineMetrics& m, const HttpCounters& http);

}  // namespace flashdllm::server
