// Denoiser-side logits ops on the device: classifier-free guidance and token selection
// (argmax / Gumbel-max sampling + softmax confidence). Reference-algorithms §B (LLaDA
// generate.py), §C/§D (fp64 confidence). No full-vocabulary logits leave the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flashdllm::kernels {

/// out = uncond + (scale + 1)·(cond − uncond) elementwise over n floats (device), each operation
/// rounded in fp32 in that order (no FMA), as upstream's PyTorch expression. out may alias cond
/// or uncond. n == 0 is a no-op. Throws Error(kDevice) on launch failure.
void cfg_combine_f32(const float* cond, const float* uncond, float scale, int64_t n, float* out, cudaStream_t stream);

/// One chunk's share of a row (select_tokens_f32's scratch): its best key and index, the maximum of
/// its confidence logits and Σ exp(c_v − that maximum) over it.
struct SelectPartial {
  double key;
  double sum;
  double tsum;  ///< Σ exp(c_v − cmax)·(c_v − cmax) (SelectArgs::confidence kNegEntropy)
  float cmax;
  float c2;  ///< the chunk's second largest confidence logit (kMargin)
  int32_t index;
};

/// What conf[r] holds (Backend's SelectConfidence): p(x0), top-1 − top-2 probability, or
/// Σ_v p_v·log p_v (the negative entropy).
enum class SelectConfidenceKind : int32_t { kProbability = 0, kMargin = 1, kNegEntropy = 2 };

/// Parameters of select_tokens_f32 (see Backend's SelectParams for the meaning of each field).
struct SelectArgs {
  const float* logits = nullptr;     ///< device F32 [rows, vocab]
  const int32_t* row_keys = nullptr; ///< device I32 [rows]: noise key of each row
  int32_t* x0 = nullptr;             ///< device I32 [rows]
  double* conf = nullptr;            ///< device F64 [rows]
  int64_t rows = 0;
  int64_t vocab = 0;
  double temperature = 0.0;  ///< >= 0; 0 = argmax
  uint64_t seed = 0, step = 0;
  int32_t suppress_token = -1;   ///< logit set to −inf for argmax and confidence; −1 = none
  int32_t exclude_token = -1;    ///< never the argmax, kept in the confidence's softmax; −1 = none
  int32_t conf_suppress_a = -1;  ///< probability zeroed for the confidence only; −1 = none
  int32_t conf_suppress_b = -1;
  bool confidence_f64 = true;  ///< softmax in float64 (true) or float32 (false)
  /// Dream's rule (SelectParams::dream_rule): the confidence logits are c_v = l_v / temperature (an fp32
  /// division, as upstream scales the logits) when temperature > 0, and conf[r] is `confidence` of
  /// softmax(c). kMargin / kNegEntropy need confidence_f64.
  bool scaled_confidence = false;
  SelectConfidenceKind confidence = SelectConfidenceKind::kProbability;
  /// Dream's filters (scaled_confidence only; Backend's SelectParams::top_p / top_k): top_p < 1 keeps
  /// the tokens up to cumulative probability top_p, top_k > 0 the logits >= the k-th largest.
  double top_p = 1.0;
  int32_t top_k = 0;
  /// Device scratch: [rows · select_chunks(vocab)] partials and [rows] arrival counters; the counters
  /// must be zero before a call and every completed call leaves them zero (the CUDA backend keeps both).
  /// With a filter on, [rows] filter thresholds and tie cuts too (written by the call).
  SelectPartial* partials = nullptr;
  uint32_t* arrivals = nullptr;
  float* filter_theta = nullptr;
  int32_t* filter_cut = nullptr;
};

/// The blocks select_tokens_f32 cuts a row of `vocab` logits into (8 at LLaDA's 126464); 0 for
/// vocab <= 0.
int64_t select_chunks(int64_t vocab) noexcept;

/// Per row r, with l_v = logits[r, v] (−inf at suppress_token):
///   key_v = l_v                                   if temperature == 0
///   key_v = (double)l_v − τ·ln(−ln u_v)          otherwise, u_v = philox_uniform(seed, step, row_keys[r], v),
/// which is the log of upstream's exp(l)/(−ln u)^τ in float64, so both have the same argmax;
///   x0[r]   = argmax_v key_v over v != suppress_token, exclude_token (the smallest v among equal maxima; −1
///             when no token is left);
///   conf[r] = exp(c_{x0} − m) / Σ_v exp(c_v − m), c = l with conf_suppress_a/b also −inf (divided by
///             the temperature when scaled_confidence), m = max_v c_v, computed in float64 or float32
///             (confidence_f64); 0 when c_{x0} = −inf;
///   kMargin:  (exp(c1 − m) − exp(c2 − m)) / S with c1 >= c2 the two largest c (S the sum above);
///   kNegEntropy: Σ_v p_v·(c_v − m − ln S) = (Σ_c e^{cmax_c − m}·(tsum_c + (cmax_c − m)·sum_c)) / S − ln S,
///             i.e. Σ p·log p. Dream's Σ p·log(p + 1e-10) exceeds it by at most 1e-10 per token of the
///             vocabulary (p·log(1 + 1e-10/p) <= 1e-10): 1.5e-5 nats at Dream's 152,064, far below the
///             fp32 noise of the logits the upstream code computes it from.
/// Filters (scaled_confidence with top_p < 1 or 0 < top_k < vocab): the tokens they remove take no part
/// in x0 or conf, exactly as Dream's top_p_logits then top_k_logits (cpu_select.cpp): with the c_v above
/// (suppress_token removed) sorted descending, ties by the lower index, top_p keeps each token whose
/// cumulative probability before it is <= top_p; top_k then keeps the kept tokens >= the k-th largest
/// kept c (every tie of it; all when fewer than k are kept). A first kernel (one block per row) finds
/// each row's kept set as a threshold θ and a tie cut: kept ⇔ c > θ or (c == θ and v <= cut), θ by
/// bisection over the 2^32 float orders (~32 passes over the row, the probability mass in float64),
/// the cut as the index of the last tie top_p keeps. A row with a NaN or no finite c is not filtered.
/// select_chunks(vocab) 512-thread blocks per row, each reading its chunk twice; the row's last block
/// combines the chunks in chunk order, so results do not depend on the block schedule: Σ_v exp(c_v − m)
/// is Σ over chunks of (Σ_chunk exp(c_v − m_chunk)) · exp(m_chunk − m). rows == 0 is a no-op.
/// Throws Error(kInvalidArgument) for vocab outside [1, 2^31), missing scratch or top_p outside (0, 1] /
/// top_k < 0, and Error(kDevice) on launch failure.
void select_tokens_f32(const SelectArgs& args, cudaStream_t stream);

}  // namespace flashdllm::kernels
