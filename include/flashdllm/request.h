// Public request/result types of the flashdllm engine (see engine.h for a worked example).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flashdllm {

/// One chat message (the checkpoint's chat template renders a list of them).
struct ChatMessage {
  std::string role;     ///< "system", "user", "assistant"
  std::string content;
};

/// One prompt: text (tokenized, optionally with the chat template) or token ids.
struct GenerateRequest {
  std::string prompt;                 ///< UTF-8 text (ignored when prompt_ids is set)
  std::vector<int32_t> prompt_ids;    ///< pre-tokenized prompt
  bool chat = true;                   ///< apply the checkpoint's chat template to `prompt`
};

/// One of the most probable tokens of a committed token's logits row (TokenLogprob::top).
struct TopLogprob {
  int32_t token = -1;
  float logprob = 0.0f;  ///< natural log of its probability
};

/// The log-probability of one committed token (OpenAI `logprobs`; SamplingParams::logprobs asks for
/// it). Definition (docs/decisions.md): the model's own distribution at the iteration that committed
/// the token, log_softmax over the whole vocabulary of the float32 logits row that predicted the
/// position (its logits_source row), at temperature 1, before any top_p / top_k filtering, computed
/// in float64; a token the decoding rule suppresses (logits_eos_inf's EOS) has probability 0 there.
/// Under LLaDA's confidence rule exp(logprob) is the committed token's confidence. Flash-Verify's
/// accepted drafts: the main pass's window row that proposed the draft.
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  /// The row's SamplingParams::logprobs most probable tokens, most probable first (ties: lower id
  /// first); the mask id is never listed (no position can be committed to it), its mass still counts.
  std::vector<TopLogprob> top;
};

/// Why a request ended.
enum class FinishReason {
  kStop,       ///< an EOS / EOT or a stop string ended the answer (OpenAI "stop")
  kLength,     ///< the canvas (max_tokens) filled without an end (OpenAI "length")
  kCancelled,  ///< cancelled by the caller (a disconnected client, shutdown)
  kError,      ///< the engine failed while running it (the event carries the message)
};
/// "stop" | "length" | "cancelled" | "error".
const char* finish_reason_name(FinishReason r) noexcept;

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
  FinishReason finish_reason = FinishReason::kLength;
  double seconds = 0.0;               ///< generate: wall time of the call this request was in; submit: latency
  double latency_seconds = 0.0;       ///< from submission (the generate call's start) to this request's end
  bool chat_template = false;         ///< the prompt went through the chat template
  /// finish_reason kError (Engine::generate: the request failed alone, e.g. non-finite logits): the
  /// message, naming the checkpoint; prompt_ids are set, the other fields hold nothing.
  std::string error;
  /// SamplingParams::logprobs >= 0: output_ids[i]'s log-probability and top alternatives, one per
  /// output id (the ending EOS / EOT excluded); empty otherwise.
  std::vector<TokenLogprob> logprobs;

  /// The one definition of generated tokens, used by every report: the answer's tokens plus the
  /// ending EOS / EOT when there is one (the prompt and any padding after the end excluded).
  int64_t generated_tokens() const noexcept {
    return static_cast<int64_t>(output_ids.size()) + (stopped_at_eos ? 1 : 0);
  }
};

}  // namespace flashdllm
