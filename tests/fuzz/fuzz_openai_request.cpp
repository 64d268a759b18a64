// Fuzz target: the HTTP request bodies of `flashdllm serve` (src/server/openai.h parse_request), as
// completions (first byte even) or chat completions (odd). Whatever the bytes, the parser returns a
// typed request or an OpenAI error (400 or 404 naming a field), and the error object serializes;
// a parsed request holds values the engine accepts the shape of (max_tokens >= 1, a finite
// temperature, a threshold in (0, 1], at most 16 non-empty stop strings, prompts or messages,
// logprobs in [-1, 20]), and its response_format checks an answer without failing.
#include <cmath>
#include <string_view>

#include "fuzz/fuzz_common.h"
#include "server/openai.h"

using namespace flashdllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  server::ParseLimits limits;
  limits.model_id = "llada-arith-12m";
  const auto r = server::parse_request(body, chat, limits);
  if (const auto* e = std::get_if<server::ApiError>(&r)) {
    fuzz::require(e->status == 400 || e->status == 404);
    fuzz::require(!e->message.empty());
    fuzz::require(!server::error_body(*e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).empty());
    return 0;
  }
  const auto& q = std::get<server::ApiRequest>(r);
  fuzz::require(q.chat == chat && q.model == limits.model_id);
  fuzz::require(chat ? !q.messages.empty() : !q.prompts.empty());
  fuzz::require(q.params.gen_length >= 1 && std::isfinite(q.params.temperature) && q.params.temperature >= 0);
  fuzz::require(!q.params.threshold || (*q.params.threshold > 0 && *q.params.threshold <= 1));
  fuzz::require(q.params.stop.size() <= 16);
  for (const auto& s : q.params.stop) fuzz::require(!s.empty());
  fuzz::require(!q.stream_canvas || q.stream);
  fuzz::require(q.n >= 1 && q.n <= 128);  // ParseLimits::max_n
  fuzz::require(q.params.logprobs >= -1 && q.params.logprobs <= 20);
  // A parsed response_format checks any answer (here the request's own text) without failing.
  (void)server::check_answer_format(q.response_format, chat ? q.messages.front().content : q.prompts.front().prompt);
  // The response objects of a parsed request serialize (text may hold invalid UTF-8: replaced).
  server::ChoiceResult c;
  c.text = chat ? q.messages.front().content : q.prompts.front().prompt;
  c.finish_reason = "stop";
  (void)server::completion_response("cmpl-x", 0, q.model, {c}, 1)
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
