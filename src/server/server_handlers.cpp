// The completion handlers of `flashdllm serve` (POST /v1/completions, /v1/chat/completions): a call's
// checks and submission, the response_format retries, the engine events, the JSON response or the
// Server-Sent Events stream. The routes and the HTTP layer's set-up are in server.cpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "core/check.h"
#include "server/openai.h"
#include "server/server_impl.h"
#include "server/sockets.h"

namespace flashdllm::server {

using nlohmann::json;

std::optional<ApiError> Server::Impl::submit(Call& call) {
  std::vector<std::vector<int32_t>> prompts;
  const char* param = call.req.chat ? "messages" : "prompt";
  // max_tokens leaving no room for a prompt, in the API's words (validate would say gen_length).
  if (call.req.params.gen_length >= engine.serve_options().max_model_len) {
    ApiError e;
    e.message = fmt::format(
        "This model's context is {} tokens (max_model_len), but max_tokens is {}: it leaves no "
        "room for a prompt. Lower max_tokens.",
        engine.serve_options().max_model_len, call.req.params.gen_length);
    e.param = "max_tokens";
    e.code = "context_length_exceeded";
    return e;
  }
  try {  // the parameters under this engine's method (params.cpp, the one validation)
    validate(call.req.params, engine.serve_options().decode, engine.config(), /*exact_blocks=*/false);
  } catch (const Error& e) {
    ApiError a = api_error_of(e, api_param_of(e.field()));
    // gen_length within max_model_len (checked above) that params.cpp refuses is a canvas, rounded
    // up to the block, beyond the model's context.
    if (e.field() == "gen_length") a.code = "context_length_exceeded";
    return a;
  }
  const ServeOptions& so = engine.serve_options();
  const SamplingParams& sp = call.req.params;
  int64_t canvas = 0;
  try {
    canvas = engine.canvas_length(sp);
  } catch (const Error& e) {
    return api_error_of(e, "max_tokens");
  }
  // A prompt whose bytes alone prove it too long for the context is refused before it is
  // tokenised (a 7.9 MB message cost 2.5 s and +678 MB to tokenise): a text of B bytes makes at
  // least ceil(B / the tokenizer's longest token in bytes) tokens (Engine::min_prompt_tokens).
  auto context_error = [&](int64_t prompt_tokens, bool at_least) {
    return context_length_error(so.max_model_len, prompt_tokens, canvas, sp.gen_length, at_least);
  };
  if (call.req.chat) {
    if (const int64_t least = engine.min_chat_tokens(call.req.messages); least + canvas > so.max_model_len)
      return context_error(least, true);
  } else {
    for (const auto& p : call.req.prompts)
      if (const int64_t least = p.prompt_ids.empty() ? engine.min_prompt_tokens(p.prompt, false) : 0;
          least + canvas > so.max_model_len)
        return context_error(least, true);
  }
  try {
    if (call.req.chat) {
      prompts.push_back(engine.encode_chat(call.req.messages));
    } else {
      for (const auto& p : call.req.prompts)
        prompts.push_back(p.prompt_ids.empty() ? engine.encode_prompt(p.prompt, /*chat=*/false) : p.prompt_ids);
    }
  } catch (const Error& e) {
    return api_error_of(e, param);
  }
  const int64_t slots = engine.total_slots();
  const auto capacity = static_cast<size_t>(slots + so.max_queue);
  const auto n = static_cast<size_t>(call.req.n);
  if (prompts.size() * n > capacity)  // would get 429 forever: its requests are queued together
    return ApiError{400,
                    fmt::format("{} requests in one request ({} prompts x n {}), more than this server holds "
                                "at once ({} slots + {} queued): send at most {} per request",
                                prompts.size() * n, prompts.size(), n, slots, so.max_queue, capacity),
                    "invalid_request_error", n > 1 ? "n" : param, ""};
  if (!sp.stop.empty() && !engine.has_tokenizer())
    return ApiError{400, "stop strings need a tokenizer (the checkpoint has no tokenizer.json)",
                    "invalid_request_error", "stop", ""};
  for (const auto& ids : prompts) {
    if (ids.empty())
      return ApiError{400, "the prompt is empty (it tokenizes to no tokens)", "invalid_request_error", param, ""};
    const auto P = static_cast<int64_t>(ids.size());
    if (P + canvas > so.max_model_len) return context_error(P, false);
  }
  // Choice i * n + j: prompt i's sample j, seeded seed + j (distinct draws when temperature > 0).
  for (size_t k = 0; k < prompts.size() * n; ++k) {
    const size_t i = k / n;
    Pending p;
    p.prompt_tokens = static_cast<int64_t>(prompts[i].size());
    p.prompt_ids = prompts[i];
    p.sample = k % n;
    try {
      submit_attempt(call, p);
    } catch (const Error& e) {
      call.cancel_all();
      ApiError a = api_error_of(e, e.code() == ErrorCode::kInvalidArgument ? std::string(param) : std::string());
      if (prompts.size() > 1 && a.status == 400) {  // which prompt of the list
        a.param = fmt::format("{}[{}]", param, i);
        a.message = fmt::format("{}: {}", a.param, a.message);
      }
      return a;
    }
    call.pending.push_back(std::move(p));
  }
  return std::nullopt;
}

void Server::Impl::submit_attempt(const Call& call, Pending& p) {
  GenerateRequest g;
  g.prompt_ids = p.prompt_ids;
  g.chat = false;
  SamplingParams spk = call.req.params;
  spk.seed = call.req.params.seed + p.sample + static_cast<uint64_t>((p.attempts - 1) * call.req.n);
  p.stream = engine.submit(g, spk);
}

bool Server::Impl::retry_invalid_formats(Call& call) {
  const ResponseFormat& rf = call.req.response_format;
  if (rf.kind == ResponseFormat::Kind::kText) return false;
  bool again = false;
  for (Pending& p : call.pending) {
    if (!p.done || p.format_checked || !p.result || p.reason == FinishReason::kCancelled) continue;
    p.format_checked = true;
    p.format_error = check_answer_format(rf, p.result->text).value_or("");
    if (p.format_error.empty() || call.req.params.temperature == 0.0 || p.attempts >= kFormatAttempts) continue;
    ++p.attempts;
    try {
      submit_attempt(call, p);
    } catch (const Error&) {
      --p.attempts;
      continue;
    }
    p.done = false;
    p.format_checked = false;
    p.result.reset();
    again = true;
  }
  return again;
}

std::vector<LogprobEntry> Server::Impl::logprob_entries(const std::vector<TokenLogprob>& lps) const {
  return logprob_entries_of(lps, [this](int32_t id) { return engine.decode(std::span<const int32_t>(&id, 1)); });
}

template <class OnEvent>
void Server::Impl::pump(Call& call, std::chrono::milliseconds wait, OnEvent&& on_event) {
  bool waited = false;
  for (size_t i = 0; i < call.pending.size(); ++i) {
    Pending& p = call.pending[i];
    if (p.done) continue;
    const auto timeout = waited ? std::chrono::milliseconds(0) : wait;
    waited = true;
    while (auto ev = p.stream->next(timeout)) {
      if (ev->finished) {
        p.done = true;
        p.reason = ev->finish_reason;
        p.result = ev->result;
        p.error = ev->error;
        p.error_code = ev->error_code;
      }
      on_event(i, *ev);
      if (p.done) break;
    }
  }
}

ChoiceResult Server::Impl::choice_of(const Call& call, const Pending& p) const {
  ChoiceResult c;
  c.text = p.result ? p.result->text : "";
  c.finish_reason = finish_text(p.reason);
  c.prompt_tokens = p.prompt_tokens;
  c.completion_tokens = p.result ? static_cast<int64_t>(p.result->output_ids.size()) : 0;
  c.with_logprobs = call.req.params.logprobs >= 0;
  if (c.with_logprobs && p.result) c.logprobs = logprob_entries(p.result->logprobs);
  if (call.req.response_format.kind != ResponseFormat::Kind::kText) {
    c.format_check = {{"valid", p.format_error.empty()}, {"attempts", p.attempts}};
    if (!p.format_error.empty()) c.format_check["error"] = p.format_error;
  }
  return c;
}

void Server::Impl::complete(const httplib::Request& hreq, httplib::Response& res, bool chat) {
  Active guard(active);
  if (draining) return reply_error(res, {503, "the server is shutting down", "server_error", "", "unavailable"});
  auto parsed = parse_request(hreq.body, chat, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(res, *e);
  auto call = std::make_shared<Call>();
  call->req = std::move(std::get<ApiRequest>(parsed));
  call->id = fmt::format("{}-{:012x}{:012x}", chat ? "chatcmpl" : "cmpl", id_tag, next_id++);
  call->created = unix_time();
  if (auto e = submit(*call)) return reply_error(res, *e);
  if (call->req.stream) return stream(res, call);

  ClientWatch watch;
  bool failed = false;
  do {
    while (!call->all_done()) {
      pump(*call, kPoll, [&](size_t, const RequestEvent& ev) {
        // One failed prompt fails the whole request: the others' slots are freed at once.
        if (ev.finished && ev.finish_reason == FinishReason::kError && !failed) {
          failed = true;
          call->cancel_all();
        }
      });
      if (!call->all_done() && watch.gone()) {
        call->cancel_all();  // the client went away: free the slots now
        res.status = 499;
        return;
      }
    }
  } while (!failed && retry_invalid_formats(*call));
  if (const Pending* f = call->failed()) return reply_error(res, api_error_of(Error(f->error_code, f->error)));
  if (std::any_of(call->pending.begin(), call->pending.end(),
                  [](const Pending& p) { return p.reason == FinishReason::kCancelled; }))
    return reply_error(
        res, {503, "the request was cancelled (the server is shutting down)", "server_error", "", "cancelled"});
  std::vector<ChoiceResult> cs;
  for (const auto& p : call->pending) cs.push_back(choice_of(*call, p));
  const json body = chat ? chat_response(call->id, call->created, call->req.model, cs, call->req.n)
                         : completion_response(call->id, call->created, call->req.model, cs, call->req.n);
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void Server::Impl::stream(httplib::Response& res, std::shared_ptr<Call> call) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto guard = std::make_shared<Active>(active);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, call, guard](size_t, httplib::DataSink& sink) {
        const ApiRequest& rq = call->req;
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        bool ok = true, failed = false;
        auto on_event = [&](size_t i, const RequestEvent& ev) {
          Pending& p = call->pending[i];
          if (!ok || failed) return;
          if (rq.stream_canvas && (!ev.positions.empty() || ev.finished)) {
            std::vector<std::string> texts;
            for (int32_t t : ev.tokens) texts.push_back(engine.decode(std::span<const int32_t>(&t, 1)));
            ok = write(sse_event("canvas", canvas_event(call->id, static_cast<int64_t>(i), ev, texts,
                                                        p.canvas_sent ? 0 : ev.canvas_length)));
            p.canvas_sent = true;
          }
          if (ev.finished && ev.finish_reason == FinishReason::kError) {
            // One failed prompt fails the request, as without streaming: the error, then [DONE];
            // the call's other prompts are cancelled.
            ok = ok && write(sse(error_body(api_error_of(Error(ev.error_code, ev.error)))));
            failed = true;
            call->cancel_all();
            return;
          }
          if (ev.finished && ev.finish_reason == FinishReason::kCancelled) return;
          // The tokens that became stable with this event carry their logprobs (with the text, or
          // alone when a possible stop string holds the text back).
          json lp = nullptr;
          if (rq.params.logprobs >= 0 && !ev.logprobs.empty()) {
            const std::vector<LogprobEntry> entries = logprob_entries(ev.logprobs);
            lp = rq.chat ? chat_logprobs(entries) : completion_logprobs(entries, p.logprob_offset);
            for (const LogprobEntry& e : entries) p.logprob_offset += static_cast<int64_t>(e.token.size());
          }
          if (!ev.text_delta.empty() || !lp.is_null())
            ok = ok && write(sse(rq.chat ? chat_chunk(call->id, call->created, rq.model, static_cast<int64_t>(i),
                                                      ev.text_delta, false, "", lp)
                                         : completion_chunk(call->id, call->created, rq.model, static_cast<int64_t>(i),
                                                            ev.text_delta, "", lp)));
          if (ev.finished) {
            const std::string reason = finish_text(ev.finish_reason);
            ok = ok && write(sse(rq.chat ? chat_chunk(call->id, call->created, rq.model, static_cast<int64_t>(i),
                                                      std::nullopt, false, reason)
                                         : completion_chunk(call->id, call->created, rq.model, static_cast<int64_t>(i),
                                                            "", reason)));
          }
        };
        // The first chunk of every choice at once, before the request waits for a slot (chat: the
        // role and content ""; completions: text ""): clients see the stream open, not 12-36 s of
        // silence under load (issue 49 item 8; docs/serving.md).
        for (size_t i = 0; ok && i < call->pending.size(); ++i) {
          const auto index = static_cast<int64_t>(i);
          ok = write(sse(rq.chat ? chat_chunk(call->id, call->created, rq.model, index, std::string(), true, "")
                                 : completion_chunk(call->id, call->created, rq.model, index, "", "")));
        }
        while (ok && !call->all_done()) {
          pump(*call, kPoll, on_event);
          if (ok && !call->all_done() && !sink.is_writable()) ok = false;  // the client went away
        }
        if (!ok) {
          call->cancel_all();
          return false;
        }
        if (rq.include_usage && !failed) {
          int64_t pt = 0, ct = 0;
          for (size_t i = 0; i < call->pending.size(); ++i) {
            const Pending& p = call->pending[i];
            if (i % static_cast<size_t>(rq.n) == 0) pt += p.prompt_tokens;  // each prompt once
            ct += p.result ? static_cast<int64_t>(p.result->output_ids.size()) : 0;
          }
          write(sse(usage_chunk(call->id, call->created, rq.model, rq.chat, pt, ct)));
        }
        write("data: [DONE]\n\n");
        sink.done();
        return true;
      },
      [call](bool success) {
        if (!success) call->cancel_all();
      });
}

}  // namespace flashdllm::server
