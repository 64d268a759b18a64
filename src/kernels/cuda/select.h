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
  float cmax;
  int32_t index;
};

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
  /// Device scratch: [rows · select_chunks(vocab)] partials and [rows] arrival counters; the counters
  /// must be zero before a call and every completed call leaves them zero (the CUDA backend keeps both).
  SelectPartial* partials = nullptr;
  uint32_t* arrivals = nullptr;
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
///   conf[r] = exp(c_{x0} − m) / Σ_v exp(c_v − m), c = l with conf_suppress_a/b also −inf,
///             m = max_v c_v, computed in float64 or float32 (confidence_f64); 0 when c_{x0} = −inf.
/// select_chunks(vocab) 512-thread blocks per row, each reading its chunk twice; the row's last block
/// combines the chunks in chunk order, so results do not depend on the block schedule: Σ_v exp(c_v − m)
/// is Σ over chunks of (Σ_chunk exp(c_v − m_chunk)) · exp(m_chunk − m). rows == 0 is a no-op.
/// Throws Error(kInvalidArgument) for vocab outside [1, 2^31) or missing scratch, and Error(kDevice) on
/// launch failure.
void select_tokens_f32(const SelectArgs& args, cudaStream_t stream);

}  // namespace flashdllm::kernels
