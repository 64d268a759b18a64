// Flash-Verify attention kernel; see attention_verify.h.
#include <string>

#include "kernels/cuda/attention_verify.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256
constexpr int kTileInts = 5;        // VerifyTile: q_start, q_end, k_start, k_end, n_cand

// The in-tile mask of reference §D.8, identical to flashdllm::verify_may_attend (backend.h):
// rows/columns in tile order [kept T | drafts S | masks S].
__device__ __forceinline__ bool may_attend(int T, int S, int row, int col) {
  if (col < T) return true;
  const bool col_draft = col < T + S;
  const int k = col_draft ? col - T : col - T - S;
  if (row < T) return !col_draft;
  const bool row_draft = row < T + S;
  const int i = row_draft ? row - T : row - T - S;
  if (row_draft) return col_draft ? k <= i : k > i;
  return col_draft ? k < i : k >= i;
}

// Online-softmax state of one (row, head) held by a warp: lane owns dims lane + 32·i.
struct RowState {
  float m, l;
  float acc[kMaxDimsPerLane];
};

// Folds one key (k, v rows of the head) into the state: s = scale·q·k; the running maximum is
// updated by every key (proper merge, unlike the released kernel's in-tile block).
__device__ __forceinline__ void fold_key(RowState& st, const float (&qv)[kMaxDimsPerLane], const __nv_bfloat16* kr,
                                         const __nv_bfloat16* vr, int dpl, int lane, float scale) {
  float dot = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i)
    if (i < dpl) dot += qv[i] * __bfloat162float(kr[lane + 32 * i]);
  const float sc = detail::warp_sum(dot) * scale;
  const float m_new = fmaxf(st.m, sc);
  const float corr = expf(st.m - m_new);  // exp(-inf) = 0 on the first key
  const float p = expf(sc - m_new);
  st.l = st.l * corr + p;
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i)
    if (i < dpl) st.acc[i] = st.acc[i] * corr + p * __bfloat162float(vr[lane + 32 * i]);
  st.m = m_new;
}

// grid = (tiles, heads); each warp walks the tile's query rows with stride kWarps.
__global__ void __launch_bounds__(kThreads)
    attention_verify_kernel(const VerifyAttentionArgs a, const int32_t* __restrict__ table, int* error_flags) {
  const int64_t tile = blockIdx.x;
  const int head = blockIdx.y;
  const int32_t qs = table[kTileInts * tile + 0], qe = table[kTileInts * tile + 1];
  const int32_t ks = table[kTileInts * tile + 2], ke = table[kTileInts * tile + 3];
  const int32_t S = table[kTileInts * tile + 4];
  const bool valid = qs >= 0 && qs <= qe && qe <= a.q_rows && ks >= 0 && ks <= ke && ke <= a.n_keys && S >= 0 &&
                     2 * static_cast<int64_t>(S) <= qe - qs;
  if (!valid) {
    if (threadIdx.x == 0 && error_flags) atomicOr(error_flags, kErrAttentionTile);
    return;
  }
  const int rows = qe - qs, T = rows - 2 * S;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int dpl = a.head_dim / 32;
  const int64_t ld = static_cast<int64_t>(a.n_heads) * a.head_dim;
  const int64_t hoff = static_cast<int64_t>(head) * a.head_dim;

  for (int r = warp; r < rows; r += kWarps) {
    const int64_t row = static_cast<int64_t>(qs) + r;
    float qv[kMaxDimsPerLane];
    RowState st;
    st.m = -__int_as_float(0x7f800000);
    st.l = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      qv[i] = i < dpl ? __bfloat162float(a.q[row * ld + hoff + lane + 32 * i]) : 0.f;
      st.acc[i] = 0.f;
    }
    // Cached keys of the slot (gather list), then the tile's own fresh keys under the mask.
    for (int32_t g = ks; g < ke; ++g) {
      const int32_t kr = a.key_rows[g];
      if (kr < 0 || kr >= a.kv_rows) {
        if (lane == 0 && error_flags) atomicOr(error_flags, kErrAttentionTile);
        continue;
      }
      const int64_t off = static_cast<int64_t>(kr) * ld + hoff;
      fold_key(st, qv, a.k_store + off, a.v_store + off, dpl, lane, a.scale);
    }
    for (int c = 0; c < rows; ++c) {
      if (!may_attend(T, S, r, c)) continue;  // warp-uniform branch
      const int64_t off = (static_cast<int64_t>(qs) + c) * ld + hoff;
      fold_key(st, qv, a.k_tile + off, a.v_tile + off, dpl, lane, a.scale);
    }
    const float inv = st.l > 0.f ? 1.f / st.l : 0.f;  // l >= 1: every row sees its own column
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i)
      if (i < dpl) a.out[row * ld + hoff + lane + 32 * i] = __float2bfloat16_rn(st.acc[i] * inv);
  }
}

}  // namespace

void attention_verify_bf16(const VerifyAttentionArgs& a, const int32_t* table, int64_t n_tiles, int* error_flags,
                           cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim % 32 != 0 || a.head_dim > 32 * kMaxDimsPerLane)
    cuda::throw_unsupported("attention_verify: head_dim " + std::to_string(a.head_dim) +
                            " unsupported (needs a multiple of 32, at most 256)");
  if (a.n_heads <= 0 || a.n_heads > 65535)
    cuda::throw_invalid_argument("attention_verify: n_heads " + std::to_string(a.n_heads) + " outside [1, 65535]");
  if (a.q_rows > 0x7fffffff || a.n_keys > 0x7fffffff)
    cuda::throw_invalid_argument("attention_verify: more than 2^31-1 query rows or gathered keys");
  if (n_tiles <= 0) return;
  if (n_tiles > 0x7fffffff) cuda::throw_invalid_argument("attention_verify: more than 2^31-1 tiles");
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(a.n_heads));
  attention_verify_kernel<<<grid, kThreads, 0, stream>>>(a, table, error_flags);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
