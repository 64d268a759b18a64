// Pure decision rules of the denoisers (reference §B quota split, §C threshold rule).
#include <gtest/gtest.h>

#include <vector>

#include "denoise/decode_rules.h"
#include "flashdllm/status.h"

namespace flashdllm {
namespace {

TEST(QuotaSchedule, SplitsEvenlyWithRemainderFirst) {
  EXPECT_EQ(quota_schedule(32, 8), (std::vector<int64_t>{4, 4, 4, 4, 4, 4, 4, 4}));
  EXPECT_EQ(quota_schedule(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(quota_schedule(3, 5), (std::vector<int64_t>{1, 1, 1, 0, 0}));
  EXPECT_EQ(quota_schedule(0, 2), (std::vector<int64_t>{0, 0}));
}

TEST(QuotaSchedule, SumsToMaskCount) {
  for (int64_t n = 0; n < 70; ++n)
    for (int64_t s = 1; s < 20; ++s) {
      int64_t sum = 0;
      for (int64_t q : quota_schedule(n, s)) sum += q;
      EXPECT_EQ(sum, n) << n << " " << s;
    }
}

TEST(QuotaSchedule, RejectsNonPositiveSteps) {
  EXPECT_THROW(quota_schedule(4, 0), Error);
  EXPECT_THROW(quota_schedule(-1, 2), Error);
}

TEST(TopK, PicksLargestAndBreaksTiesByIndex) {
  std::vector<double> c = {0.1, 0.9, 0.5, 0.9, 0.2};
  EXPECT_EQ(top_k_indices(c, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(top_k_indices(c, 3), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(top_k_indices(c, 0), (std::vector<int64_t>{}));
  EXPECT_EQ(top_k_indices(c, 99).size(), 5u);
}

TEST(Threshold, CommitsAllAboveAndAtLeastOne) {
  std::vector<double> c = {0.3, 0.95, 0.91, 0.2, 0.9};
  EXPECT_EQ(threshold_indices(c, 0.9), (std::vector<int64_t>{1, 2, 4}));  // >= is inclusive
  std::vector<double> low = {0.3, 0.5, 0.4};
  EXPECT_EQ(threshold_indices(low, 0.9), (std::vector<int64_t>{1}));  // top-1 even below ε
  EXPECT_TRUE(threshold_indices(std::vector<double>{}, 0.9).empty());
}

}  // namespace
}  // namespace flashdllm
