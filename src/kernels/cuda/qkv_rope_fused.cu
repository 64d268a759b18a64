// Fused QKV projection + RoPE + K/V cache write; see qkv_rope_fused.h.
#include <mma.h>

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_errors.h"
#include "kernels/cuda/qkv_rope_fused.h"

namespace flashdllm::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBM = 64;           // tokens per CTA
constexpr int kBK = 32;           // reduction slice per pipeline stage
constexpr int kLdAB = kBK + 8;    // shared row pitch of the operand tiles (bf16), breaks bank conflicts

// Rotates one (x1, x2) pair exactly as rope_store_bf16: separately rounded fp32 products and sums.
__device__ __forceinline__ void rotate(float x1, float x2, float c, float s, __nv_bfloat16* o1, __nv_bfloat16* o2) {
  *o1 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, s)));
  *o2 = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

template <int kBN>
struct Tile {
  static constexpr int kWarpsN = kBN / 32;          // each warp owns 32 output columns
  static constexpr int kWarpsM = kWarps / kWarpsN;  // and kBM / kWarpsM rows
  static constexpr int kFragM = kBM / kWarpsM / 16;
  static constexpr int kFragN = 2;
  static constexpr int kLdC = kBN + 4;  // fp32 pitch of the accumulator tile
  static constexpr int kStageBytes = (kBM + kBN) * kLdAB * 2;
  static constexpr int kSmemBytes = 2 * kStageBytes > kBM * kLdC * 4 ? 2 * kStageBytes : kBM * kLdC * 4;
  static_assert(kWarpsM * kWarpsN == kWarps && kFragM >= 1, "warp layout");
};

// grid = (ceil(T / kBM), 3·H); blockIdx.y = section·H + head with section 0 q, 1 k, 2 v, so the CTA's
// kBN = head_dim output columns start at blockIdx.y·head_dim of wqkv's rows.
template <int kBN>
__global__ void __launch_bounds__(kThreads) qkv_rope_fused_kernel(const FusedQkvArgs a) {
  using L = Tile<kBN>;
  __shared__ __align__(128) unsigned char smem[L::kSmemBytes];
  auto* sA = reinterpret_cast<__nv_bfloat16*>(smem);  // [2][kBM][kLdAB]
  auto* sB = sA + 2 * kBM * kLdAB;                     // [2][kBN][kLdAB]
  auto* sC = reinterpret_cast<float*>(smem);           // [kBM][kLdC], after the main loop

  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN;
  const int64_t D = a.d_model;
  const int warp = threadIdx.x >> 5;
  const int wm = warp / L::kWarpsN, wn = warp % L::kWarpsN;

  // Stage loader: kBM + kBN rows of kBK bf16 = 4 chunks of 16 bytes per row; rows past T read
  // nothing and store zeros.
  auto load_stage = [&](int stage, int64_t k0) {
    __nv_bfloat16* dA = sA + stage * kBM * kLdAB;
    __nv_bfloat16* dB = sB + stage * kBN * kLdAB;
    for (int c = threadIdx.x; c < (kBM + kBN) * 4; c += kThreads) {
      const int r = c >> 2, ch = c & 3;
      if (r < kBM) {
        const bool ok = m0 + r < a.tokens;
        const __nv_bfloat16* src = a.xn + (ok ? (m0 + r) * D : 0) + k0 + 8 * ch;
        detail::cp_async_16(detail::smem_addr(dA + r * kLdAB + 8 * ch), src, ok);
      } else {
        const int rb = r - kBM;
        detail::cp_async_16(detail::smem_addr(dB + rb * kLdAB + 8 * ch), a.wqkv + (n0 + rb) * D + k0 + 8 * ch, true);
      }
    }
    detail::cp_async_commit();
  };

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[L::kFragM][L::kFragN];
#pragma unroll
  for (int i = 0; i < L::kFragM; ++i)
#pragma unroll
    for (int j = 0; j < L::kFragN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const int64_t n_k = D / kBK;
  load_stage(0, 0);
  for (int64_t kt = 0; kt < n_k; ++kt) {
    const int stage = static_cast<int>(kt & 1);
    if (kt + 1 < n_k) {
      load_stage(stage ^ 1, (kt + 1) * kBK);
      detail::cp_async_wait<1>();
    } else {
      detail::cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* tA = sA + stage * kBM * kLdAB;
    const __nv_bfloat16* tB = sB + stage * kBN * kLdAB;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[L::kFragM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[L::kFragN];
#pragma unroll
      for (int i = 0; i < L::kFragM; ++i)
        wmma::load_matrix_sync(fa[i], tA + (wm * L::kFragM * 16 + i * 16) * kLdAB + kk, kLdAB);
#pragma unroll
      for (int j = 0; j < L::kFragN; ++j)  // B = wqkvᵀ: the [kBN][kBK] row-major tile read column-major
        wmma::load_matrix_sync(fb[j], tB + (wn * 32 + j * 16) * kLdAB + kk, kLdAB);
#pragma unroll
      for (int i = 0; i < L::kFragM; ++i)
#pragma unroll
        for (int j = 0; j < L::kFragN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();  // the stage is overwritten by the load issued in the next iteration
  }
#pragma unroll
  for (int i = 0; i < L::kFragM; ++i)
#pragma unroll
    for (int j = 0; j < L::kFragN; ++j)
      wmma::store_matrix_sync(sC + (wm * L::kFragM * 16 + i * 16) * L::kLdC + wn * 32 + j * 16, acc[i][j], L::kLdC,
                              wmma::mem_row_major);
  __syncthreads();

  // Epilogue: round to bf16 (the unfused GEMM's output), rotate q/k, write q / the store rows.
  const int section = static_cast<int>(blockIdx.y) / a.n_heads;
  const int head = static_cast<int>(blockIdx.y) % a.n_heads;
  const int half = kBN / 2;
  const int64_t width = static_cast<int64_t>(a.n_heads) * kBN;
  const int64_t col0 = static_cast<int64_t>(head) * kBN;
  if (section == 0 && a.error_flags && threadIdx.x < kBM && blockIdx.y == 0) {  // one report per token
    const int64_t t = m0 + threadIdx.x;
    if (t < a.tokens) {
      const int32_t pos = a.positions[t], row = a.rows[t];
      if (pos < 0 || pos >= a.max_positions) atomicOr(a.error_flags, kErrRopePosition);
      if (row < 0 || row >= a.store_rows) atomicOr(a.error_flags, kErrStoreRow);
    }
  }
  const int per_row = section == 2 ? kBN : half;
  for (int e = threadIdx.x; e < kBM * per_row; e += kThreads) {
    const int r = e / per_row, i = e % per_row;
    const int64_t t = m0 + r;
    if (t >= a.tokens) continue;
    const int32_t pos = a.positions[t];
    const bool pos_ok = pos >= 0 && pos < a.max_positions;
    const float* c = sC + r * L::kLdC;
    if (section == 0) {
      __nv_bfloat16* qo = a.q_out + t * width + col0;
      if (!pos_ok) {
        qo[i] = detail::bf16_nan();
        qo[i + half] = detail::bf16_nan();
        continue;
      }
      const int64_t ti = static_cast<int64_t>(pos) * half + i;
      rotate(detail::round_bf16(c[i]), detail::round_bf16(c[i + half]), a.cos[ti], a.sin[ti], &qo[i], &qo[i + half]);
      continue;
    }
    const int32_t row = a.rows[t];
    if (!pos_ok || row < 0 || row >= a.store_rows) continue;  // as rope_store_bf16: no store rows
    if (section == 1) {
      __nv_bfloat16* ko = a.k_store + static_cast<int64_t>(row) * width + col0;
      const int64_t ti = static_cast<int64_t>(pos) * half + i;
      rotate(detail::round_bf16(c[i]), detail::round_bf16(c[i + half]), a.cos[ti], a.sin[ti], &ko[i], &ko[i + half]);
    } else {
      a.v_store[static_cast<int64_t>(row) * width + col0 + i] = __float2bfloat16_rn(c[i]);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool qkv_rope_fused_supported(const FusedQkvArgs& a) noexcept {
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  if (a.d_model <= 0 || a.d_model % kBK != 0 || a.n_heads <= 0) return false;
  if (3LL * a.n_heads > 65535) return false;
  for (const void* p : {static_cast<const void*>(a.xn), static_cast<const void*>(a.wqkv)})
    if (!aligned16(p)) return false;
  return true;
}

void qkv_rope_store_fused_bf16(const FusedQkvArgs& a, cudaStream_t stream) {
  if (!qkv_rope_fused_supported(a))
    cuda::throw_unsupported("qkv_rope_store (fused): needs head_dim 64 or 128 (got " + std::to_string(a.head_dim) +
                            "), d_model a multiple of 32 (got " + std::to_string(a.d_model) +
                            "), at most 21845 heads and 16-byte aligned xn / wqkv");
  if (a.tokens <= 0) return;
  if (a.tokens > 0x7fffffffLL * kBM) cuda::throw_invalid_argument("qkv_rope_store (fused): too many tokens");
  const dim3 grid(static_cast<unsigned>((a.tokens + kBM - 1) / kBM), static_cast<unsigned>(3 * a.n_heads));
  if (a.head_dim == 128)
    qkv_rope_fused_kernel<128><<<grid, kThreads, 0, stream>>>(a);
  else
    qkv_rope_fused_kernel<64><<<grid, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashdllm::kernels
