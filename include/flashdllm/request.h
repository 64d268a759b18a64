// Public request/result types of the flashdllm engine (see engine.h for a worked example).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashdllm {

/// Decoding settings of a generate call. Defaults are LLaDA's demo settings (generate.py main):
/// gen_length 128, block_length 32, steps 128, greedy, low-confidence remasking.
struct GenerateOptions {
  int64_t gen_length = 128;    ///< tokens to generate (canvas length)
  int64_t block_length = 32;   ///< semi-autoregressive block length; gen_length % block_length == 0
  int64_t steps = 128;         ///< forward passes (quota mode); divisible by gen_length / block_length
  std::string remasking = "low_confidence";  ///< "low_confidence" | "random"
  double temperature = 0.0;    ///< Gumbel-max sampling temperature; 0 = greedy
  double cfg_scale = 0.0;      ///< unsupervised classifier-free guidance scale; 0 = off
  std::optional<double> threshold;  ///< confidence-threshold decoding ε (commit all >= ε, at least one)
  bool logits_eos_inf = false;      ///< never generate EOS
  bool confidence_eos_eot_inf = false;  ///< LLaDA's EOS/EOT confidence option (reference §B quirk kept)
  bool confidence_f32 = false;      ///< softmax confidences in float32 instead of float64
  uint64_t seed = 0;                ///< noise seed for temperature > 0 / random remasking
  std::optional<int32_t> eot_token_id;  ///< overrides the tokenizer's <|eot_id|> (for tokenizer-less checkpoints)
  /// Flash-dLLM row layout: EOS padding after the canvas up to the next multiple of this tile
  /// (128 in Flash-dLLM), visible as context; 0 = LLaDA's layout.
  int64_t eos_pad_tile = 0;
};

/// One prompt: text (tokenized, optionally with the chat template) or token ids.
struct GenerateRequest {
  std::string prompt;                 ///< UTF-8 text (ignored when prompt_ids is set)
  std::vector<int32_t> prompt_ids;    ///< pre-tokenized prompt
  bool chat = true;                   ///< apply the checkpoint's chat template to `prompt`
};

/// Result of one request.
struct GenerateResult {
  std::vector<int32_t> prompt_ids;    ///< the tokens the model saw before the canvas
  std::vector<int32_t> canvas_ids;    ///< all gen_length generated ids (final state)
  std::vector<int32_t> output_ids;    ///< canvas_ids up to (excluding) the first EOS / EOT
  std::string text;                   ///< decoded output_ids, special tokens skipped ("" without tokenizer)
  bool stopped_at_eos = false;        ///< an EOS / EOT ended the answer inside the canvas
  int64_t nfe = 0;                    ///< forward passes this request took part in
  double seconds = 0.0;               ///< wall time of the generate call this request was in
};

}  // namespace flashdllm
