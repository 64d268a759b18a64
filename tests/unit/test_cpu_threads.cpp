// CPU backend thread counts (issue 15, item 9): negative counts and counts above
// max_cpu_threads() (4 x the hardware threads) are refused with Error(kInvalidArgument) naming
// `threads`; 100000 used to overflow libgomp's stacks inside the attention's parallel region.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backend/backend.h"
#include "common/expect_error.h"

namespace flashdllm {
namespace {

TEST(CpuBackendThreads, CountsOutsideTheRangeAreRefused) {
  const int max = max_cpu_threads();
  EXPECT_GE(max, 4);
  test::expect_error([] { make_cpu_backend(-1); }, ErrorCode::kInvalidArgument, {"threads = -1"});
  test::expect_error([&] { make_cpu_backend(max + 1); }, ErrorCode::kInvalidArgument,
                     {fmt::format("threads = {}", max + 1), fmt::format("[0, {}]", max)});
  test::expect_error([] { make_cpu_backend(100000); }, ErrorCode::kInvalidArgument, {"threads = 100000"});
  EXPECT_NE(make_cpu_backend(max)->name().find(fmt::format("{} threads", max)), std::string::npos);
}

}  // namespace
}  // namespace flashdllm
