#include "common/numerics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace flashdllm::test {

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  FDLLM_ASSERT(a.size() == b.size());
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

double max_abs(std::span<const float> ref) {
  double m = 0.0;
  for (float v : ref) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

double rel_max_err(std::span<const float> a, std::span<const float> ref) {
  double d = max_abs_diff(a, ref);
  double s = max_abs(ref);
  return s > 0 ? d / s : d;
}

double argmax_agreement(std::span<const float> a, std::span<const float> b, int64_t V) {
  FDLLM_CHECK_ARG(V > 0 && a.size() == b.size() && a.size() % static_cast<size_t>(V) == 0,
                  "argmax_agreement: {} and {} values are not the same whole rows of {}", a.size(), b.size(), V);
  const size_t rows = a.size() / static_cast<size_t>(V);
  if (rows == 0) return 1.0;
  size_t same = 0;
  for (size_t r = 0; r < rows; ++r) {
    const auto x = a.subspan(r * static_cast<size_t>(V), static_cast<size_t>(V));
    const auto y = b.subspan(r * static_cast<size_t>(V), static_cast<size_t>(V));
    same += std::max_element(x.begin(), x.end()) - x.begin() == std::max_element(y.begin(), y.end()) - y.begin();
  }
  return static_cast<double>(same) / static_cast<double>(rows);
}

}  // namespace flashdllm::test
