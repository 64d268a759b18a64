// Reference attention: one warp per (query row, head), scalar fp32, straight from the block
// table; query head h reads K/V head AttentionArgs::kv_head_of(h) (grouped-query attention). Deliberately simple (see
// attention.h); used as a second oracle for the flash kernel and selectable in the backend with
// FLASHDLLM_ATTENTION=reference.
#include <string>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kRefThreads = 256;
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256

// grid = (tiles, heads); each warp walks the tile's query rows with stride = warps per block.
__global__ void __launch_bounds__(kRefThreads)
    attention_reference_kernel(const AttentionArgs a, const int32_t* __restrict__ table, int* error_flags) {
  const int64_t tile = blockIdx.x;
  const int head = blockIdx.y;
  const int32_t qs = table[4 * tile + 0], qe = table[4 * tile + 1];
  const int32_t ks = table[4 * tile + 2], ke = table[4 * tile + 3];
  if (!detail::attention_tile_valid(qs, qe, ks, ke, a.q_rows, a.kv_rows)) {
    if (threadIdx.x == 0 && error_flags) atomicOr(error_flags, kErrAttentionTile);
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int kWarps = kRefThreads / 32;
  const int dpl = a.head_dim / 32;  // dims per lane; lane owns dims lane + 32·i
  const int64_t ld = static_cast<int64_t>(a.n_heads) * a.head_dim;        // q / out row pitch
  const int64_t kv_ld = static_cast<int64_t>(a.kv_heads()) * a.head_dim;  // K/V row pitch
  const int64_t hoff = static_cast<int64_t>(head) * a.head_dim;
  const int64_t kv_off = static_cast<int64_t>(a.kv_head_of(head)) * a.head_dim;

  for (int64_t row = qs + warp; row < qe; row += kWarps) {
    float qv[kMaxDimsPerLane], acc[kMaxDimsPerLane];
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      qv[i] = i < dpl ? __bfloat162float(a.q[row * ld + hoff + lane + 32 * i]) : 0.f;
      acc[i] = 0.f;
    }
    float m = -__int_as_float(0x7f800000), l = 0.f;
    for (int64_t key = ks; key < ke; ++key) {
      const __nv_bfloat16* kr = a.k + key * kv_ld + kv_off;
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i)
        if (i < dpl) dot += qv[i] * __bfloat162float(kr[lane + 32 * i]);
      const float sc = detail::warp_sum(dot) * a.scale;
      const float m_new = fmaxf(m, sc);
      const float corr = expf(m - m_new);  // exp(-inf) = 0 on the first key
      const float p = expf(sc - m_new);
      l = l * corr + p;
      const __nv_bfloat16* vr = a.v + key * kv_ld + kv_off;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i)
        if (i < dpl) acc[i] = acc[i] * corr + p * __bfloat162float(vr[lane + 32 * i]);
      m = m_new;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i)
      if (i < dpl) a.out[row * ld + hoff + lane + 32 * i] = __float2bfloat16_rn(acc[i] * inv);
  }
}

}  // namespace

void attention_reference(const AttentionArgs& a, const int32_t* table, int64_t n_tiles, int* error_flags,
                         cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim % 32 != 0 || a.head_dim > 32 * kMaxDimsPerLane)
    cuda::throw_unsupported("attention (reference kernel): head_dim " + std::to_string(a.head_dim) +
                            " unsupported (needs a multiple of 32, at most 256)");
  if (a.n_heads <= 0 || a.n_heads > 65535)
    cuda::throw_invalid_argument("attention: n_heads " + std::to_string(a.n_heads) + " outside [1, 65535]");
  if (a.kv_heads() <= 0 || a.n_heads % a.kv_heads() != 0)
    cuda::throw_invalid_argument("attention: n_kv_heads " + std::to_string(a.n_kv_heads) + " does not divide n_heads " +
                                 std::to_string(a.n_heads));
  if (n_tiles <= 0) return;
  if (n_tiles > 0x7fffffff) cuda::throw_invalid_argument("attention: more than 2^31-1 tiles");
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(a.n_heads));
  attention_reference_kernel<<<grid, kRefThreads, 0, stream>>>(a, table, error_flags);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
