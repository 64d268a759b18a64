// The mma.sync flash attention's entry points (attention.h): variant names and checks, the shipped
// instantiations of the kernel template (attention_flash_kernel.cuh: m64n64 and the Flash-Verify CTA
// shapes) and the dispatch to the wgmma kernel (attention_wgmma.cu).
#include <algorithm>
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_flash_common.cuh"
#include "kernels/cuda/attention_flash_kernel.cuh"
#include "kernels/cuda/attention_wgmma.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

#ifndef FLASHDLLM_HAVE_WGMMA
#define FLASHDLLM_HAVE_WGMMA 0
#endif

namespace flashdllm::kernels {
namespace {

using flash_mma::kHeadDim;
using flash_mma::launch_flash;

// 10·major + minor of the current device.
int device_compute_capability() {
  return 10 * detail::cached_device_attribute<cudaDevAttrComputeCapabilityMajor>() +
         detail::cached_device_attribute<cudaDevAttrComputeCapabilityMinor>();
}

}  // namespace

const char* flash_variant_name(FlashVariant v) noexcept {
  switch (v) {
    case FlashVariant::kM64N64: return "m64n64";
    case FlashVariant::kWgmma128: return "wgmma128";
    case FlashVariant::kWgmma64: return "wgmma64";
  }
  return "?";
}

int flash_block_m(FlashVariant v) noexcept { return v == FlashVariant::kWgmma128 ? 128 : 64; }

bool flash_wgmma_built() noexcept { return FLASHDLLM_HAVE_WGMMA != 0; }

bool flash_variant_runs_on(FlashVariant v, int cc_major, int cc_minor) noexcept {
  if (v == FlashVariant::kWgmma128 || v == FlashVariant::kWgmma64)
    return flash_wgmma_built() && cc_major == 9 && cc_minor == 0;
  return cc_major >= 8;
}

bool flash_supports_head_dim(int head_dim) noexcept { return head_dim == kHeadDim; }

void detail::check_flash_args(const char* op, const AttentionArgs& a, int64_t capacity) {
  if (!flash_supports_head_dim(a.head_dim))
    cuda::throw_unsupported(std::string(op) + ": head_dim " + std::to_string(a.head_dim) +
                            " has no flash kernel (supported: 128)");
  if (a.n_heads <= 0 || a.n_heads > 65535)
    cuda::throw_invalid_argument(std::string(op) + ": n_heads " + std::to_string(a.n_heads) + " outside [1, 65535]");
  if (a.kv_heads() <= 0 || a.n_heads % a.kv_heads() != 0)
    cuda::throw_invalid_argument(std::string(op) + ": n_kv_heads " + std::to_string(a.n_kv_heads) +
                                 " does not divide n_heads " + std::to_string(a.n_heads));
  if (!detail::is_aligned(a.q, 16) || !detail::is_aligned(a.k, 16) || !detail::is_aligned(a.v, 16) ||
      !detail::is_aligned(a.out, 16))
    cuda::throw_invalid_argument(std::string(op) + ": q, k_store, v_store and out must be 16-byte aligned");
  if (a.q_rows > 0x7fffffff || a.kv_rows > 0x7fffffff)
    cuda::throw_invalid_argument(std::string(op) + ": more than 2^31-1 query or K/V rows");
  if (capacity > 0x7fffffff / a.n_heads)  // the wgmma kernel counts (work item, head) units in int32
    cuda::throw_invalid_argument(std::string(op) + ": work capacity x n_heads exceeds 2^31-1");
}

void attention_flash(const AttentionArgs& a, FlashVariant variant, const AttentionWorkItem* work,
                     const int32_t* work_count, int64_t capacity, cudaStream_t stream) {
  detail::check_flash_args("attention", a, capacity);
  if (capacity <= 0) return;
  switch (variant) {
    case FlashVariant::kWgmma128:
    case FlashVariant::kWgmma64: {
      const int cc = device_compute_capability();
      if (!flash_variant_runs_on(variant, cc / 10, cc % 10))
        cuda::throw_unsupported(std::string("attention: the wgmma kernel needs an sm_90 device and a build with it (") +
                                (flash_wgmma_built() ? "built" : "not built") + ", device sm_" + std::to_string(cc) +
                                ")");
#if FLASHDLLM_HAVE_WGMMA
      attention_wgmma(a, variant == FlashVariant::kWgmma64 ? 1 : 2, work, work_count, capacity, stream);
#endif
      return;
    }
    case FlashVariant::kM64N64:
      launch_flash<64, 64, false>(a, work, work_count, capacity, VerifyKeys{}, stream);
      return;
  }
  cuda::throw_invalid_argument("attention: unknown flash variant");
}

int verify_block_m(const VerifyCta& cta) noexcept { return cta.key_split == 2 ? 32 : 64; }

VerifyCta verify_cta_for(int64_t n_ctas) {
  const int64_t sms = std::max(1, detail::cached_device_attribute<cudaDevAttrMultiProcessorCount>());
  const int64_t waves2 = (n_ctas + 2 * sms - 1) / (2 * sms), waves3 = (n_ctas + 3 * sms - 1) / (3 * sms);
  return 5 * waves3 < 4 * waves2 ? VerifyCta{2, 3} : VerifyCta{2, 2};
}

void attention_verify_flash(const AttentionArgs& a, const VerifyKeys& vk, const AttentionWorkItem* work,
                            const int32_t* work_count, int64_t capacity, cudaStream_t stream, const VerifyCta& cta) {
  detail::check_flash_args("attention_verify", a, capacity);
  if (!detail::is_aligned(vk.k_tile, 16) || !detail::is_aligned(vk.v_tile, 16))
    cuda::throw_invalid_argument("attention_verify: k_tile and v_tile must be 16-byte aligned");
  if (a.importance != nullptr) cuda::throw_invalid_argument("attention_verify: no importance in the verify pass");
  const int code = 10 * cta.key_split + cta.min_ctas_per_sm;
  if (code != 11 && code != 22 && code != 23)
    cuda::throw_invalid_argument("attention_verify: CTA shape key_split " + std::to_string(cta.key_split) +
                                 ", min_ctas_per_sm " + std::to_string(cta.min_ctas_per_sm) +
                                 " (built: 1/1, 2/2, 2/3)");
  if (capacity <= 0) return;
  if (code == 23)
    launch_flash<32, 64, true, 2, 3>(a, work, work_count, capacity, vk, stream);
  else if (code == 22)
    launch_flash<32, 64, true, 2, 2>(a, work, work_count, capacity, vk, stream);
  else
    launch_flash<64, 64, true, 1, 1>(a, work, work_count, capacity, vk, stream);
}

}  // namespace flashdllm::kernels
