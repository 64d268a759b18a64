#include "kernels/cuda/rope_store.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 256;

// 8 consecutive pairs (x1[0..8), x2[0..8)) with c[0..8), s[0..8): 16-byte loads and stores.
__device__ __forceinline__ void rotate8(const __nv_bfloat16* x1, const __nv_bfloat16* x2, const float4* c,
                                        const float4* s, __nv_bfloat16* o1, __nv_bfloat16* o2) {
  const uint4 a = *reinterpret_cast<const uint4*>(x1), b = *reinterpret_cast<const uint4*>(x2);
  const float4 c0 = c[0], c1 = c[1], s0 = s[0], s1 = s[1];
  const float cc[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  const float ss[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  const auto* av = reinterpret_cast<const __nv_bfloat16*>(&a);
  const auto* bv = reinterpret_cast<const __nv_bfloat16*>(&b);
  uint4 ra, rb;
  auto* ro1 = reinterpret_cast<__nv_bfloat16*>(&ra);
  auto* ro2 = reinterpret_cast<__nv_bfloat16*>(&rb);
#pragma unroll
  for (int e = 0; e < 8; ++e)
    detail::rope_rotate(__bfloat162float(av[e]), __bfloat162float(bv[e]), cc[e], ss[e], &ro1[e], &ro2[e]);
  *reinterpret_cast<uint4*>(o1) = ra;
  *reinterpret_cast<uint4*>(o2) = rb;
}

// One block per token: threads stride over the H·Dh/2 rotation pairs (kVec: 8 at a time, 16-byte
// accesses; needs Dh/2 % 8 == 0 and 16-byte aligned rows), then over the H·Dh values of v.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) rope_store_kernel(RopeStoreArgs a) {
  const int64_t t = blockIdx.x;
  const int half = a.head_dim / 2;
  const int64_t width = static_cast<int64_t>(a.n_heads) * a.head_dim;  // H·Dh
  const __nv_bfloat16* q = a.qkv + t * 3 * width;
  const __nv_bfloat16* k = q + width;
  const __nv_bfloat16* v = q + 2 * width;
  __nv_bfloat16* qo = a.q_out + t * width;
  const int32_t pos = a.positions[t];
  const int32_t row = a.rows[t];
  const bool pos_ok = pos >= 0 && pos < a.max_positions;
  const bool row_ok = row >= 0 && row < a.store_rows;
  if (threadIdx.x == 0 && a.error_flags) {
    if (!pos_ok) atomicOr(a.error_flags, kErrRopePosition);
    if (!row_ok) atomicOr(a.error_flags, kErrStoreRow);
  }
  if (!pos_ok) {
    for (int64_t j = threadIdx.x; j < width; j += kThreads) qo[j] = detail::bf16_nan();
    return;
  }
  const float* cr = a.cos + static_cast<int64_t>(pos) * half;
  const float* sr = a.sin + static_cast<int64_t>(pos) * half;
  __nv_bfloat16* ko = row_ok ? a.k_store + static_cast<int64_t>(row) * width : nullptr;
  __nv_bfloat16* vo = row_ok ? a.v_store + static_cast<int64_t>(row) * width : nullptr;
  constexpr int kStep = kVec ? 8 : 1;  // pairs per thread and step
  const int64_t pairs = static_cast<int64_t>(a.n_heads) * half;
  for (int64_t p = threadIdx.x * kStep; p < pairs; p += kThreads * kStep) {
    const int64_t h = p / half;
    const int i = static_cast<int>(p - h * half);
    const int64_t j1 = h * a.head_dim + i, j2 = j1 + half;
    if constexpr (kVec) {
      const auto* c4 = reinterpret_cast<const float4*>(cr + i);
      const auto* s4 = reinterpret_cast<const float4*>(sr + i);
      rotate8(q + j1, q + j2, c4, s4, qo + j1, qo + j2);
      if (row_ok) rotate8(k + j1, k + j2, c4, s4, ko + j1, ko + j2);
    } else {
      const float c = cr[i], s = sr[i];
      detail::rope_rotate(__bfloat162float(q[j1]), __bfloat162float(q[j2]), c, s, &qo[j1], &qo[j2]);
      if (row_ok) detail::rope_rotate(__bfloat162float(k[j1]), __bfloat162float(k[j2]), c, s, &ko[j1], &ko[j2]);
    }
  }
  if (row_ok)
    for (int64_t j = threadIdx.x * kStep; j < width; j += kThreads * kStep) {
      if constexpr (kVec)
        *reinterpret_cast<uint4*>(vo + j) = *reinterpret_cast<const uint4*>(v + j);
      else
        vo[j] = v[j];
    }
}


}  // namespace

void rope_store_bf16(const RopeStoreArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  if (args.tokens > 0x7fffffff) cuda::throw_invalid_argument("qkv_rope_store: more than 2^31-1 tokens");
  if (args.head_dim <= 0 || args.head_dim % 2 != 0 || args.n_heads <= 0)
    cuda::throw_invalid_argument("qkv_rope_store: head_dim must be positive and even, n_heads positive (got head_dim " +
                                 std::to_string(args.head_dim) + ", n_heads " + std::to_string(args.n_heads) + ")");
  // 16-byte accesses when every row (q, k, v, q_out, store rows: H·Dh bf16; cos / sin rows: Dh/2 fp32)
  // and every 8-pair group starts 16-byte aligned.
  const bool vec = (args.head_dim / 2) % 8 == 0 && detail::is_aligned(args.qkv, 16) &&
                   detail::is_aligned(args.q_out, 16) && detail::is_aligned(args.k_store, 16) &&
                   detail::is_aligned(args.v_store, 16) && detail::is_aligned(args.cos, 16) &&
                   detail::is_aligned(args.sin, 16);
  if (vec)
    rope_store_kernel<true><<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  else
    rope_store_kernel<false><<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
