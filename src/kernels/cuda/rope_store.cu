#include "kernels/cuda/rope_store.h"

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 256;

// Loads 8 bf16 values from x (plus, with b, the 8 bf16 biases in fp32) into fp32: 16-byte loads.
__device__ __forceinline__ void load8(const __nv_bfloat16* x, const __nv_bfloat16* b, float out[8]) {
  const uint4 a = *reinterpret_cast<const uint4*>(x);
  const auto* av = reinterpret_cast<const __nv_bfloat16*>(&a);
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = __bfloat162float(av[e]);
  if (b != nullptr) {
    const uint4 bb = *reinterpret_cast<const uint4*>(b);
    const auto* bv = reinterpret_cast<const __nv_bfloat16*>(&bb);
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = __fadd_rn(out[e], __bfloat162float(bv[e]));
  }
}

// 8 consecutive pairs (x1[0..8), x2[0..8)) with their biases (b1, b2, or null) and c[0..8), s[0..8):
// 16-byte loads and stores.
__device__ __forceinline__ void rotate8(const __nv_bfloat16* x1, const __nv_bfloat16* x2, const __nv_bfloat16* b1,
                                        const __nv_bfloat16* b2, const float4* c, const float4* s, __nv_bfloat16* o1,
                                        __nv_bfloat16* o2) {
  float a[8], b[8];
  load8(x1, b1, a);
  load8(x2, b2, b);
  const float4 c0 = c[0], c1 = c[1], s0 = s[0], s1 = s[1];
  const float cc[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
  const float ss[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
  uint4 ra, rb;
  auto* ro1 = reinterpret_cast<__nv_bfloat16*>(&ra);
  auto* ro2 = reinterpret_cast<__nv_bfloat16*>(&rb);
#pragma unroll
  for (int e = 0; e < 8; ++e) detail::rope_rotate(a[e], b[e], cc[e], ss[e], &ro1[e], &ro2[e]);
  *reinterpret_cast<uint4*>(o1) = ra;
  *reinterpret_cast<uint4*>(o2) = rb;
}

// The fp32 value of x[j] (+ b[j]).
__device__ __forceinline__ float biased(const __nv_bfloat16* x, const __nv_bfloat16* b, int64_t j) {
  const float v = __bfloat162float(x[j]);
  return b != nullptr ? __fadd_rn(v, __bfloat162float(b[j])) : v;
}

// RoPE on the heads*Dh/2 pairs of one row segment x (bias b or null) into o: threads stride over
// the pairs (kVec: 8 at a time).
template <bool kVec>
__device__ __forceinline__ void rotate_heads(const __nv_bfloat16* x, const __nv_bfloat16* b, int heads, int head_dim,
                                             const float* cr, const float* sr, __nv_bfloat16* o) {
  const int half = head_dim / 2;
  constexpr int kStep = kVec ? 8 : 1;  // pairs per thread and step
  const int64_t pairs = static_cast<int64_t>(heads) * half;
  for (int64_t p = threadIdx.x * kStep; p < pairs; p += kThreads * kStep) {
    const int64_t h = p / half;
    const int i = static_cast<int>(p - h * half);
    const int64_t j1 = h * head_dim + i, j2 = j1 + half;
    if constexpr (kVec) {
      rotate8(x + j1, x + j2, b ? b + j1 : nullptr, b ? b + j2 : nullptr, reinterpret_cast<const float4*>(cr + i),
              reinterpret_cast<const float4*>(sr + i), o + j1, o + j2);
    } else {
      detail::rope_rotate(biased(x, b, j1), biased(x, b, j2), cr[i], sr[i], &o[j1], &o[j2]);
    }
  }
}

// v (+ bias b, rounded to bf16) of kw columns into the store row vo; threads stride over the columns.
template <bool kVec>
__device__ __forceinline__ void store_v(const __nv_bfloat16* v, const __nv_bfloat16* bv, int64_t kw,
                                        __nv_bfloat16* vo) {
  constexpr int kStep = kVec ? 8 : 1;
  for (int64_t j = threadIdx.x * kStep; j < kw; j += kThreads * kStep) {
    if constexpr (kVec) {
      if (bv == nullptr) {
        *reinterpret_cast<uint4*>(vo + j) = *reinterpret_cast<const uint4*>(v + j);
      } else {
        float f[8];
        load8(v + j, bv + j, f);
        uint4 r;
        auto* rv = reinterpret_cast<__nv_bfloat16*>(&r);
#pragma unroll
        for (int e = 0; e < 8; ++e) rv[e] = __float2bfloat16_rn(f[e]);
        *reinterpret_cast<uint4*>(vo + j) = r;
      }
    } else {
      vo[j] = bv == nullptr ? v[j] : __float2bfloat16_rn(biased(v, bv, j));
    }
  }
}

// One block per token: RoPE on the H query heads into q_out and the Hkv key heads into the K store
// row, then v (+ bias) into the V store row. kVec: 16-byte accesses; needs Dh/2 % 8 == 0 and 16-byte
// aligned rows.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) rope_store_kernel(RopeStoreArgs a) {
  const int64_t t = blockIdx.x;
  const int64_t qw = static_cast<int64_t>(a.n_heads) * a.head_dim;     // H·Dh
  const int64_t kw = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;  // Hkv·Dh
  const __nv_bfloat16* q = a.qkv + t * (qw + 2 * kw);
  const __nv_bfloat16* k = q + qw;
  const __nv_bfloat16* v = k + kw;
  const __nv_bfloat16* bq = a.bias;
  const __nv_bfloat16* bk = bq ? bq + qw : nullptr;
  const __nv_bfloat16* bv = bq ? bk + kw : nullptr;
  __nv_bfloat16* qo = a.q_out + t * qw;
  const int32_t pos = a.positions[t];
  const int32_t row = a.rows[t];
  const bool pos_ok = pos >= 0 && pos < a.max_positions;
  const bool row_ok = row >= 0 && row < a.store_rows;
  if (threadIdx.x == 0 && a.error_flags) {
    if (!pos_ok) atomicOr(a.error_flags, kErrRopePosition);
    if (!row_ok) atomicOr(a.error_flags, kErrStoreRow);
  }
  if (!pos_ok) {
    for (int64_t j = threadIdx.x; j < qw; j += kThreads) qo[j] = detail::bf16_nan();
    return;
  }
  const float* cr = a.cos + static_cast<int64_t>(pos) * (a.head_dim / 2);
  const float* sr = a.sin + static_cast<int64_t>(pos) * (a.head_dim / 2);
  rotate_heads<kVec>(q, bq, a.n_heads, a.head_dim, cr, sr, qo);
  if (!row_ok) return;
  rotate_heads<kVec>(k, bk, a.n_kv_heads, a.head_dim, cr, sr, a.k_store + static_cast<int64_t>(row) * kw);
  store_v<kVec>(v, bv, kw, a.v_store + static_cast<int64_t>(row) * kw);
}

// The QK-norm variant (RopeStoreArgs::q_norm): one block per token, one warp per head (the H query
// heads, then the Hkv key heads when the store row is valid). A lane holds the pairs (i, i + Dh/2)
// for i = lane, lane + 32, ...: the head's fp32 sum of squares is a warp sum, then each pair is
// normalised (Backend::rmsnorm's cast order), scaled by its weights and rotated.
__global__ void __launch_bounds__(kThreads) rope_store_qknorm_kernel(RopeStoreArgs a) {
  constexpr int kWarps = kThreads / 32;
  const int64_t t = blockIdx.x;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t qw = static_cast<int64_t>(a.n_heads) * a.head_dim;     // H·Dh
  const int64_t kw = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;  // Hkv·Dh
  const __nv_bfloat16* q = a.qkv + t * (qw + 2 * kw);
  const __nv_bfloat16* bq = a.bias;
  const int32_t pos = a.positions[t];
  const int32_t row = a.rows[t];
  const bool pos_ok = pos >= 0 && pos < a.max_positions;
  const bool row_ok = row >= 0 && row < a.store_rows;
  if (threadIdx.x == 0 && a.error_flags) {
    if (!pos_ok) atomicOr(a.error_flags, kErrRopePosition);
    if (!row_ok) atomicOr(a.error_flags, kErrStoreRow);
  }
  __nv_bfloat16* qo = a.q_out + t * qw;
  if (!pos_ok) {
    for (int64_t j = threadIdx.x; j < qw; j += kThreads) qo[j] = detail::bf16_nan();
    return;
  }
  const int half = a.head_dim / 2;
  const float* cr = a.cos + static_cast<int64_t>(pos) * half;
  const float* sr = a.sin + static_cast<int64_t>(pos) * half;
  const int heads = a.n_heads + (row_ok ? a.n_kv_heads : 0);
  for (int h = warp; h < heads; h += kWarps) {
    const bool is_q = h < a.n_heads;
    const int64_t col = static_cast<int64_t>(h) * a.head_dim;  // q | k columns of the row (and bias)
    const __nv_bfloat16* w = is_q ? a.q_norm : a.k_norm;
    __nv_bfloat16* o = is_q ? qo + col : a.k_store + static_cast<int64_t>(row) * kw + (col - qw);
    float ss = 0.f;
    for (int i = lane; i < half; i += 32) {
      const float x1 = biased(q, bq, col + i), x2 = biased(q, bq, col + i + half);
      ss = fmaf(x1, x1, ss);
      ss = fmaf(x2, x2, ss);
    }
    ss = detail::warp_sum(ss);
    const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(a.head_dim) + a.norm_eps);
    for (int i = lane; i < half; i += 32) {
      const float n1 =
          detail::round_bf16(detail::round_bf16(biased(q, bq, col + i) * inv_rms) * __bfloat162float(w[i]));
      const float n2 = detail::round_bf16(detail::round_bf16(biased(q, bq, col + i + half) * inv_rms) *
                                          __bfloat162float(w[i + half]));
      detail::rope_rotate(n1, n2, cr[i], sr[i], &o[i], &o[i + half]);
    }
  }
  if (!row_ok) return;
  store_v<false>(q + qw + kw, bq ? bq + qw + kw : nullptr, kw, a.v_store + static_cast<int64_t>(row) * kw);
}

}  // namespace

void rope_store_bf16(const RopeStoreArgs& in, cudaStream_t stream) {
  RopeStoreArgs args = in;
  if (args.n_kv_heads == 0) args.n_kv_heads = args.n_heads;
  if (args.tokens <= 0) return;
  if (args.tokens > 0x7fffffff) cuda::throw_invalid_argument("qkv_rope_store: more than 2^31-1 tokens");
  if (args.head_dim <= 0 || args.head_dim % 2 != 0 || args.n_heads <= 0)
    cuda::throw_invalid_argument("qkv_rope_store: head_dim must be positive and even, n_heads positive (got head_dim " +
                                 std::to_string(args.head_dim) + ", n_heads " + std::to_string(args.n_heads) + ")");
  if (args.n_kv_heads < 0 || args.n_heads % args.n_kv_heads != 0)
    cuda::throw_invalid_argument("qkv_rope_store: n_kv_heads " + std::to_string(args.n_kv_heads) +
                                 " does not divide n_heads " + std::to_string(args.n_heads));
  // 16-byte accesses when every row (q, k, v, q_out, store rows, bias: multiples of Dh bf16; cos / sin
  // rows: Dh/2 fp32) and every 8-pair group starts 16-byte aligned.
  const bool vec = (args.head_dim / 2) % 8 == 0 && detail::is_aligned(args.qkv, 16) &&
                   detail::is_aligned(args.bias, 16) && detail::is_aligned(args.q_out, 16) &&
                   detail::is_aligned(args.k_store, 16) && detail::is_aligned(args.v_store, 16) &&
                   detail::is_aligned(args.cos, 16) && detail::is_aligned(args.sin, 16);
  if ((args.q_norm == nullptr) != (args.k_norm == nullptr))
    cuda::throw_invalid_argument("qkv_rope_store: q_norm and k_norm must both be given or both be null");
  if (args.q_norm != nullptr)
    rope_store_qknorm_kernel<<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  else if (vec)
    rope_store_kernel<true><<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  else
    rope_store_kernel<false><<<static_cast<unsigned>(args.tokens), kThreads, 0, stream>>>(args);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
