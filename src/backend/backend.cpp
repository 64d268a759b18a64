// make_backend: the one place a device string becomes a backend (engine and `flashdllm info`).
#include <string>

#include "backend/backend.h"
#include "core/check.h"

namespace flashdllm {

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  if (device == "cpu") return make_cpu_backend(threads);
  if (device == "cuda") return make_cuda_backend(0);
  if (device.rfind("cuda:", 0) == 0) {
    int index = -1;
    try {
      size_t used = 0;
      index = std::stoi(device.substr(5), &used);
      if (used != device.size() - 5) index = -1;
    } catch (...) {
    }
    FDLLM_CHECK_ARG(index >= 0, "device '{}': expected cuda:<index>", device);
    return make_cuda_backend(index);
  }
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "unknown device '{}' (use cpu, cuda or cuda:N)", device);
}

}  // namespace flashdllm
