#include "kernels/cuda/select.h"

#include <algorithm>
#include <string>
#include <type_traits>

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
// 16-byte loads each thread has in flight per step of for_each_logit (512 x 8 x 16 = 64 KiB per block):
// with one scalar load per step the kernel took ~240-300 us whatever the row count; with these, 129 us
// for 256 rows and 247 us for 512 on the H200, where it is bound by instruction issue
// (bench/results/2026-12-04-h200-select-small-list/).
constexpr int kLoadsInFlight = 8;

// A candidate: its key (float for argmax, where the float -> double widening of the logit changes
// no order; double for the Gumbel-noised key) and vocabulary index.
template <class Key>
struct Best {
  Key key;
  int32_t index;
};
constexpr int32_t kNoCandidate = 0x7fffffff;

// Larger key wins; equal keys -> smaller index (first occurrence, as torch.argmax and the CPU
// backend). Any candidate beats "no candidate" (index kNoCandidate), even a −inf key.
template <class Key>
__device__ __forceinline__ Best<Key> better(Best<Key> a, Best<Key> b) {
  if (b.index == kNoCandidate) return a;
  if (a.index == kNoCandidate) return b;
  if (b.key > a.key || (b.key == a.key && b.index < a.index)) return b;
  return a;
}

template <class Key>
__device__ __forceinline__ Best<Key> warp_best(Best<Key> b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best<Key> other;
    other.key = __shfl_xor_sync(0xffffffffu, b.key, o);
    other.index = __shfl_xor_sync(0xffffffffu, b.index, o);
    b = better(b, other);
  }
  return b;
}

// Calls f(v, l[v]) for every v in [0, V), spread over the block: the 16-byte-aligned body with
// kLoadsInFlight float4 loads issued before any is used, the unaligned head (< 4 logits: rows of an
// odd vocabulary size start anywhere on a 4-byte boundary) and the tail element by element. The
// order in which a thread sees its logits is not the index order: f must not depend on it.
template <class F>
__device__ __forceinline__ void for_each_logit(const float* __restrict__ l, int32_t V, F&& f) {
  const auto misaligned = static_cast<int32_t>((reinterpret_cast<uintptr_t>(l) >> 2) & 3);
  const int32_t head = min(V, (4 - misaligned) & 3);
  for (int32_t v = threadIdx.x; v < head; v += kSelectThreads) f(v, l[v]);
  const float4* __restrict__ body = reinterpret_cast<const float4*>(l + head);
  const int32_t n4 = (V - head) >> 2;
  for (int32_t i = threadIdx.x; i < n4; i += kSelectThreads * kLoadsInFlight) {
    float4 x[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u)
      if (i + u * kSelectThreads < n4) x[u] = __ldg(body + i + u * kSelectThreads);
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int32_t j = i + u * kSelectThreads;
      if (j < n4) {
        const int32_t v = head + 4 * j;
        f(v, x[u].x);
        f(v + 1, x[u].y);
        f(v + 2, x[u].z);
        f(v + 3, x[u].w);
      }
    }
  }
  for (int32_t v = head + 4 * n4 + threadIdx.x; v < V; v += kSelectThreads) f(v, l[v]);
}

// The block's second largest value given each thread's largest `hi` and second largest `lo`
// (kMargin): merges the pairs over the warps through `scratch` (32 floats, reused afterwards).
// Every thread of the block calls it; every thread gets the result.
__device__ __forceinline__ float block_second_max(float hi, float lo, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ohi = __shfl_xor_sync(0xffffffffu, hi, o), olo = __shfl_xor_sync(0xffffffffu, lo, o);
    lo = fmaxf(fmaxf(lo, olo), fminf(hi, ohi));
    hi = fmaxf(hi, ohi);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  constexpr int kWarps = kSelectThreads / 32;
  __syncthreads();  // scratch may still be read by an earlier reduction
  if (lane == 0) {
    scratch[warp] = hi;
    scratch[kWarps + warp] = lo;
  }
  __syncthreads();
  hi = lane < kWarps ? scratch[lane] : -__int_as_float(0x7f800000);
  lo = lane < kWarps ? scratch[kWarps + lane] : -__int_as_float(0x7f800000);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ohi = __shfl_xor_sync(0xffffffffu, hi, o), olo = __shfl_xor_sync(0xffffffffu, lo, o);
    lo = fmaxf(fmaxf(lo, olo), fminf(hi, ohi));
    hi = fmaxf(hi, ohi);
  }
  __syncthreads();  // every thread has read scratch before the caller reuses it
  return lo;
}

// ---------------------------------------------------------------- Dream's top_p / top_k (select.h)
// A float's place in the total order of floats as an unsigned integer (no NaN; −0 counts as +0:
// callers add +0.0f first, which turns −0 into +0).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float order_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// One block per row: θ and the tie cut of the row's kept set (select.h), written to a.filter_theta[r] /
// a.filter_cut[r]; θ = −inf keeps everything.
__global__ void __launch_bounds__(kSelectThreads) select_filter_kernel(SelectArgs a) {
  __shared__ float s_f[32];
  __shared__ double s_d[32];
  __shared__ int32_t s_cut;
  __shared__ int32_t s_count[kSelectThreads];
  const int64_t r = blockIdx.x;
  const auto V = static_cast<int32_t>(a.vocab);
  const float* l = a.logits + r * a.vocab;
  const float kNegInf = -__int_as_float(0x7f800000);
  const bool scaled = a.temperature > 0.0;
  const float t = static_cast<float>(a.temperature);
  auto z_of = [&](float lv) { return (scaled ? lv / t : lv) + 0.0f; };  // Dream's fp32 division; −0 -> +0
  float m = kNegInf;
  bool bad = false;
  for_each_logit(l, V, [&](int32_t v, float lv) {
    if (v == a.suppress_token) return;
    const float z = z_of(lv);
    bad |= z != z || z == -kNegInf;
    m = fmaxf(m, z);
  });
  m = detail::block_max<kSelectThreads>(m, s_f);
  float theta = kNegInf;
  int32_t cut = kNoCandidate;
  if (__syncthreads_or(bad) || m == kNegInf) {
    if (threadIdx.x == 0) a.filter_theta[r] = theta, a.filter_cut[r] = cut;
    return;
  }
  const double md = m;
  // Σ exp(c − m) and the count over the kept tokens (θ, cut) whose order key is >= K.
  auto pass = [&](uint32_t K, double* mass) {
    double s = 0.0, n = 0.0;
    for_each_logit(l, V, [&](int32_t v, float lv) {
      if (v == a.suppress_token) return;
      const float z = z_of(lv);
      if (z < theta || (z == theta && v > cut) || order_key(z) < K) return;
      n += 1.0;
      if (mass != nullptr) s += exp(static_cast<double>(z) - md);
    });
    if (mass != nullptr) *mass = detail::block_sum<kSelectThreads>(s, s_d);
    return detail::block_sum<kSelectThreads>(n, s_d);
  };
  const uint32_t top = order_key(m) + 1;  // nothing has a key >= top
  if (a.top_p < 1.0) {
    double total = 0.0;
    pass(0, &total);
    const double target = a.top_p * total;
    // θ = the largest key K whose tokens >= K hold more than top_p of the mass: the value where the
    // descending cumulative probability first exceeds top_p (pred(0) holds: total > top_p·total).
    uint32_t lo = 0, hi = top;
    while (hi - lo > 1) {
      const uint32_t mid = lo + (hi - lo) / 2;
      double mass = 0.0;
      pass(mid, &mass);
      (mass > target ? lo : hi) = mid;
    }
    const float tp = order_value(lo);
    double above = 0.0;
    const double n_above = pass(lo + 1, &above);
    const double n_ties = pass(lo, nullptr) - n_above;
    // Ties of θ in index order: the j-th (from 0) is kept while the mass before it, above + j·q, is
    // <= top_p·total (Dream's sort keeps equal logits in index order on the CPU oracle).
    const double q = exp(static_cast<double>(tp) - md);
    const double keep = fmin(n_ties, fmax(1.0, floor((target - above) / q) + 1.0));
    theta = tp;
    if (keep < n_ties) {
      // The index of the keep-th tie: contiguous index ranges per thread, counted, prefix-summed.
      const int32_t per = (V + kSelectThreads - 1) / kSelectThreads;
      const int32_t b0 = min(V, static_cast<int32_t>(threadIdx.x) * per), b1 = min(V, b0 + per);
      int32_t c = 0;
      for (int32_t v = b0; v < b1; ++v) c += v != a.suppress_token && z_of(l[v]) == tp;
      s_count[threadIdx.x] = c;
      if (threadIdx.x == 0) s_cut = kNoCandidate;  // (a keep-th tie always exists: keep < n_ties)
      __syncthreads();
      if (threadIdx.x == 0) {
        int32_t acc = 0;
        for (int i = 0; i < kSelectThreads; ++i) {
          const int32_t ci = s_count[i];
          s_count[i] = acc;
          acc += ci;
        }
      }
      __syncthreads();
      const auto want = static_cast<int32_t>(keep);  // 1-based rank of the last kept tie
      if (s_count[threadIdx.x] < want && want <= s_count[threadIdx.x] + c) {
        int32_t seen = s_count[threadIdx.x];
        for (int32_t v = b0; v < b1; ++v)
          if (v != a.suppress_token && z_of(l[v]) == tp && ++seen == want) {
            s_cut = v;
            break;
          }
      }
      __syncthreads();
      cut = s_cut;
    }
  }
  if (a.top_k > 0 && a.top_k < a.vocab && pass(0, nullptr) >= a.top_k) {
    // θ_k = the largest key with at least top_k kept tokens at or above it: the k-th largest kept c.
    uint32_t lo = 0, hi = top;
    while (hi - lo > 1) {
      const uint32_t mid = lo + (hi - lo) / 2;
      (pass(mid, nullptr) >= a.top_k ? lo : hi) = mid;
    }
    const float tk = order_value(lo);
    if (tk > theta) theta = tk, cut = kNoCandidate;  // every tie of the k-th largest stays
  }
  if (threadIdx.x == 0) a.filter_theta[r] = theta, a.filter_cut[r] = cut;
}

// A row is cut into chunks of kSelectChunk logits (select_chunks), one block each: a chunk is one
// step of for_each_logit, so a row's blocks read it at the bandwidth of many SMs (one block per row
// took ~80 us for the 16 rows of a one-slot iteration, 16 blocks on 132 SMs). Each block writes its
// chunk's best candidate, confidence maximum and softmax sum (relative to that maximum) to
// SelectArgs::partials; the row's last block to arrive combines them in chunk order.
constexpr int32_t kSelectChunk = kSelectThreads * kLoadsInFlight * 4;

template <bool kGumbel, bool kF64>
__global__ void __launch_bounds__(kSelectThreads) select_kernel(SelectArgs a) {
  using Key = std::conditional_t<kGumbel, double, float>;
  using Sum = std::conditional_t<kF64, double, float>;
  __shared__ Key s_key[32];
  __shared__ int32_t s_idx[32];
  __shared__ int32_t s_best;  // separate slot: warp 0 reads s_idx while lane 0 publishes the result
  __shared__ float s_max[32];
  __shared__ Sum s_sum[32];
  __shared__ double s_tsum[32];
  __shared__ bool s_last;
  const int64_t r = blockIdx.y;
  const auto chunks = static_cast<int32_t>(gridDim.x);
  const int32_t v0 = static_cast<int32_t>(blockIdx.x) * kSelectChunk;
  const int32_t n = min(static_cast<int32_t>(a.vocab) - v0, kSelectChunk);
  const float* l = a.logits + r * a.vocab;
  const float kNegInf = -__int_as_float(0x7f800000);
  const Key kNoKey = static_cast<Key>(kNegInf);
  const uint32_t row_key = static_cast<uint32_t>(a.row_keys[r]);
  // Dream's filters (select_filter_kernel): a token below the row's threshold takes no part.
  const float theta = a.filter_theta != nullptr ? a.filter_theta[r] : kNegInf;
  const int32_t cut = a.filter_cut != nullptr ? a.filter_cut[r] : kNoCandidate;
  // Confidence logits: the logit, or Dream's temperature-scaled logit (an fp32 division, as upstream).
  const bool scaled = a.scaled_confidence && a.temperature > 0.0;
  const float conf_t = static_cast<float>(a.temperature);
  const bool margin = a.confidence == SelectConfidenceKind::kMargin;
  const bool entropy = a.confidence == SelectConfidenceKind::kNegEntropy;
  auto conf_logit = [&](float lv) { return scaled ? lv / conf_t : lv; };
  auto filtered = [&](int32_t v, float lv) {
    if (theta == kNegInf) return false;
    const float c = conf_logit(lv);
    return c < theta || (c == theta && v > cut);
  };
  // Pass 1 over the chunk: argmax of the (noised) key and the max (and, for kMargin, the second
  // largest) of the confidence logits.
  Best<Key> best{kNoKey, kNoCandidate};
  float cmax = kNegInf, c2 = kNegInf;
  bool nan_seen = false;  // a NaN confidence logit (fmaxf skips it; its softmax term is NaN)
  for_each_logit(l + v0, n, [&](int32_t i, float lv) {
    const int32_t v = v0 + i;
    if (v == a.suppress_token || filtered(v, lv)) return;  // excluded from the argmax and the confidence
    if (v != a.exclude_token) {         // never a candidate, but part of the softmax
      Key key = lv;
      if constexpr (kGumbel) {
        const double u = philox_uniform(a.seed, a.step, row_key, static_cast<uint32_t>(v));
        key = static_cast<double>(lv) - a.temperature * log(-log(u));
      }
      best = better(best, Best<Key>{key, v});
    }
    if (v != a.conf_suppress_a && v != a.conf_suppress_b) {
      const float c = conf_logit(lv);
      if (margin) c2 = fmaxf(c2, fminf(cmax, c));
      cmax = fmaxf(cmax, c);
      nan_seen |= lv != lv;
    }
  });
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  best = warp_best(best);
  if (lane == 0) {
    s_key[warp] = best.key;
    s_idx[warp] = best.index;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kWarps = kSelectThreads / 32;
    Best<Key> b = lane < kWarps ? Best<Key>{s_key[lane], s_idx[lane]} : Best<Key>{kNoKey, kNoCandidate};
    b = warp_best(b);
    if (lane == 0) {
      s_best = b.index;
      s_key[0] = b.key;  // read by thread 0 after the block_max barriers below
    }
  }
  if (margin) c2 = block_second_max(cmax, c2, s_max);  // before cmax becomes the block's maximum
  cmax = detail::block_max<kSelectThreads>(cmax, s_max);
  // Pass 2: the chunk's softmax terms exp(c_v − cmax) in Sum's precision. Without a finite confidence
  // logit the chunk's terms relative to a finite row maximum are 0 (−inf logits) or NaN (a NaN logit).
  Sum sum = 0;
  double tsum = 0.0;  // kNegEntropy: Σ exp(c_v − cmax)·(c_v − cmax)
  if (cmax == kNegInf) {
    if (__syncthreads_or(nan_seen)) sum = static_cast<Sum>(NAN);
  } else {
    const Sum m = cmax;
    for_each_logit(l + v0, n, [&](int32_t i, float lv) {
      const int32_t v = v0 + i;
      if (v == a.suppress_token || v == a.conf_suppress_a || v == a.conf_suppress_b || filtered(v, lv)) return;
      if constexpr (kF64) {
        const double d = static_cast<double>(conf_logit(lv)) - m, e = exp(d);
        sum += e;
        if (entropy) tsum += e * d;
      } else {
        sum += expf(conf_logit(lv) - m);
      }
    });
    sum = detail::block_sum<kSelectThreads>(sum, s_sum);
    if (entropy) tsum = detail::block_sum<kSelectThreads>(tsum, s_tsum);
  }
  SelectPartial* const part = a.partials + r * chunks;
  if (threadIdx.x == 0) {
    part[blockIdx.x] = SelectPartial{static_cast<double>(s_key[0]), static_cast<double>(sum), tsum, cmax, c2, s_best};
    __threadfence();  // the partial is visible before the arrival is counted
    s_last = atomicAdd(&a.arrivals[r], 1u) == static_cast<uint32_t>(chunks - 1);
  }
  __syncthreads();
  if (!s_last || threadIdx.x != 0) return;
  // The row's last block: combine the chunks in chunk order (independent of the arrival order).
  __threadfence();
  const volatile SelectPartial* const vp = part;
  Best<Key> b{kNoKey, kNoCandidate};
  float m_f = kNegInf;
  for (int32_t c = 0; c < chunks; ++c) {
    b = better(b, Best<Key>{static_cast<Key>(vp[c].key), vp[c].index});
    m_f = fmaxf(m_f, vp[c].cmax);
  }
  // Σ_v exp(c_v − m) = Σ_chunks sum_c · exp(cmax_c − m); a chunk without a finite confidence logit adds
  // its sum as it is (0, or NaN), and when no logit of the row is finite every term is NaN, as
  // exp(c_v − m) would be.
  const Sum m = m_f;
  Sum total = 0;
  for (int32_t c = 0; c < chunks; ++c) {
    const float cm = vp[c].cmax;
    if (cm == kNegInf && m_f != kNegInf) {
      total += static_cast<Sum>(vp[c].sum);
      continue;
    }
    if constexpr (kF64)
      total += vp[c].sum * exp(static_cast<double>(cm) - m);
    else
      total += static_cast<float>(vp[c].sum) * expf(cm - m);
  }
  a.arrivals[r] = 0;  // ready for the next launch (kernels on the stream run in order)
  if constexpr (kF64) {
    if (margin || entropy) {  // Dream's confidences (SelectParams::dream_rule, confidence_f64 only)
      const int32_t xm = b.index == kNoCandidate ? -1 : b.index;
      a.x0[r] = xm;
      double conf_r = 0.0;
      if (margin) {
        float c1 = kNegInf, c2r = kNegInf;  // the row's two largest c, merged in chunk order
        for (int32_t c = 0; c < chunks; ++c) {
          const float hi = vp[c].cmax, lo = vp[c].c2;
          c2r = fmaxf(fmaxf(c2r, lo), fminf(c1, hi));
          c1 = fmaxf(c1, hi);
        }
        conf_r = (exp(static_cast<double>(c1) - m) - exp(static_cast<double>(c2r) - m)) / total;
      } else {
        double x = 0.0;
        for (int32_t c = 0; c < chunks; ++c) {
          const float cm = vp[c].cmax;
          if (cm == kNegInf) continue;  // no finite term (a NaN row is NaN through total)
          const double shift = static_cast<double>(cm) - m;
          x += exp(shift) * (vp[c].tsum + shift * vp[c].sum);
        }
        conf_r = x / total - log(total);
      }
      a.conf[r] = xm < 0 || m_f == kNegInf ? static_cast<double>(NAN) : conf_r;
      return;
    }
  }
  // No candidate at all (the whole vocabulary is suppressed / excluded): x0 = −1, confidence 0.
  const int32_t x0 = b.index == kNoCandidate ? -1 : b.index;
  const bool x0_masked = x0 < 0 || x0 == a.suppress_token || x0 == a.conf_suppress_a || x0 == a.conf_suppress_b;
  a.x0[r] = x0;
  if constexpr (kF64)
    a.conf[r] = x0_masked ? 0.0 : exp(static_cast<double>(conf_logit(l[x0])) - m) / total;
  else
    a.conf[r] = x0_masked ? 0.0 : static_cast<double>(expf(conf_logit(l[x0]) - m) / total);
}

// Rows go in launches of at most 65535 (the grid's y limit), each with its rows' slices of every array.
template <bool kGumbel, bool kF64>
void launch_select(const SelectArgs& a, cudaStream_t stream) {
  const int64_t chunks = select_chunks(a.vocab);
  constexpr int64_t kMaxRows = 65535;
  for (int64_t r0 = 0; r0 < a.rows; r0 += kMaxRows) {
    SelectArgs b = a;
    b.rows = std::min(kMaxRows, a.rows - r0);
    b.logits += r0 * a.vocab;
    b.row_keys += r0;
    b.x0 += r0;
    b.conf += r0;
    b.partials += r0 * chunks;
    b.arrivals += r0;
    if (b.filter_theta != nullptr) b.filter_theta += r0, b.filter_cut += r0;
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(b.rows));
    select_kernel<kGumbel, kF64><<<grid, kSelectThreads, 0, stream>>>(b);
    CUDA_CHECK_LAUNCH();
  }
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
  if (a.partials == nullptr || a.arrivals == nullptr)
    cuda::throw_invalid_argument("select_tokens: no partials / arrivals scratch (SelectArgs)");
  if (!(a.top_p > 0.0 && a.top_p <= 1.0) || a.top_k < 0)
    cuda::throw_invalid_argument("select_tokens: top_p " + std::to_string(a.top_p) + " outside (0, 1] or top_k " +
                                 std::to_string(a.top_k) + " < 0");
  SelectArgs b = a;
  b.filter_theta = nullptr;
  b.filter_cut = nullptr;
  if (a.scaled_confidence && (a.top_p < 1.0 || (a.top_k > 0 && a.top_k < a.vocab))) {
    if (a.filter_theta == nullptr || a.filter_cut == nullptr)
      cuda::throw_invalid_argument("select_tokens: top_p / top_k without filter scratch (SelectArgs)");
    select_filter_kernel<<<static_cast<unsigned>(a.rows), kSelectThreads, 0, stream>>>(a);
    CUDA_CHECK_LAUNCH();
    b.filter_theta = a.filter_theta;
    b.filter_cut = a.filter_cut;
  }
  const bool gumbel = b.temperature > 0.0;
  if (gumbel) {
    if (b.confidence_f64)
      launch_select<true, true>(b, stream);
    else
      launch_select<true, false>(b, stream);
  } else {
    if (b.confidence_f64)
      launch_select<false, true>(b, stream);
    else
      launch_select<false, false>(b, stream);
  }
}

int64_t select_chunks(int64_t vocab) noexcept { return vocab <= 0 ? 0 : (vocab + kSelectChunk - 1) / kSelectChunk; }

}  // namespace flashdllm::kernels
