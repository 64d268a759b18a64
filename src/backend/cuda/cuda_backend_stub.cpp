// Stand-in for builds without CUDA (FLASHDLLM_CUDA=OFF): reports that the CUDA backend is absent.
#include "backend/backend.h"
#include "core/check.h"

namespace flashdllm {

std::unique_ptr<Backend> make_cuda_backend(int /*device_index*/, const BackendOptions& /*options*/) {
  FDLLM_FAIL(ErrorCode::kUnsupported, "this flashdllm was built without CUDA: configure with -DFLASHDLLM_CUDA=ON");
}

bool cuda_available() noexcept { return false; }
int cuda_device_count() noexcept { return 0; }

}  // namespace flashdllm
