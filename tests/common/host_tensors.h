// Host data for CPU-backend op tests: seeded normal values and F32 tensor views over them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace flashdllm::test {

/// n values of N(0, sd²) from std::mt19937(seed) (the same values on every platform's libstdc++).
inline std::vector<float> randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

/// An F32 CPU tensor [rows, cols] over v's storage (v must hold rows·cols values and outlive it).
inline Tensor host(std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor(v.data(), DType::kF32, DeviceKind::kCPU, {rows, cols});
}

}  // namespace flashdllm::test
