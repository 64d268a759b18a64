// The numerics policy, written once (docs/numerics.md explains each bound).
//
// Continuous outputs are compared by the relative max error max|a - b| / max|ref|, against a
// bound that is a small multiple of what a straightforward implementation in the same precision
// gets. Discrete outputs (argmax, commit sets) must match exactly where both sides use the same
// precision and the decision margin is above the noise level; otherwise they are reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace flashdllm::test {

/// fp32 engine vs the upstream fp32 (TF32 off) logits: golden README's forward tolerance.
inline constexpr double kFp32LogitRelTol = 5e-5;
/// Two fp32 implementations of the same op (different summation orders), relative to max|ref|.
inline constexpr double kFp32OpRelTol = 2e-5;
/// fp32 tensor-parallel forward (N CPU ranks, in-process all-reduce in rank order) vs the
/// unsharded fp32 forward, relative to max|ref|: the same products, the row-parallel sums split into
/// N partial GEMMs added in rank order (issue 14's acceptance bound).
inline constexpr double kTpFp32LogitRelTol = 1e-5;
/// bf16 storage with fp32 accumulation vs an fp32 reference of the same op on bf16-rounded inputs.
inline constexpr double kBf16OpRelTol = 1.6e-2;
/// Whole bf16 forward vs fp32 forward (logits), relative to max|ref| (golden README: ~1e-2).
inline constexpr double kBf16LogitRelTol = 3e-2;
/// Fraction of rows whose argmax a bf16 forward must share with the fp32 reference (the rest are
/// near-ties between the top-2 logits, which bf16 rounding may flip).
inline constexpr double kBf16ArgmaxAgreement = 0.97;
/// A bf16 engine on a model whose bf16 error was measured with an independent straightforward bf16
/// forward (the "yardstick"): allowed error = this factor x the yardstick's, and argmax agreement
/// at most this much below the yardstick's.
inline constexpr double kBf16YardstickFactor = 1.5;
inline constexpr double kBf16YardstickArgmaxSlack = 0.05;
/// Decision margin (confidence gap) above which a bf16 engine must reproduce fp32 decisions.
inline constexpr double kBf16DecisionMargin = 2e-2;
/// Decision margin above which fp32 engines must reproduce upstream fp32 decisions exactly
/// (golden README: "exact match when margin > 1e-3").
inline constexpr double kFp32DecisionMargin = 1e-3;

/// fp32 decoding decisions vs an upstream fp32 run that records no margins (Flash-dLLM): a decision
/// is compared only when no confidence (or running product) lies within this of its threshold ε / γ
/// (golden README decoding tolerance, ~1e-4).
inline constexpr double kFp32NearThreshold = 1e-4;
/// Attention-importance ranking: a gap between two ranked a_t values below this fraction of the
/// slot's largest |a_t| is a near-tie (our double reductions vs the reference's fp32 Triton sums may
/// order them differently).
inline constexpr double kFp32RankNearTie = 1e-5;
/// Confidences of the same request computed in batches of different composition (fp32 GEMMs of
/// different row counts differ by ~1e-5; rows read from another slot or window by O(0.1)).
inline constexpr double kFp32BatchConfTol = 1e-3;
/// Absolute error of a sum of O(100) fp32 softmax probabilities (Flash-Cache's probability-mass a_t).
inline constexpr double kFp32ProbabilitySumTol = 1e-3;
/// Two logit rows that must differ (a test that proves nothing otherwise) differ by at least this.
inline constexpr double kDistinctLogitsMin = 1e-3;
/// fp32 engine vs fp32 PyTorch training code on the same bf16 weights (issue 3), relative.
inline constexpr double kTrainingCodeParityTol = 1e-4;

/// flashdllm-make-checkpoint's values (fp32 branch-free log / sincos polynomials, |error| < 1e-6 and
/// 2e-7) vs an independent double evaluation of the same Box-Muller draw: absolute + relative part.
inline constexpr double kMakeCheckpointValueAbsTol = 1e-5;
inline constexpr double kMakeCheckpointValueRelTol = 2e-6;

/// max_i |a[i] - b[i]| (NaN anywhere returns +inf).
double max_abs_diff(std::span<const float> a, std::span<const float> b);
/// max_i |ref[i]|.
double max_abs(std::span<const float> ref);
/// max|a - ref| / max|ref| (NaN -> +inf; ref all zero -> max|a - ref|).
double rel_max_err(std::span<const float> a, std::span<const float> ref);
/// Share of the rows of a and b ([rows, V] row-major, same size) whose argmax (first maximum) agrees,
/// counting only the rows where b's top two values differ by at least `min_gap` (absolute; 0: every
/// row). 1.0 when no row is counted.
double argmax_agreement(std::span<const float> a, std::span<const float> b, int64_t V, double min_gap = 0);

}  // namespace flashdllm::test
