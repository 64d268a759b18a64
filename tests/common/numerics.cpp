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

double argmax_agreement(std::span<const float> a, std::span<const float> b, int64_t V, double min_gap) {
  FDLLM_CHECK_ARG(V > 0 && a.size() == b.size() && a.size() % static_cast<size_t>(V) == 0,
                  "argmax_agreement: {} and {} values are not the same whole rows of {}", a.size(), b.size(), V);
  const size_t rows = a.size() / static_cast<size_t>(V);
  size_t same = 0, counted = 0;
  for (size_t r = 0; r < rows; ++r) {
    const auto x = a.subspan(r * static_cast<size_t>(V), static_cast<size_t>(V));
    const auto y = b.subspan(r * static_cast<size_t>(V), static_cast<size_t>(V));
    const auto top = std::max_element(y.begin(), y.end());
    if (min_gap > 0 && V > 1) {  // the gap between b's top two values
      float second = -std::numeric_limits<float>::infinity();
      for (auto it = y.begin(); it != y.end(); ++it)
        if (it != top) second = std::max(second, *it);
      if (static_cast<double>(*top) - static_cast<double>(second) < min_gap) continue;
    }
    ++counted;
    same += std::max_element(x.begin(), x.end()) - x.begin() == top - y.begin();
  }
  return counted == 0 ? 1.0 : static_cast<double>(same) / static_cast<double>(counted);
}

}  // namespace flashdllm::test
