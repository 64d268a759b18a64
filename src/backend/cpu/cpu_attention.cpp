// Blocked CPU attention (see cpu_attention.h for what it guarantees). The kernel is one template
// over the vector width W (doubles per register: 2 SSE2, 4 AVX2, 8 AVX-512) and the block shape
// (NQ query rows x NK keys for QKᵀ); each instruction set instantiates it inside a function
// compiled for that set. A vector type wider than the target's registers would also compile, but
// GCC 12 lowers its float->double conversions element by element, hence one width per target.
#include "backend/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace flashdllm::cpu {
namespace {

template <int W>
struct Lanes;
template <>
struct Lanes<2> {
  using D = double __attribute__((vector_size(16)));
  using F = float __attribute__((vector_size(8)));
};
template <>
struct Lanes<4> {
  using D = double __attribute__((vector_size(32)));
  using F = float __attribute__((vector_size(16)));
};
template <>
struct Lanes<8> {
  using D = double __attribute__((vector_size(64)));
  using F = float __attribute__((vector_size(32)));
};

// Vectors pass by reference: a vector wider than 16 bytes in a register is a different ABI per target.
template <int W>
[[gnu::always_inline]] inline void load(const float* p, typename Lanes<W>::D& out) {
  typename Lanes<W>::F f;
  std::memcpy(&f, p, sizeof f);
  out = __builtin_convertvector(f, typename Lanes<W>::D);
}

/// scores[a·n + j] = dot_f64(q_a, k_j) · scale for NQ query rows and the keys j in [j0, n), NK keys
/// at a time, the rest one at a time. The 8 partial sums of dot_f64 are 8 / W vectors.
template <int W, int NQ, int NK>
[[gnu::always_inline]] inline void score_block(const float* q, int64_t q_stride, const float* k, int64_t k_stride,
                                               int64_t j0, int64_t n, int64_t Dh, float scale, double* scores) {
  using D = typename Lanes<W>::D;
  constexpr int P = 8 / W;
  const int64_t d8 = Dh / 8 * 8;
  int64_t j = j0;
  for (; j + NK <= n; j += NK) {
    D s[NQ][NK][P] = {};
    for (int64_t i = 0; i < d8; i += 8) {
      D kv[NK][P], qv[P];
      for (int b = 0; b < NK; ++b)
        for (int p = 0; p < P; ++p) load<W>(k + (j + b) * k_stride + i + p * W, kv[b][p]);
      for (int a = 0; a < NQ; ++a) {
        for (int p = 0; p < P; ++p) load<W>(q + a * q_stride + i + p * W, qv[p]);
        for (int b = 0; b < NK; ++b)
          for (int p = 0; p < P; ++p) s[a][b][p] += qv[p] * kv[b][p];
      }
    }
    for (int a = 0; a < NQ; ++a)
      for (int b = 0; b < NK; ++b) {
        double l[8];
        for (int p = 0; p < P; ++p)
          for (int w = 0; w < W; ++w) l[p * W + w] = s[a][b][p][w];
        double t = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        const float* qa = q + a * q_stride;
        const float* kb = k + (j + b) * k_stride;
        for (int64_t i = d8; i < Dh; ++i) t += static_cast<double>(qa[i]) * static_cast<double>(kb[i]);
        scores[a * n + j + b] = t * scale;
      }
  }
  if constexpr (NK > 1)
    if (j < n) score_block<W, NQ, 1>(q, q_stride, k, k_stride, j, n, Dh, scale, scores);
}

/// out_a[c0 + c] = (Σ_j p_a[j]·v_j[c0 + c]) / sum_a for NQ rows and c < 8, p_a[j] = p[a·n + j].
template <int W, int NQ>
[[gnu::always_inline]] inline void value_block8(const double* p, const double* sum, const float* v, int64_t v_stride,
                                                int64_t n, int64_t c0, float* out, int64_t out_stride) {
  using D = typename Lanes<W>::D;
  constexpr int P = 8 / W;
  D acc[NQ][P] = {}, vv[P];
  for (int64_t j = 0; j < n; ++j) {
    for (int c = 0; c < P; ++c) load<W>(v + j * v_stride + c0 + c * W, vv[c]);
    for (int a = 0; a < NQ; ++a) {
      const double pa = p[a * n + j];
      for (int c = 0; c < P; ++c) acc[a][c] += pa * vv[c];
    }
  }
  for (int a = 0; a < NQ; ++a)
    for (int c = 0; c < P; ++c)
      for (int w = 0; w < W; ++w) out[a * out_stride + c0 + c * W + w] = static_cast<float>(acc[a][c][w] / sum[a]);
}

/// NQ query rows (or fewer: the block shrinks to `rows`) over n keys; see attend_rows.
template <int W, int NQ, int NK>
[[gnu::always_inline]] inline void attend_block(int64_t rows, const float* q, int64_t q_stride, const float* k,
                                                const float* v, int64_t stride, int64_t n, int64_t Dh, float scale,
                                                double* scores, float* out, int64_t out_stride) {
  if constexpr (NQ > 1)
    if (rows < NQ)
      return attend_block<W, NQ - 1, NK>(rows, q, q_stride, k, v, stride, n, Dh, scale, scores, out, out_stride);
  score_block<W, NQ, NK>(q, q_stride, k, stride, 0, n, Dh, scale, scores);
  double sum[NQ];
  for (int a = 0; a < NQ; ++a) {  // attend_row's softmax, row by row
    double* sa = scores + a * n;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, sa[j]);
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      sa[j] = std::exp(sa[j] - m);
      s += sa[j];
    }
    sum[a] = s;
  }
  int64_t c0 = 0;
  for (; c0 + 8 <= Dh; c0 += 8) value_block8<W, NQ>(scores, sum, v, stride, n, c0, out, out_stride);
  for (; c0 < Dh; ++c0)  // head_dim not a multiple of 8: the last columns one at a time
    for (int a = 0; a < NQ; ++a) {
      double acc = 0.0;
      for (int64_t j = 0; j < n; ++j) acc += scores[a * n + j] * v[j * stride + c0];
      out[a * out_stride + c0] = static_cast<float>(acc / sum[a]);
    }
}

template <int W, int NQ, int NK>
[[gnu::always_inline]] inline void attend_rows_impl(const float* q, int64_t q_stride, int64_t nq, const float* k,
                                                    const float* v, int64_t stride, int64_t k_begin, int64_t k_end,
                                                    int64_t Dh, float scale, double* scores, float* out,
                                                    int64_t out_stride) {
  static_assert(NQ <= kAttnScratchRows, "the scratch holds kAttnScratchRows score rows");
  const int64_t n = k_end - k_begin;
  k += k_begin * stride;
  v += k_begin * stride;
  for (int64_t r = 0; r < nq; r += NQ)
    attend_block<W, NQ, NK>(std::min<int64_t>(nq - r, NQ), q + r * q_stride, q_stride, k, v, stride, n, Dh, scale,
                            scores, out + r * out_stride, out_stride);
}

#define FDLLM_ATTEND_ROWS_PARAMS                                                                               \
  const float *q, int64_t q_stride, int64_t nq, const float *k, const float *v, int64_t stride, int64_t k_begin, \
      int64_t k_end, int64_t Dh, float scale, double *scores, float *out, int64_t out_stride
#define FDLLM_ATTEND_ROWS_ARGS q, q_stride, nq, k, v, stride, k_begin, k_end, Dh, scale, scores, out, out_stride

// Block shapes <W, NQ, NK>: NQ·NK·(8/W) QKᵀ accumulators (8 of 16 SSE2 registers, 16 of 16 AVX2
// ones, 16 of 32 AVX-512 ones), measured best among a few on the project's 2-core AMD EPYC at
// head_dim 128 (bench/results/cpu-openblas-openmp.md).
void attend_rows_baseline(FDLLM_ATTEND_ROWS_PARAMS) { attend_rows_impl<2, 2, 1>(FDLLM_ATTEND_ROWS_ARGS); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FDLLM_HAVE_X86_LEVELS 1
__attribute__((target("avx2"))) void attend_rows_avx2(FDLLM_ATTEND_ROWS_PARAMS) {
  attend_rows_impl<4, 4, 2>(FDLLM_ATTEND_ROWS_ARGS);
}
__attribute__((target("avx512f"))) void attend_rows_avx512(FDLLM_ATTEND_ROWS_PARAMS) {
  attend_rows_impl<8, 4, 4>(FDLLM_ATTEND_ROWS_ARGS);
}
#endif

}  // namespace

bool simd_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::kBaseline: return true;
#ifdef FDLLM_HAVE_X86_LEVELS
    case SimdLevel::kAvx2: return __builtin_cpu_supports("avx2");
    case SimdLevel::kAvx512: return __builtin_cpu_supports("avx512f");
#endif
    default: return false;
  }
}

SimdLevel best_simd_level() {
  static const SimdLevel best = simd_supported(SimdLevel::kAvx512) ? SimdLevel::kAvx512
                                : simd_supported(SimdLevel::kAvx2) ? SimdLevel::kAvx2
                                                                   : SimdLevel::kBaseline;
  return best;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512f";
    default: return "baseline";
  }
}

void attend_rows(SimdLevel level, FDLLM_ATTEND_ROWS_PARAMS) {
  switch (level) {
#ifdef FDLLM_HAVE_X86_LEVELS
    case SimdLevel::kAvx512: return attend_rows_avx512(FDLLM_ATTEND_ROWS_ARGS);
    case SimdLevel::kAvx2: return attend_rows_avx2(FDLLM_ATTEND_ROWS_ARGS);
#endif
    default: return attend_rows_baseline(FDLLM_ATTEND_ROWS_ARGS);
  }
}

}  // namespace flashdllm::cpu
