// Stand-in for builds without NCCL (FLASHDLLM_CUDA=OFF, or NCCL not found): the NCCL entry points
// of comm.h report that this build has none.
#include "backend/comm.h"
#include "core/check.h"

namespace flashdllm {
namespace {
[[noreturn]] void no_nccl() {
  FDLLM_FAIL(ErrorCode::kUnsupported,
             "this flashdllm was built without NCCL (multi-GPU tensor parallelism): configure with "
             "-DFLASHDLLM_CUDA=ON on a machine whose CUDA toolkit has NCCL (nccl.h, libnccl.so)");
}
}  // namespace

bool nccl_available() noexcept { return false; }
NcclUniqueId nccl_unique_id() { no_nccl(); }
std::unique_ptr<Communicator> make_nccl_communicator(Backend&, const NcclUniqueId&, int, int) { no_nccl(); }
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Backend*>&) { no_nccl(); }

}  // namespace flashdllm
