#include "kernels/cuda/launch.h"

#include <atomic>

namespace flashdllm::kernels {
namespace {
std::atomic<bool> g_dependent_launch{true};
}  // namespace

void set_dependent_launch(bool on) noexcept { g_dependent_launch.store(on, std::memory_order_relaxed); }
bool dependent_launch() noexcept { return g_dependent_launch.load(std::memory_order_relaxed); }

}  // namespace flashdllm::kernels
