// SwiGLU gate (reference-algorithms §A.3): out = SiLU(gate) ⊙ up, gate|up fused in one GEMM output.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// gate_up: device bf16 [rows, 2F] (gate in columns [0, F), up in [F, 2F)); out: device bf16 [rows, F].
/// out[t, f] = bf16( bf16(silu(g)) · u ) with silu(g) = g / (1 + exp(−g)) in fp32: the bf16
/// rounding points of upstream's `F.silu(gate) * up` on bf16 tensors. rows == 0 is a no-op.
/// Throws Error(kDevice) on launch failure.
void swiglu_bf16(const __nv_bfloat16* gate_up, int64_t rows, int64_t f, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace flashdllm::kernels
