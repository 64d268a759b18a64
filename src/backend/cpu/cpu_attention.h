// Blocked attention of the CPU backend: what CpuBackend::attention runs for every (tile, head,
// block of query rows). Bit for bit the result of cpu::attend_row (cpu_ops.h) on every query row,
// on every instruction set:
//  * every q·k dot product keeps dot_f64's eight partial sums (lane u accumulates elements
//    i ≡ u mod 8, in order) and their combination order; the products of two floats are exact in
//    double, so the vector width and a fused multiply-add cannot change them;
//  * the softmax maximum, exponentials and sum, and every P·V accumulator, run over the keys in
//    attend_row's order, one rounding per operation (the library is built with -ffp-contract=off:
//    a fused multiply-add would round p·v differently).
// Blocking only reuses loads: a block of query rows x keys of QKᵀ per pass over the head
// dimension, a block of query rows x 8 head columns of P·V accumulators per pass over the keys,
// held in registers. One source, instantiated per instruction set (SSE2 baseline, AVX2, AVX-512F)
// with GCC/Clang vector extensions and picked at run time from the CPU's features.
#pragma once

#include <cstdint>

namespace flashdllm::cpu {

/// Vector instruction sets the blocked attention is built for (x86-64; elsewhere only kBaseline).
enum class SimdLevel { kBaseline, kAvx2, kAvx512 };

/// Whether this CPU (and OS) runs `level`'s instructions.
bool simd_supported(SimdLevel level);
/// The widest supported level: what attend_rows uses when not told otherwise.
SimdLevel best_simd_level();
const char* simd_level_name(SimdLevel level);

/// Query rows q_r = q + r·q_stride, r in [0, nq), of one head attend to the keys and values
/// k + j·stride, v + j·stride, j in [k_begin, k_end) (k, v point at the head's first column):
/// out + r·out_stride = attend_row(q_r, k, v, stride, k_begin, k_end, Dh, scale). `scores` is scratch
/// of at least kAttnScratchRows·(k_end − k_begin) doubles. k_begin < k_end. `level` must be
/// supported (checked by the caller).
inline constexpr int64_t kAttnScratchRows = 4;
void attend_rows(SimdLevel level, const float* q, int64_t q_stride, int64_t nq, const float* k, const float* v,
                 int64_t stride, int64_t k_begin, int64_t k_end, int64_t Dh, float scale, double* scores, float* out,
                 int64_t out_stride);

}  // namespace flashdllm::cpu
