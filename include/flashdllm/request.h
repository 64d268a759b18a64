// Public request/result types of the flashdllm engine (see engine.h for a worked example).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashdllm {

/// Decoding settings of a generate call. Defaults are LLaDA's demo settings (generate.py main):
/// gen_length 128, block_length 32, steps 128, greedy, low-confidence remasking, no cache.
struct GenerateOptions {
  /// KV-cache strategy: "none" (LLaDA sampler, full recompute every step), "prefix" / "dual"
  /// (Fast-dLLM, reference §C), "flash" (Flash-Cache, reference §D; threshold decoding).
  std::string cache = "none";
  int64_t gen_length = 128;    ///< tokens to generate (canvas length)
  /// Semi-autoregressive block (none/prefix/dual; gen_length % block_length == 0) or the masked
  /// window of Flash-Cache; 0 = the mode's default (32, or 16 for flash).
  int64_t block_length = 0;
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

  // Flash-Cache (cache == "flash"); defaults are the paper's (reference §D.1). threshold defaults to 0.9.
  int64_t track_num = 4;        ///< tracked budget β_t = track_num · block_length; < 0 = full recompute
  int64_t mask_num = 4;         ///< masked window β_m = mask_num · block_length queried positions
  int64_t n_slots = 32;         ///< concurrent slots (continuous batching)
  int64_t tokens_per_step = 0;  ///< > 0: greedy fixed-count decoding instead of the threshold rule
  std::vector<int64_t> forced_schedule;  ///< benchmarks: tokens committed per iteration regardless of confidence
  bool reference_quirks = false;         ///< reproduce the released code's EOS-padding/output-slice bugs
  bool importance_probability_mass = false;  ///< a_i from attention probabilities (paper) instead of raw q·k (code)
  /// Query rows per forward call; an iteration needing more (admission prefills) runs as several calls
  /// over slot groups, with identical results and a smaller activation workspace. 0 = no bound.
  int64_t max_forward_rows = 4096;

  // Flash-Verify (cache == "flash"; reference §D.8): a verify pass per iteration checks drafts.
  bool verify = false;
  double gamma = 0.8;                     ///< acceptance threshold γ in (0, 1] (scripts: 0.8 GSM8K/MBPP, 0.85 MATH/HumanEval)
  std::string verify_rule = "product";    ///< "product" (released code: running product >= γ) | "paper" (argmax & conf >= γ)
  int64_t max_candidates = 0;             ///< candidates per iteration (<= block_length); 0 = block_length / 2
  int64_t forced_acceptance = 0;          ///< benchmarks: accept up to this many candidates regardless of γ; 0 = off
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
  int64_t nfe = 0;                    ///< forward passes (iterations) this request took part in
  int64_t committed_tokens = 0;       ///< canvas positions committed (tokens per iteration = this / nfe)
  /// The released Flash-dLLM code's count (num_decoded − P: decoded EOS padding and tokens past the
  /// stop included under --reference-quirks); equals committed_tokens for the other modes.
  int64_t committed_tokens_reference = 0;
  int64_t forward_passes = 0;         ///< model passes incl. Flash-Verify passes (= nfe without verify)
  int64_t verify_candidates = 0;      ///< Flash-Verify: drafts checked by the verify passes
  int64_t verify_accepted = 0;        ///< Flash-Verify: drafts accepted
  std::string call_kinds;             ///< prefix/dual cache: one letter per model call (F full, S suffix, B block)
  double seconds = 0.0;               ///< wall time of the generate call this request was in
};

}  // namespace flashdllm
