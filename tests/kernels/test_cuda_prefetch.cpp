// kernels::l2_prefetch_rows (kernels/cuda/l2_prefetch.h) directly (CUDA builds with a GPU; skips
// otherwise): a prefetch of whole rows, of the first bytes of rows, of sizes off the 16-byte unit and
// past the row changes no memory and raises no error; bad arguments are refused; a build or device
// without the kernel says so. The backend-level hint (Backend::prefetch_matmul_weight) is covered by
// test_cuda_forward (logits bit for bit with and without it, eager and captured).
#include <gtest/gtest.h>

#if FLASHDLLM_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "flashdllm/status.h"
#include "kernels/cuda/l2_prefetch.h"

namespace flashdllm {
namespace {

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

class CudaL2Prefetch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device (built without CUDA or no GPU)";
  }
};

TEST_F(CudaL2Prefetch, ChangesNothingAndRefusesBadArguments) {
  constexpr int64_t kRows = 300, kStride = 8192;  // a bf16 weight [300, 4096]
  std::vector<uint8_t> host(static_cast<size_t>(kRows * kStride));
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 131 + 7);
  void* dev = nullptr;
  CUDA_OK(cudaMalloc(&dev, host.size()));
  CUDA_OK(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bool available = kernels::l2_prefetch_available();
  // (rows, bytes per row): whole rows (one contiguous range of 64 KiB pieces), the first bytes of
  // each row, a size off the 16-byte unit (rounded down), more than a row (capped), and no-ops.
  const std::vector<std::pair<int64_t, int64_t>> cases = {
      {kRows, kStride}, {kRows, 1024}, {kRows, 100}, {7, 3 * kStride}, {kRows, 15}, {0, kStride}, {1, 16}};
  for (const auto& [rows, per_row] : cases) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " bytes per row " + std::to_string(per_row));
    const bool noop = rows == 0 || per_row < 16;
    if (available || noop) {
      kernels::l2_prefetch_rows(dev, rows, kStride, per_row, stream);
    } else {
      try {
        kernels::l2_prefetch_rows(dev, rows, kStride, per_row, stream);
        ADD_FAILURE() << "a prefetch without the kernel must throw";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
      }
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaGetLastError());
  }
  std::vector<uint8_t> back(host.size());
  CUDA_OK(cudaMemcpy(back.data(), dev, back.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host) << "a prefetch changed memory";
  // Misaligned base or row stride, negative rows: Error(kInvalidArgument) naming the function.
  for (const auto& [base, stride, rows] : std::vector<std::tuple<const void*, int64_t, int64_t>>{
           {static_cast<const char*>(dev) + 8, kStride, kRows}, {dev, 24, 4}, {dev, kStride, -1}, {dev, 0, 4}}) {
    try {
      kernels::l2_prefetch_rows(base, rows, stride, 64, stream);
      ADD_FAILURE() << "stride " << stride << " rows " << rows << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("l2_prefetch_rows"), std::string::npos) << e.what();
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(dev));
}

}  // namespace
}  // namespace flashdllm
#endif
