// Shared pieces of the attention microbenchmarks (attention_bench, attention_variants_bench): device
// buffers, rotating input sets, error measures and the Flash-Cache window block table.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cuda_bench_util.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill.h"

namespace flashdllm::bench {

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

inline std::vector<float> to_float(const DeviceBuffer& b, size_t n) {
  std::vector<uint16_t> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), b.p, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(h[i]) << 16;
    std::memcpy(&f[i], &u, 4);
  }
  return f;
}

/// max |got[i] − ref[i]| / max |ref[i]| over i < ref.size() (a NaN in got counts as infinite).
template <class R>
double max_rel_err(const std::vector<float>& got, const std::vector<R>& ref) {
  double md = 0, mr = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(ref[i]));
    if (std::isnan(d)) d = INFINITY;
    md = std::max(md, d);
    mr = std::max(mr, std::fabs(static_cast<double>(ref[i])));
  }
  return mr > 0 ? md / mr : md;
}

constexpr int kHeadDim = 128;

/// `n` rotating input sets: q and out [q_rows, heads·128], k and v [kv_rows, heads·128] bf16, q, k, v
/// uniform in [-1, 1] (|q·k|·scale up to a few units: softmax neither flat nor one-hot).
struct InputSets {
  std::vector<std::unique_ptr<DeviceBuffer>> q, k, v, o;
  int64_t q_rows = 0, kv_rows = 0;
  int heads = 0;

  InputSets(int n, int64_t q_rows_, int64_t kv_rows_, int heads_, cudaStream_t stream)
      : q_rows(q_rows_), kv_rows(kv_rows_), heads(heads_) {
    const int64_t width = static_cast<int64_t>(heads) * kHeadDim;
    const size_t qb = static_cast<size_t>(q_rows * width) * 2, kb = static_cast<size_t>(kv_rows * width) * 2;
    for (int s = 0; s < n; ++s) {
      q.push_back(std::make_unique<DeviceBuffer>(qb));
      k.push_back(std::make_unique<DeviceBuffer>(kb));
      v.push_back(std::make_unique<DeviceBuffer>(kb));
      o.push_back(std::make_unique<DeviceBuffer>(qb));
      kernels::fill_uniform_bf16(q[s]->as<__nv_bfloat16>(), q_rows * width, 1000 + s, -1.0f, 1.0f, stream);
      kernels::fill_uniform_bf16(k[s]->as<__nv_bfloat16>(), kv_rows * width, 2000 + s, -1.0f, 1.0f, stream);
      kernels::fill_uniform_bf16(v[s]->as<__nv_bfloat16>(), kv_rows * width, 3000 + s, -1.0f, 1.0f, stream);
    }
  }
  int size() const noexcept { return static_cast<int>(q.size()); }
  /// The kernel arguments of set `s` (scale 1/sqrt(128), no importance).
  kernels::AttentionArgs args(int s) const {
    kernels::AttentionArgs a;
    a.q = q[s]->as<__nv_bfloat16>();
    a.k = k[s]->as<__nv_bfloat16>();
    a.v = v[s]->as<__nv_bfloat16>();
    a.out = o[s]->as<__nv_bfloat16>();
    a.q_rows = q_rows;
    a.kv_rows = kv_rows;
    a.n_heads = heads;
    a.head_dim = kHeadDim;
    a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHeadDim)));
    return a;
  }
};

/// Throws when a kernel reported invalid input through the error flags.
inline void check_flags(const DeviceBuffer& flags_d) {
  int flags = 0;
  CUDA_CHECK(cudaMemcpy(&flags, flags_d.p, sizeof(int), cudaMemcpyDeviceToHost));
  if (flags != 0) throw std::runtime_error("kernel error flags set: " + std::to_string(flags));
}

struct WindowShape {
  long long slots = 0, q = 0, k = 0;
};

inline std::vector<WindowShape> parse_window_shapes(const std::string& s) {
  std::vector<WindowShape> out;
  for (const std::string& item : split(s)) {
    WindowShape w;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%lld:%lld:%lld%c", &w.slots, &w.q, &w.k, &tail) != 3 || w.slots < 1 || w.q < 1 ||
        w.k < 1)
      throw std::runtime_error("--window-shapes: '" + item + "' is not S:Q:K with positive integers");
    out.push_back(w);
  }
  return out;
}

/// The Flash-Cache block table of `w` (see the header comment), then its S score tiles (the windows):
/// (S + extra tiles + S) × 4 I32; `n_tiles` = the attention tiles.
inline std::vector<int32_t> window_table(const WindowShape& w, int64_t window_rows, int64_t tracked_tile_rows,
                                         int64_t& n_tiles) {
  std::vector<int32_t> t, rest, score;
  const auto W = static_cast<int32_t>(std::min<int64_t>(window_rows, w.q)), Q = static_cast<int32_t>(w.q);
  const int32_t n = Q - W;
  const int32_t cut = tracked_tile_rows > 0 ? static_cast<int32_t>(std::min<int64_t>(tracked_tile_rows, n)) : n;
  for (long long j = 0; j < w.slots; ++j) {
    const auto q0 = static_cast<int32_t>(j * Q), k0 = static_cast<int32_t>(j * w.k),
               k1 = static_cast<int32_t>((j + 1) * w.k);
    score.insert(score.end(), {q0, q0 + W, k0, k1});
    t.insert(t.end(), {q0, tracked_tile_rows > 0 ? q0 + W : q0 + Q, k0, k1});
    for (int32_t r = 0; tracked_tile_rows > 0 && r < n; r += cut)
      rest.insert(rest.end(), {q0 + W + r, q0 + W + std::min(n, r + cut), k0, k1});
  }
  t.insert(t.end(), rest.begin(), rest.end());
  n_tiles = static_cast<int64_t>(t.size() / 4);
  t.insert(t.end(), score.begin(), score.end());
  return t;
}

}  // namespace flashdllm::bench
