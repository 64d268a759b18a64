// make_backend: the one place a device string becomes a backend (engine, tensor-parallel ranks and
// `flashdllm info`).
#include <algorithm>
#include <string>
#include <thread>

#include "backend/backend.h"
#include "core/check.h"

namespace flashdllm {

std::unique_ptr<Backend> make_backend(const std::string& device, int threads, int rank, int world,
                                      const BackendOptions& options) {
  FDLLM_CHECK_ARG(world >= 1 && rank >= 0 && rank < world, "backend rank {} outside [0, world size {})", rank, world);
  if (device == "cpu") {
    if (world == 1) return make_cpu_backend(threads, options);
    check_cpu_threads(threads);  // before the count is split
    const int all = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return make_cpu_backend(std::max(1, all / world), options);
  }
  int index = 0;
  if (device.rfind("cuda:", 0) == 0) {
    index = -1;
    try {
      size_t used = 0;
      index = std::stoi(device.substr(5), &used);
      if (used != device.size() - 5) index = -1;
    } catch (...) {
    }
    FDLLM_CHECK_ARG(index >= 0, "device '{}': expected cuda:<index>", device);
  } else {
    FDLLM_CHECK_ARG(device == "cuda", "unknown device '{}' (use cpu, cuda or cuda:N)", device);
  }
  if (world > 1)
    FDLLM_CHECK_ARG(index + world <= cuda_device_count(),
                    "{} GPUs (tensor_parallel x data_parallel) on device '{}' need GPUs {}..{}, but {} CUDA "
                    "device(s) are present",
                    world, device, index, index + world - 1, cuda_device_count());
  return make_cuda_backend(index + rank, options);
}

}  // namespace flashdllm
