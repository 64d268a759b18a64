// Shared helpers of the CUDA kernel microbenchmarks (attention_bench, gemm_bench): device
// description, event timing with warm-up / repetition / median, comma-separated list parsing.
#pragma once

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace flashdllm::bench {

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t l2_bytes = 0;
  size_t total_mem = 0;
};

inline DeviceInfo device_info(int dev = 0) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  DeviceInfo d;
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  d.total_mem = p.totalGlobalMem;
  return d;
}

/// Timing of one configuration: per-launch microseconds (median, min, max over `iters`
/// measurements, each the mean of `inner` back-to-back launches between two CUDA events).
struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int inner = 1, iters = 0;
};

/// Times `launch(i)` (i counts launches, for rotating inputs). `inner` is chosen so that one
/// measurement lasts >= target_ms (launch overhead and event resolution amortised).
inline Timing time_launches(const std::function<void(int)>& launch, cudaStream_t stream, int warmup, int iters,
                            double target_ms = 1.0) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  int counter = 0;
  for (int i = 0; i < warmup; ++i) launch(counter++);
  // Estimate one launch.
  CUDA_CHECK(cudaEventRecord(a, stream));
  launch(counter++);
  CUDA_CHECK(cudaEventRecord(b, stream));
  CUDA_CHECK(cudaEventSynchronize(b));
  float one_ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&one_ms, a, b));
  Timing t;
  t.inner = std::clamp(static_cast<int>(target_ms / std::max(one_ms, 1e-4f)), 1, 1000);
  t.iters = iters;
  std::vector<double> us;
  for (int it = 0; it < iters; ++it) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    for (int k = 0; k < t.inner; ++k) launch(counter++);
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(1000.0 * ms / t.inner);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(us.begin(), us.end());
  t.median_us = us[us.size() / 2];
  t.min_us = us.front();
  t.max_us = us.back();
  return t;
}

inline std::vector<long long> parse_list(const std::string& s) {
  std::vector<long long> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find(',', pos);
    if (e == std::string::npos) e = s.size();
    if (e > pos) out.push_back(std::stoll(s.substr(pos, e - pos)));
    pos = e + 1;
  }
  return out;
}

inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find(',', pos);
    if (e == std::string::npos) e = s.size();
    if (e > pos) out.push_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}

/// Writes `j` (indented) to `path` unless the path is empty; throws std::runtime_error if the file
/// cannot be written.
inline void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  if (!f) throw std::runtime_error("cannot write " + path);
  std::printf("\nwrote %s\n", path.c_str());
}

/// Git commit given by the environment (FLASHDLLM_COMMIT, set by scripts/gpu_check.sh) or "unknown".
inline std::string commit_id() {
  const char* c = std::getenv("FLASHDLLM_COMMIT");
  return c && *c ? c : "unknown";
}

}  // namespace flashdllm::bench
