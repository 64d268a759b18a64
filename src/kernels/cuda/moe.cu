#include "kernels/cuda/moe.h"

#include <mma.h>

#include <cmath>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

// ------------------------------------------------------------------------------------------ routing

constexpr int kRouteWarps = 4;

__device__ __forceinline__ double warp_max(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The fp32 score of a logit, evaluated in double as the CPU op does (softmax: m the row's largest
// logit and sum = Σ exp(z − m), both warp-uniform). Used for the keys and again for the chosen
// experts' weights: the same expression, so the same value.
__device__ __forceinline__ float route_score(float z, bool sigmoid, double m, double sum) {
  return sigmoid ? static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(z))))
                 : static_cast<float>(exp(static_cast<double>(z) - m) / sum);
}

// A key that is no candidate (chosen already, or outside the chosen groups).
__device__ __forceinline__ float no_candidate() { return __int_as_float(0x7fc00000); }

struct ArgMax {
  float v;
  int i;
};

// The largest of v[0, n) over the warp, ties to the lower index, NaN never taken: the same (value,
// index) on every lane ((−inf, n) when every v is NaN). Each lane scans ascending indices, then the
// butterfly keeps the better pair: a total order on (value, index), so every lane ends alike.
__device__ __forceinline__ ArgMax warp_argmax(const float* v, int n, int lane) {
  ArgMax b{-INFINITY, n};
  for (int i = lane; i < n; i += 32) {
    const float x = v[i];
    if (x > b.v || (x == b.v && i < b.i)) b = {x, i};
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, b.v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, b.i, o);
    if (ov > b.v || (ov == b.v && oi < b.i)) b = {ov, oi};
  }
  return b;
}

// Group-limited selection on a warp's keys [E] (gkey: G floats of scratch): group g (experts
// [g·E/G, (g+1)·E/G)) scores the fp32 sum of its two largest keys; the topk_groups best groups (ties:
// the lower group) keep their experts, every other expert's key becomes no_candidate().
__device__ void limit_groups(float* key, float* gkey, int E, int G, int topk_groups, int lane) {
  const int size = E / G;
  for (int g = lane; g < G; g += 32) {
    float b1 = -INFINITY, b2 = -INFINITY;
    for (int i = g * size; i < (g + 1) * size; ++i) {
      const float v = key[i];
      if (v > b1) {
        b2 = b1;
        b1 = v;
      } else if (v > b2) {
        b2 = v;
      }
    }
    const float sum = b1 + b2;
    gkey[g] = isnan(sum) ? -INFINITY : sum;  // inf + (−inf): an infinite bias
  }
  __syncwarp();
  for (int r = 0; r < topk_groups; ++r) {
    const ArgMax b = warp_argmax(gkey, G, lane);
    if (lane == 0) gkey[b.i] = no_candidate();  // NaN marks a chosen group
    __syncwarp();
  }
  for (int i = lane; i < E; i += 32)
    if (!isnan(gkey[i / size])) key[i] = no_candidate();
  __syncwarp();
}

// One warp per token; the warp's E selection keys (then its G group scores) in shared memory. A
// chosen expert's key becomes no_candidate().
__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(MoeRouteArgs a) {
  extern __shared__ float route_keys[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= a.tokens) return;  // the whole warp: no block-wide barrier below
  const int E = a.n_experts, k = a.top_k, G = a.n_groups;
  const float* z = a.logits + t * E;
  float* key = route_keys + static_cast<int64_t>(warp) * (E + (G > 1 ? G : 0));
  int32_t* ids = a.ids + t * k;
  float* w = a.weights + t * k;
  bool finite = true;
  double m = -INFINITY, sum = 1.0;
  for (int i = lane; i < E; i += 32) {
    const float v = z[i];
    finite = finite && isfinite(v);
    m = fmax(m, static_cast<double>(v));
  }
  finite = __all_sync(0xffffffffu, finite);
  if (!finite) {
    for (int j = lane; j < k; j += 32) {
      ids[j] = j;
      w[j] = __int_as_float(0x7fc00000);
    }
    return;
  }
  if (!a.sigmoid) {
    m = warp_max(m);
    sum = 0.0;
    for (int i = lane; i < E; i += 32) sum += exp(static_cast<double>(z[i]) - m);
    sum = detail::warp_sum(sum);  // a butterfly: the same sum on every lane
  }
  for (int i = lane; i < E; i += 32) {
    float v = route_score(z[i], a.sigmoid, m, sum);
    if (a.bias != nullptr) v += a.bias[i];
    key[i] = isnan(v) ? -INFINITY : v;  // a NaN key (non-finite bias) ranks lowest, still a candidate
  }
  __syncwarp();
  if (G > 1) limit_groups(key, key + E, E, G, a.topk_groups, lane);
  float total = 0.0f;
  for (int j = 0; j < k; ++j) {
    // b.i < E: at least k candidates (moe_route_f32). The weight is the score, not the key; every
    // lane holds the same b, s and total.
    const ArgMax b = warp_argmax(key, E, lane);
    const float s = route_score(z[b.i], a.sigmoid, m, sum);
    total += s;
    if (lane == 0) {
      ids[j] = b.i;
      w[j] = s;
      key[b.i] = no_candidate();
    }
    __syncwarp();
  }
  for (int j = lane; j < k; j += 32) {
    float v = w[j];
    if (a.renormalize) v /= total + 1e-20f;
    w[j] = v * a.scaling;
  }
}

// ------------------------------------------------------------------------------------------ sort

constexpr int kPlanThreads = 1024;

__global__ void __launch_bounds__(kPlanThreads)
    moe_plan_kernel(const int32_t* __restrict__ ids, int64_t pairs, int experts, MoeMeta m, int* error_flags) {
  __shared__ int count[kMoeMaxExperts];
  __shared__ int base[kMoeMaxExperts];
  for (int e = threadIdx.x; e < experts; e += kPlanThreads) count[e] = 0;
  __syncthreads();
  bool bad = false;
  for (int64_t i = threadIdx.x; i < pairs; i += kPlanThreads) {
    const int e = ids[i];
    if (e >= 0 && e < experts)
      atomicAdd(&count[e], 1);
    else
      bad = true;
  }
  if (bad && error_flags != nullptr) atomicOr(error_flags, kErrMoeExpert);
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive scan and the tile list (E + pairs / 64 steps)
    int row = 0, tile = 0;
    for (int e = 0; e < experts; ++e) {
      const int n = count[e];
      base[e] = row;
      for (int r = 0; r < n; r += kMoeTileRows) {
        m.tiles[3 * tile] = e;
        m.tiles[3 * tile + 1] = row + r;
        m.tiles[3 * tile + 2] = row + min(n, r + kMoeTileRows);
        ++tile;
      }
      row += n;
      count[e] = 0;  // the scatter's cursor
    }
    *m.n_tiles = tile;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += kPlanThreads) {
    const int e = ids[i];
    if (e < 0 || e >= experts) {
      m.slot_of_pair[i] = -1;
      continue;
    }
    const int s = base[e] + atomicAdd(&count[e], 1);
    m.slot_of_pair[i] = s;
    m.pair_of_slot[s] = static_cast<int32_t>(i);
  }
}

// ------------------------------------------------------------------------------------------ GEMM

constexpr int kBM = kMoeTileRows, kBN = 64, kBK = 32, kLds = kBK + 8, kLdc = kBN + 4, kGemmThreads = 128;

// Loads a [64, 32] bf16 tile (rows from `row`, columns k0..k0+32 of K) into shared memory s (leading
// dimension kLds): each thread two 8-column chunks; rows that are null or columns past K read 0.
template <bool kVec>
__device__ __forceinline__ void load_tile(const __nv_bfloat16* const row[2], int64_t k0, int64_t K, __nv_bfloat16* s) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int c = static_cast<int>(threadIdx.x) + j * kGemmThreads;
    const int r = c >> 2, kc = (c & 3) * 8;
    __nv_bfloat16* dst = s + r * kLds + kc;
    const __nv_bfloat16* src = row[j];
    if constexpr (kVec) {  // K % 8 == 0: a chunk is wholly inside or outside the row
      uint4 v = make_uint4(0, 0, 0, 0);
      if (src != nullptr && k0 + kc < K) v = *reinterpret_cast<const uint4*>(src + k0 + kc);
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int64_t kk = k0 + kc + e;
        dst[e] = (src != nullptr && kk < K) ? src[kk] : __float2bfloat16_rn(0.0f);
      }
    }
  }
}

template <bool kVec>
__global__ void __launch_bounds__(kGemmThreads) moe_gemm_kernel(MoeGemmArgs a) {
  namespace wmma = nvcuda::wmma;
  const int64_t tile = blockIdx.x;
  if (tile >= *a.n_tiles) return;
  const int e = a.tiles[3 * tile], r0 = a.tiles[3 * tile + 1], r1 = a.tiles[3 * tile + 2];
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN, N = a.n, K = a.k;
  __shared__ __align__(128) __nv_bfloat16 As[kBM * kLds];
  __shared__ __align__(128) __nv_bfloat16 Bs[kBN * kLds];
  __shared__ __align__(128) float Cs[kBM * kLdc];
  const __nv_bfloat16* W = a.w + static_cast<int64_t>(e) * N * K;
  const __nv_bfloat16* arow[2];
  const __nv_bfloat16* brow[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int r = (static_cast<int>(threadIdx.x) + j * kGemmThreads) >> 2;
    const int s = r0 + r;
    arow[j] = nullptr;
    if (s < r1)
      arow[j] = a.pair_of_slot != nullptr ? a.a + static_cast<int64_t>(a.pair_of_slot[s] / a.top_k) * K
                                          : a.a + static_cast<int64_t>(s) * K;
    brow[j] = n0 + r < N ? W + (n0 + r) * K : nullptr;
  }
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kBK) {
    load_tile<kVec>(arow, k0, K, As);
    load_tile<kVec>(brow, k0, K, Bs);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], As + (wm + i * 16) * kLds + kk, kLds);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], Bs + (wn + j * 16) * kLds + kk, kLds);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm + i * 16) * kLdc + wn + j * 16, acc[i][j], kLdc, wmma::mem_row_major);
  __syncthreads();
  for (int idx = threadIdx.x; idx < kBM * kBN; idx += kGemmThreads) {
    const int r = idx / kBN, c = idx % kBN;
    const int64_t s = r0 + r, col = n0 + c;
    if (s >= r1 || col >= N) continue;
    const float v = Cs[r * kLdc + c];
    if (a.out_f32)
      static_cast<float*>(a.out)[s * N + col] = v;
    else
      static_cast<__nv_bfloat16*>(a.out)[s * N + col] = __float2bfloat16_rn(v);
  }
}

// ------------------------------------------------------------------------------------------ combine

constexpr int kCombineThreads = 256;

// One block per token: its k choices ordered by (expert, j) in shared memory, then each thread sums
// its columns in that order.
__global__ void __launch_bounds__(kCombineThreads) moe_combine_kernel(MoeCombineArgs a) {
  __shared__ int order[kMoeMaxTopK];
  const int64_t t = blockIdx.x;
  const int k = a.top_k;
  const int32_t* ids = a.ids + t * k;
  if (threadIdx.x == 0) {  // insertion sort of j by (ids[j], j); k is small
    for (int j = 0; j < k; ++j) {
      int p = j;
      while (p > 0 && ids[order[p - 1]] > ids[j]) {
        order[p] = order[p - 1];
        --p;
      }
      order[p] = j;
    }
  }
  __syncthreads();
  __nv_bfloat16* o = a.out + t * a.d;
  for (int64_t c = threadIdx.x; c < a.d; c += kCombineThreads) {
    float acc = 0.0f;
    for (int r = 0; r < k; ++r) {
      const int j = order[r];
      const int s = a.slot_of_pair[t * k + j];
      const float y = s >= 0 ? a.y[static_cast<int64_t>(s) * a.d + c] : __int_as_float(0x7fc00000);
      acc = __fadd_rn(acc, __fmul_rn(y, a.weights[t * k + j]));
    }
    o[c] = __float2bfloat16_rn(a.accumulate ? __fadd_rn(__bfloat162float(o[c]), acc) : acc);
  }
}

}  // namespace

void moe_route_f32(const MoeRouteArgs& a, cudaStream_t stream) {
  const int E = a.n_experts, G = a.n_groups;
  if (E < 1 || E > kMoeMaxExperts || a.top_k < 1 || a.top_k > E)
    cuda::throw_invalid_argument("moe_route: n_experts " + std::to_string(E) + " (at most " +
                                 std::to_string(kMoeMaxExperts) + ") and top_k " + std::to_string(a.top_k) +
                                 " (in [1, n_experts]) out of range");
  if (G < 1 || E % G != 0 || a.topk_groups < 1 || a.topk_groups > G ||
      (G > 1 && (E / G < 2 || a.top_k > a.topk_groups * (E / G))))
    cuda::throw_invalid_argument("moe_route: n_groups " + std::to_string(G) + " and topk_groups " +
                                 std::to_string(a.topk_groups) + " are no group limit of " + std::to_string(E) +
                                 " experts with top_k " + std::to_string(a.top_k) + " (core/moe_routing.h)");
  if (a.tokens <= 0) return;
  const int64_t blocks = (a.tokens + kRouteWarps - 1) / kRouteWarps;
  if (blocks > 0x7fffffff) cuda::throw_invalid_argument("moe_route: too many tokens");
  // Keys and group scores: at most 4 x (2048 + 1024) floats = 48 KiB (G <= E / 2 when G > 1).
  const size_t smem = static_cast<size_t>(kRouteWarps) * static_cast<size_t>(E + (G > 1 ? G : 0)) * sizeof(float);
  moe_route_kernel<<<static_cast<unsigned>(blocks), kRouteWarps * 32, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void moe_plan(const int32_t* ids, int64_t pairs, int experts, int32_t* meta, int* error_flags, cudaStream_t stream) {
  if (experts < 1 || experts > kMoeMaxExperts)
    cuda::throw_invalid_argument("moe_experts: " + std::to_string(experts) + " experts (supported: 1 to " +
                                 std::to_string(kMoeMaxExperts) + ")");
  if (pairs > 0x7fffffff) cuda::throw_invalid_argument("moe_experts: more than 2^31-1 (token, expert) pairs");
  moe_plan_kernel<<<1, kPlanThreads, 0, stream>>>(ids, pairs, experts, moe_meta_view(meta, pairs), error_flags);
  CUDA_CHECK_LAUNCH();
}

void moe_grouped_gemm_bf16(const MoeGemmArgs& a, cudaStream_t stream) {
  if (a.max_tiles <= 0 || a.n <= 0 || a.k <= 0) return;
  const int64_t col_tiles = (a.n + kBN - 1) / kBN;
  if (a.max_tiles > 0x7fffffff || col_tiles > 65535)
    cuda::throw_invalid_argument("moe_experts: grouped GEMM of " + std::to_string(a.max_tiles) + " row tiles x " +
                                 std::to_string(col_tiles) + " column tiles exceeds the grid");
  const bool vec = a.k % 8 == 0 && detail::is_aligned(a.a, 16) && detail::is_aligned(a.w, 16);
  const dim3 grid(static_cast<unsigned>(a.max_tiles), static_cast<unsigned>(col_tiles));
  if (vec)
    moe_gemm_kernel<true><<<grid, kGemmThreads, 0, stream>>>(a);
  else
    moe_gemm_kernel<false><<<grid, kGemmThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

void moe_combine_bf16(const MoeCombineArgs& a, cudaStream_t stream) {
  if (a.top_k < 1 || a.top_k > kMoeMaxTopK)
    cuda::throw_invalid_argument("moe_experts: top_k " + std::to_string(a.top_k) + " (supported: 1 to " +
                                 std::to_string(kMoeMaxTopK) + ")");
  if (a.tokens <= 0 || a.d <= 0) return;
  if (a.tokens > 0x7fffffff) cuda::throw_invalid_argument("moe_experts: more than 2^31-1 tokens");
  moe_combine_kernel<<<static_cast<unsigned>(a.tokens), kCombineThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
