// Internal to src/eval/bench*.cpp: the helpers the grid, the runner and the report share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "eval/bench.h"

namespace flashdllm::eval::bench_detail {

/// `items` joined by `sep`.
inline std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? std::string(sep) : "") + items[i];
  return s;
}

/// The metrics of RepeatMeasure by their JSON names (PointResult::stats keys), in report order.
struct MetricField {
  const char* name;
  double RepeatMeasure::*member;
};
inline constexpr MetricField kMetrics[] = {
    {"tokens_per_second", &RepeatMeasure::tokens_per_second},
    {"tokens_per_second_released", &RepeatMeasure::tokens_per_second_released},
    {"tokens_per_iteration", &RepeatMeasure::tokens_per_iteration},
    {"mean_nfe", &RepeatMeasure::mean_nfe},
    {"forward_passes", &RepeatMeasure::forward_passes},
    {"verify_candidates", &RepeatMeasure::verify_candidates},
    {"verify_accepted", &RepeatMeasure::verify_accepted},
    {"generated_tokens", &RepeatMeasure::generated_tokens},
    {"seconds", &RepeatMeasure::seconds},
    {"accuracy", &RepeatMeasure::accuracy},
    {"peak_memory_bytes", &RepeatMeasure::peak_memory_bytes},
};

/// Points with the same key are compared (baselines, Table 1 rows): workload, batch and gen_length.
inline std::string workload_key(const PointResult& r) {
  const BenchWorkload& w = r.point.workload;
  return fmt::format("{}|{}|{}|{}|{}|{}", w.task, w.data.string(), w.limit, w.timing_only, r.point.batch,
                     r.point.options.sampling.gen_length);
}

}  // namespace flashdllm::eval::bench_detail
