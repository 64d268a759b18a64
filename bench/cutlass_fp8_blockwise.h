// CUTLASS's sm_90 block-scaled FP8 GEMM (KernelTmaWarpSpecializedCooperativeFP8Blockwise: e4m3
// operands, fp32 accumulation with the scales applied per 128-deep K block inside the main loop) in
// the engine's layout of the block-FP8 linear layer, for gemm_bench --fp8: issue 48 asks for
// CUTLASS's route and cuBLASLt's (GemmLt::matmul_fp8, the engine's) measured side by side.
//   out[T, N] (+)= Σ_k (xq[t, k] · xs(t, k / 128)) · (wq[n, k] · ws(n / 128, k / 128))
// xq [T, K] and wq [N, K] e4m3 row-major; xs F32 outer-major (xs[g·T + t], the layout the engine's
// quantiser writes for cuBLASLt with ld = T); ws F32 row-major [ceil(N/128), ceil(K/128)] (the
// checkpoint's weight_scale_inv); out bf16 row-major. 128 x 128 x 128 tiles, cooperative main
// loop, CUTLASS's no-shared-memory epilogue (its TMA epilogue with a bf16 source operand C does not
// compile with the Debian host compiler; the residual add needs C). Bench-only; built with the sm_90
// kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::bench {

/// The tile scheduler: CUTLASS's persistent data-parallel one (one 128 x 128 output tile per work
/// unit) or stream-K (the K loop split over SMs when there are fewer tiles than SMs, as at 128 rows).
enum class CutlassFp8Schedule { kDataParallel, kStreamK };

/// Whether this build has it.
bool cutlass_fp8_blockwise_built() noexcept;

/// Bytes of device workspace the call needs (stream-K's partial sums; 0 for data-parallel).
size_t cutlass_fp8_blockwise_workspace(int T, int N, int K, CutlassFp8Schedule schedule);

/// Runs it (accumulate: out += the product). T % 4 == 0 (the activation scales' TMA alignment),
/// K % 128 == 0, N % 16 == 0, 16-byte aligned pointers; `workspace` of cutlass_fp8_blockwise_workspace
/// bytes. Throws std::runtime_error when CUTLASS cannot implement it or the launch fails.
void cutlass_fp8_blockwise(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, __nv_bfloat16* out,
                           int T, int N, int K, bool accumulate, CutlassFp8Schedule schedule, void* workspace,
                           cudaStream_t stream);

}  // namespace flashdllm::bench
