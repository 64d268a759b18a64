#include "kernels/cuda/rope_store.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 256;

// Rotates one (x1, x2) pair with separately rounded fp32 products and sums.
__device__ __forceinline__ void rotate(float x1, float x2, float c, float s, __nv_bfloat16* o1, __nv_bfloat16* o2) {
  *o1 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, s)));
  *o2 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

// One block per token: threads stride over the H·Dh/2 rotation pairs, then over the H·Dh values of v.
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
  const int64_t pairs = static_cast<int64_t>(a.n_heads) * half;
  for (int64_t p = threadIdx.x; p < pairs; p += kThreads) {
    const int64_t h = p / half;
    const int i = static_cast<int>(p - h * half);
    const int64_t j1 = h * a.head_dim + i, j2 = j1 + half;
    const float c = cr[i], s = sr[i];
    rotate(__bfloat162float(q[j1]), __bfloat162float(q[j2]), c, s, &qo[j1], &qo[j2]);
    if (row_ok) rotate(__bfloat162float(k[j1]), __bfloat162float(k[j2]), c, s, &ko[j1], &ko[j2]);
  }
  if (row_ok)
    for (int64_t j = threadIdx.x; j < width; j += kThreads) vo[j] = v[j];
}

}  // namespace

void rope_store_bf16(const RopeStoreArgs& args, cudaStream_t stream) {
  if (args.tokens <= 0) return;
  if (args.tokens > 0x7fffffff) cuda::throw_invalid_argument("qkv_rope_store: more than 2^31-1 tokens");
  if (args.head_dim <= 0 || args.head_dim % 2 != 0 || args.n_heads <= 0)
    cuda::throw_invalid_argument("qkv_rope_store: head_dim must be positive and even, n_heads positive (got head_dim " +
                                 std::to_string(args.head_dim) + ", n_heads " + std::to_string(args.n_heads) + ")");
  rope_store_kernel<<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
