// The bench-only flash variants (attention_variants.h): the mma.sync kernel template
// (src/kernels/cuda/attention_flash_kernel.cuh) instantiated with 128-row CTAs, and the dispatch to
// the wgmma one with 64-key tiles (attention_wgmma_variants.cu).
#include <string>

#include "bench/kernels/attention_variants.h"
#include "kernels/cuda/attention_flash_common.cuh"
#include "kernels/cuda/attention_flash_kernel.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

#ifndef FLASHDLLM_BENCH_HAVE_WGMMA
#define FLASHDLLM_BENCH_HAVE_WGMMA 0
#endif

namespace flashdllm::bench {

const char* bench_variant_name(BenchFlashVariant v) noexcept {
  switch (v) {
    case BenchFlashVariant::kM128N64: return "m128n64";
    case BenchFlashVariant::kM128N128: return "m128n128";
    case BenchFlashVariant::kWgmmaM128N64: return "wgmma_m128n64";
  }
  return "?";
}

int bench_variant_block_m(BenchFlashVariant) noexcept { return 128; }

kernels::FlashVariant bench_variant_shipped_twin(BenchFlashVariant v) noexcept {
  return v == BenchFlashVariant::kWgmmaM128N64 ? kernels::FlashVariant::kWgmma128 : kernels::FlashVariant::kM64N64;
}

bool bench_variant_runs_on(BenchFlashVariant v, int cc_major, int cc_minor) noexcept {
  if (v == BenchFlashVariant::kWgmmaM128N64) return FLASHDLLM_BENCH_HAVE_WGMMA != 0 && cc_major == 9 && cc_minor == 0;
  return cc_major >= 8;
}

void attention_flash_bench(const kernels::AttentionArgs& a, BenchFlashVariant variant,
                           const kernels::AttentionWorkItem* work, const int32_t* work_count, int64_t capacity,
                           cudaStream_t stream) {
  kernels::detail::check_flash_args("attention", a, capacity);
  const int major = kernels::detail::cached_device_attribute<cudaDevAttrComputeCapabilityMajor>();
  const int minor = kernels::detail::cached_device_attribute<cudaDevAttrComputeCapabilityMinor>();
  if (!bench_variant_runs_on(variant, major, minor))
    cuda::throw_unsupported(std::string("attention: ") + bench_variant_name(variant) +
                            " does not run here (device sm_" + std::to_string(10 * major + minor) + ")");
  if (capacity <= 0) return;
  using kernels::flash_mma::launch_flash;
  switch (variant) {
    case BenchFlashVariant::kM128N64:
      launch_flash<128, 64, false>(a, work, work_count, capacity, kernels::VerifyKeys{}, stream);
      return;
    case BenchFlashVariant::kM128N128:
      launch_flash<128, 128, false>(a, work, work_count, capacity, kernels::VerifyKeys{}, stream);
      return;
    case BenchFlashVariant::kWgmmaM128N64:
#if FLASHDLLM_BENCH_HAVE_WGMMA
      attention_wgmma_m128n64(a, work, work_count, capacity, stream);
#endif
      return;
  }
  cuda::throw_invalid_argument("attention: unknown bench flash variant");
}

}  // namespace flashdllm::bench
