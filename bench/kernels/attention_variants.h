// Flash attention tile shapes that no policy picks (bench only; bench/kernels/README.md): the
// mma.sync kernel with 128-row CTAs (8 warps) over 64- or 128-key tiles, and the Hopper wgmma kernel
// with 64-key tiles (two consumer warpgroups, six K and four V stages). They are instantiations of
// the shipped kernels' templates (src/kernels/cuda/attention_flash_kernel.cuh,
// attention_wgmma_kernel.cuh), with the contract of kernels::attention_flash (attention.h);
// bench/attention_variants_bench checks each against the shipped variant of the same kernel and
// times both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace flashdllm::bench {

enum class BenchFlashVariant {
  kM128N64,       ///< "m128n64": mma.sync, 128 query rows x 64 keys per step (sm_80+)
  kM128N128,      ///< "m128n128": mma.sync, 128 x 128 (sm_80+)
  kWgmmaM128N64,  ///< "wgmma_m128n64": Hopper wgmma, 128 x 64 (sm_90, builds with CUTLASS)
};

/// "m128n64", "m128n128", "wgmma_m128n64".
const char* bench_variant_name(BenchFlashVariant v) noexcept;
/// Query rows per work item (attention_plan's block_m): 128 for all three.
int bench_variant_block_m(BenchFlashVariant v) noexcept;
/// The shipped variant of the same kernel, the one it is measured against: m64n64 for the mma.sync
/// shapes, wgmma128 for wgmma_m128n64.
kernels::FlashVariant bench_variant_shipped_twin(BenchFlashVariant v) noexcept;
/// True when this build has the variant's code for devices of compute capability major.minor.
bool bench_variant_runs_on(BenchFlashVariant v, int cc_major, int cc_minor) noexcept;

/// kernels::attention_flash for a bench variant: same preconditions and errors (Error(kUnsupported)
/// for wgmma_m128n64 where bench_variant_runs_on is false for the current device), work planned with
/// block_m 128.
void attention_flash_bench(const kernels::AttentionArgs& args, BenchFlashVariant variant,
                           const kernels::AttentionWorkItem* work, const int32_t* work_count, int64_t capacity,
                           cudaStream_t stream);

/// The wgmma kernel with 64-key tiles and two consumers (attention_wgmma_variants.cu, sm_90a; only in
/// builds with FLASHDLLM_BENCH_HAVE_WGMMA). attention_flash_bench checks the arguments and device.
void attention_wgmma_m128n64(const kernels::AttentionArgs& args, const kernels::AttentionWorkItem* work,
                             const int32_t* work_count, int64_t capacity, cudaStream_t stream);

}  // namespace flashdllm::bench
