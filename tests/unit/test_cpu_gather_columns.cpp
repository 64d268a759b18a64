// Backend::gather_columns on the CPU backend (the CUDA twin is in tests/kernels/test_cuda_ops.cpp):
// one element per row, NaN for a column outside the row, operand errors naming the operand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "common/expect_error.h"

namespace flashdllm {
namespace {

TEST(CpuGatherColumns, OneElementPerRowAndNanOutside) {
  auto be = make_cpu_backend(1);
  std::vector<float> x = {0.5f, 1.5f, 2.5f,  //
                          -1.f, -2.f, -3.f,  //
                          7.f,  8.f,  9.f,   //
                          4.f,  5.f,  6.f};
  std::vector<int32_t> cols = {2, 0, -1, 3};
  std::vector<float> out(4, 0.f);
  const Tensor xt(x.data(), DType::kF32, DeviceKind::kCPU, {4, 3});
  const Tensor ct(cols.data(), DType::kI32, DeviceKind::kCPU, {4});
  const Tensor ot(out.data(), DType::kF32, DeviceKind::kCPU, {4});
  be->gather_columns(xt, ct, ot);
  EXPECT_EQ(out[0], 2.5f);
  EXPECT_EQ(out[1], -1.f);
  EXPECT_TRUE(std::isnan(out[2]));  // -1: before the row
  EXPECT_TRUE(std::isnan(out[3]));  // 3 = V: past the row, not the next row's first element
}

TEST(CpuGatherColumns, OperandsAreChecked) {
  auto be = make_cpu_backend(1);
  std::vector<float> x(6), out(2);
  std::vector<int32_t> cols(3);
  const Tensor xt(x.data(), DType::kF32, DeviceKind::kCPU, {2, 3});
  test::expect_error(
      [&] {
        be->gather_columns(xt, Tensor(cols.data(), DType::kI32, DeviceKind::kCPU, {3}),
                           Tensor(out.data(), DType::kF32, DeviceKind::kCPU, {2}));
      },
      ErrorCode::kInvalidArgument, {"gather_columns", "2 rows"});
  test::expect_error(
      [&] {
        be->gather_columns(xt, Tensor(cols.data(), DType::kF32, DeviceKind::kCPU, {2}),
                           Tensor(out.data(), DType::kF32, DeviceKind::kCPU, {2}));
      },
      ErrorCode::kInvalidArgument, {"gather_columns", "cols"});
}

}  // namespace
}  // namespace flashdllm
