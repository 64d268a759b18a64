#include "kernels/cuda/select.h"

#include <string>

#include "core/philox.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"

namespace flashdllm::kernels {
namespace {

__global__ void cfg_combine_kernel(const float* cond, const float* uncond, float scale1, int64_t n, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u = uncond[i];
    out[i] = __fadd_rn(u, __fmul_rn(scale1, __fsub_rn(cond[i], u)));
  }
}

constexpr int kSelectThreads = 512;

struct Best {
  double key;
  int32_t index;
};

constexpr int32_t kNoCandidate = 0x7fffffff;

// Larger key wins; equal keys -> smaller index (first occurrence, as torch.argmax and the CPU
// backend). Any candidate beats "no candidate" (index kNoCandidate), even a −inf key.
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.index == kNoCandidate) return a;
  if (a.index == kNoCandidate) return b;
  if (b.key > a.key || (b.key == a.key && b.index < a.index)) return b;
  return a;
}

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best other;
    other.key = __shfl_xor_sync(0xffffffffu, b.key, o);
    other.index = __shfl_xor_sync(0xffffffffu, b.index, o);
    b = better(b, other);
  }
  return b;
}

template <bool kGumbel, bool kF64>
__global__ void __launch_bounds__(kSelectThreads) select_kernel(SelectArgs a) {
  __shared__ double s_key[32];
  __shared__ int32_t s_idx[32];
  __shared__ int32_t s_best;  // separate slot: warp 0 reads s_idx while lane 0 publishes the result
  __shared__ float s_max[32];
  __shared__ double s_sum_d[32];
  __shared__ float s_sum_f[32];

  const int64_t r = blockIdx.x;
  const float* l = a.logits + r * a.vocab;
  const int32_t vocab = static_cast<int32_t>(a.vocab);
  const float kNegInf = -__int_as_float(0x7f800000);
  const uint32_t row_key = static_cast<uint32_t>(a.row_keys[r]);

  // Pass 1: argmax of the (noised) key and the max of the confidence logits.
  Best best{-__longlong_as_double(0x7ff0000000000000LL), kNoCandidate};
  float cmax = kNegInf;
  for (int32_t v = threadIdx.x; v < vocab; v += kSelectThreads) {
    if (v == a.suppress_token) continue;  // excluded from the argmax and the confidence
    const float lv = l[v];
    if (v != a.exclude_token) {  // never a candidate, but part of the softmax
      double key = lv;
      if constexpr (kGumbel) {
        const double u = philox_uniform(a.seed, a.step, row_key, static_cast<uint32_t>(v));
        key = static_cast<double>(lv) - a.temperature * log(-log(u));
      }
      best = better(best, Best{key, v});
    }
    if (v != a.conf_suppress_a && v != a.conf_suppress_b) cmax = fmaxf(cmax, lv);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  best = warp_best(best);
  if (lane == 0) {
    s_key[warp] = best.key;
    s_idx[warp] = best.index;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kWarps = kSelectThreads / 32;
    Best b = lane < kWarps ? Best{s_key[lane], s_idx[lane]}
                           : Best{-__longlong_as_double(0x7ff0000000000000LL), kNoCandidate};
    b = warp_best(b);
    if (lane == 0) s_best = b.index;
  }
  __syncthreads();
  // No candidate at all (the whole vocabulary is suppressed / excluded): x0 = −1, confidence 0.
  const int32_t x0 = s_best == kNoCandidate ? -1 : s_best;
  cmax = detail::block_max<kSelectThreads>(cmax, s_max);

  // Pass 2: softmax denominator of the confidence logits.
  const bool x0_masked =
      x0 < 0 || x0 == a.suppress_token || x0 == a.conf_suppress_a || x0 == a.conf_suppress_b;
  if constexpr (kF64) {
    double sum = 0.0;
    const double m = cmax;
    for (int32_t v = threadIdx.x; v < vocab; v += kSelectThreads) {
      if (v == a.suppress_token || v == a.conf_suppress_a || v == a.conf_suppress_b) continue;
      sum += exp(static_cast<double>(l[v]) - m);
    }
    sum = detail::block_sum<kSelectThreads>(sum, s_sum_d);
    if (threadIdx.x == 0) {
      a.x0[r] = x0;
      a.conf[r] = x0_masked ? 0.0 : exp(static_cast<double>(l[x0]) - m) / sum;
    }
  } else {
    float sum = 0.f;
    for (int32_t v = threadIdx.x; v < vocab; v += kSelectThreads) {
      if (v == a.suppress_token || v == a.conf_suppress_a || v == a.conf_suppress_b) continue;
      sum += expf(l[v] - cmax);
    }
    sum = detail::block_sum<kSelectThreads>(sum, s_sum_f);
    if (threadIdx.x == 0) {
      a.x0[r] = x0;
      a.conf[r] = x0_masked ? 0.0 : static_cast<double>(expf(l[x0] - cmax) / sum);
    }
  }
}

template <bool kGumbel, bool kF64>
void launch_select(const SelectArgs& a, cudaStream_t stream) {
  select_kernel<kGumbel, kF64><<<static_cast<unsigned>(a.rows), kSelectThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void cfg_combine_f32(const float* cond, const float* uncond, float scale, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  // PyTorch evaluates `(cfg_scale + 1)` as a Python float and multiplies an fp32 tensor by it,
  // i.e. with the scalar rounded to fp32.
  const float scale1 = static_cast<float>(static_cast<double>(scale) + 1.0);
  cfg_combine_kernel<<<grid, kThreads, 0, stream>>>(cond, uncond, scale1, n, out);
  CUDA_CHECK_LAUNCH();
}

void select_tokens_f32(const SelectArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return;
  if (a.vocab <= 0 || a.vocab > 0x7fffffff)
    cuda::throw_invalid_argument("select_tokens: vocab size " + std::to_string(a.vocab) + " outside [1, 2^31)");
  if (a.rows > 0x7fffffff) cuda::throw_invalid_argument("select_tokens: more than 2^31-1 rows");
  const bool gumbel = a.temperature > 0.0;
  if (gumbel) {
    if (a.confidence_f64) launch_select<true, true>(a, stream); else launch_select<true, false>(a, stream);
  } else {
    if (a.confidence_f64) launch_select<false, true>(a, stream); else launch_select<false, false>(a, stream);
  }
}

}  // namespace flashdllm::kernels
