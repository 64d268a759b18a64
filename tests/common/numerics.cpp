#include "common/numerics.h"

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

}  // namespace flashdllm::test
