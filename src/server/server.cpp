// `flashdllm serve`'s HTTP layer; see server.h for the routes, threads and shutdown.
#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "core/check.h"
#include "core/log.h"
#include "model/model_config.h"
#include "server/http_connection.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/page.h"
#include "server/sockets.h"
#include "server/web_guard.h"

namespace flashdllm::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(50);

constexpr int64_t kMaxDefaultThreads = 4096;  // as --http-threads allows

/// The HTTP layer's options from the server's (limits, workers) and the engine's size.
HttpOptions http_options(const Engine& engine, const ServerOptions& o) {
  HttpOptions h;
  ConnectionLimits& l = h.limits;
  l.max_connections = o.max_connections;
  l.idle_timeout_s = o.keep_alive_timeout_s;
  l.max_header_bytes = o.max_header_bytes;
  l.max_header_lines = o.max_header_lines;
  l.header_timeout_s = o.read_timeout_s;
  l.max_body_bytes = o.max_body_bytes;
  l.max_buffered_body_bytes = std::max(o.max_buffered_body_bytes, o.max_body_bytes);
  l.body_stall_s = o.read_timeout_s;
  const ServeOptions& so = engine.serve_options();
  h.max_threads = static_cast<size_t>(
      o.max_threads > 0 ? o.max_threads
                        : std::clamp<int64_t>(engine.total_slots() + so.max_queue + 32, 256, kMaxDefaultThreads));
  h.write_timeout_s = o.write_timeout_s;
  return h;
}

/// Raises this process's open-file limit to what `max_connections` needs (up to the hard limit) and
/// returns the connections it allows: max_connections, or fewer where the hard limit is lower.
/// Each connection may need two sockets: the open ones, and as many refused past the limit while
/// their 503 lingers (ConnectionLoop). Without room for both, a flood past the limit exhausted the
/// descriptors and new clients waited in the listen backlog instead of getting their 503 at once.
size_t fit_file_limit(size_t max_connections) {
  constexpr rlim_t kSpare = 128;  // model files, the listener, epoll, logs
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return max_connections;
  const rlim_t want = 2 * static_cast<rlim_t>(max_connections) + kSpare;
  if (r.rlim_cur < want) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min(want, r.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
  }
  if (r.rlim_cur >= want) return max_connections;
  const size_t fit =
      r.rlim_cur > 3 * kSpare ? static_cast<size_t>((r.rlim_cur - kSpare) / 2) : static_cast<size_t>(kSpare);
  std::fprintf(stderr,
               "[flashdllm] warning: the open-file limit (ulimit -n %llu) allows %zu connections, not the %zu of "
               "--max-connections: raise the limit to serve more\n",
               static_cast<unsigned long long>(r.rlim_cur), fit, max_connections);
  return fit;
}

int64_t unix_time() { return static_cast<int64_t>(std::time(nullptr)); }

/// One submitted request of an API call (a completions call may hold several prompts).
struct Pending {
  std::shared_ptr<RequestStream> stream;
  int64_t prompt_tokens = 0;
  bool done = false;
  bool canvas_sent = false;
  std::shared_ptr<const GenerateResult> result;
  FinishReason reason = FinishReason::kLength;
  std::string error;
  ErrorCode error_code = ErrorCode::kInternal;
  // What a resubmission needs (response_format retries): the prompt, the choice's sample j.
  std::vector<int32_t> prompt_ids;
  uint64_t sample = 0;
  int64_t attempts = 1;         // generations of this choice (response_format retries included)
  bool format_checked = false;  // the current result was checked against response_format
  std::string format_error;     // its problem ("" = it meets the format)
  int64_t logprob_offset = 0;   // completions stream: text_offset of the next logprob entry
};

// Generations of a choice under response_format json_object / json_schema when temperature > 0
// (a fresh draw each); greedy decoding would repeat its answer, so it gets one (docs/serving.md).
constexpr int64_t kFormatAttempts = 4;

/// An API call in flight: its request, its submitted requests, and what a response needs.
struct Call {
  ApiRequest req;
  std::string id;
  int64_t created = 0;
  std::vector<Pending> pending;

  void cancel_all() {
    for (auto& p : pending)
      if (!p.done && p.stream) p.stream->cancel();
  }
  bool all_done() const {
    return std::all_of(pending.begin(), pending.end(), [](const Pending& p) { return p.done; });
  }
  const Pending* failed() const {
    for (const auto& p : pending)
      if (p.done && p.reason == FinishReason::kError) return &p;
    return nullptr;
  }
};

std::string finish_text(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

}  // namespace

struct Server::Impl {
  Engine& engine;
  ServerOptions opt;
  ParseLimits limits;
  HttpServer http;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> active{0};  // handlers and stream providers in flight
  std::atomic<uint64_t> next_id{1};
  // Response ids: a random 48-bit part drawn once per server, then the counter, so that ids stay
  // unique across restarts (clients and logs key on them) and still show the request order.
  const uint64_t id_tag = [] {
    std::random_device rd;
    return ((static_cast<uint64_t>(rd()) << 32) ^ rd()) & 0xffffffffffffULL;
  }();
  int64_t started_at = unix_time();
  HttpCounters counters;
  std::mutex stop_mu;
  bool stopped = false;
  int listen_fd = -1;  // the listening socket (set_socket_options)

  Impl(Engine& e, ServerOptions o) : engine(e), opt(fitted(std::move(o))), http(http_options(e, opt)) {}

  static ServerOptions fitted(ServerOptions o) {
    o.max_connections = fit_file_limit(o.max_connections);
    return o;
  }

  /// Counts a handler (or a stream provider) in flight for the drain.
  struct Active {
    std::atomic<int64_t>& n;
    explicit Active(std::atomic<int64_t>& c) : n(c) { ++n; }
    ~Active() { --n; }
  };

  void reply_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 429) res.set_header("Retry-After", "1");
    res.set_content(error_body(e).dump(), "application/json");
  }

  /// Tokenizes and submits every prompt of `call`; an error cancels what was submitted.
  std::optional<ApiError> submit(Call& call) {
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
      if (ids.empty()) return ApiError{400, "the prompt is empty (it tokenizes to no tokens)", "invalid_request_error", param, ""};
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

  /// Submits (again) the generation of choice `p`: its prompt, seeded seed + sample + (attempts - 1)
  /// * n, so that a retry is a fresh draw that no other choice of the call makes. Throws as submit.
  void submit_attempt(const Call& call, Pending& p) {
    GenerateRequest g;
    g.prompt_ids = p.prompt_ids;
    g.chat = false;
    SamplingParams spk = call.req.params;
    spk.seed = call.req.params.seed + p.sample + static_cast<uint64_t>((p.attempts - 1) * call.req.n);
    p.stream = engine.submit(g, spk);
  }

  /// response_format json_object / json_schema: checks every newly finished choice's answer and
  /// submits again, with a fresh seed, those that fail while they have attempts left (temperature
  /// > 0 only). Returns whether it resubmitted any (the call is not done then). A resubmission the
  /// engine refuses (queue full, stopping) keeps the answer it has.
  bool retry_invalid_formats(Call& call) {
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

  std::vector<LogprobEntry> logprob_entries(const std::vector<TokenLogprob>& lps) const {
    return logprob_entries_of(lps, [this](int32_t id) { return engine.decode(std::span<const int32_t>(&id, 1)); });
  }

  /// Takes the events that are there (waiting up to `wait` for the first undone request) and
  /// hands each to `on_event`.
  template <class OnEvent>
  void pump(Call& call, std::chrono::milliseconds wait, OnEvent&& on_event) {
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

  ChoiceResult choice_of(const Call& call, const Pending& p) const {
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

  void complete(const httplib::Request& hreq, httplib::Response& res, bool chat) {
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
    if (const Pending* f = call->failed())
      return reply_error(res, api_error_of(Error(f->error_code, f->error)));
    if (std::any_of(call->pending.begin(), call->pending.end(),
                    [](const Pending& p) { return p.reason == FinishReason::kCancelled; }))
      return reply_error(res, {503, "the request was cancelled (the server is shutting down)", "server_error", "",
                               "cancelled"});
    std::vector<ChoiceResult> cs;
    for (const auto& p : call->pending) cs.push_back(choice_of(*call, p));
    const json body = chat ? chat_response(call->id, call->created, call->req.model, cs, call->req.n)
                           : completion_response(call->id, call->created, call->req.model, cs, call->req.n);
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  /// Server-Sent Events: the first chunk of every choice as soon as the call is accepted (queued or
  /// running), chunks of the stable text as it grows, the final chunk of every choice, the usage
  /// chunk when asked, then [DONE]; canvas events (stream_canvas) between them. A choice's `index`
  /// is its place in call->pending (prompt * n + sample).
  void stream(httplib::Response& res, std::shared_ptr<Call> call) {
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
                                           : completion_chunk(call->id, call->created, rq.model,
                                                              static_cast<int64_t>(i), ev.text_delta, "", lp)));
            if (ev.finished) {
              const std::string reason = finish_text(ev.finish_reason);
              ok = ok && write(sse(rq.chat ? chat_chunk(call->id, call->created, rq.model, static_cast<int64_t>(i),
                                                        std::nullopt, false, reason)
                                           : completion_chunk(call->id, call->created, rq.model,
                                                              static_cast<int64_t>(i), "", reason)));
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

  void routes() {
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { complete(q, r, false); });
    http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { complete(q, r, true); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(models_response(limits.model_id, started_at).dump(), "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& q, httplib::Response& r) {
      const std::string id = q.matches[1];
      if (id != limits.model_id) return reply_error(r, model_not_found(id, limits.model_id));
      r.set_content(model_response(limits.model_id, started_at).dump(), "application/json");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
      r.status = draining ? 503 : 200;
      r.set_content(json{{"status", draining ? "draining" : "ok"}}.dump(), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(prometheus_text(engine.metrics(), counters), "text/plain; version=0.0.4");
    });
    http.Get("/", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(live_page_html(limits.model_id), "text/html; charset=utf-8");
    });
    // Before cpp-httplib reads a body: it applies no size limit to chunked bodies and reads (to skip)
    // a body declared too large, so both are refused here, from the headers alone.
    WebGuardOptions web{opt.host, opt.allowed_hosts, opt.cors_origins, opt.api_key};
    http.set_pre_routing_handler([max_body = opt.max_body_bytes, web](const httplib::Request& q, httplib::Response& r) {
      auto refuse = [&](int status, std::string message, std::string code) {
        ApiError e;
        e.status = status;
        e.message = std::move(message);
        e.code = std::move(code);
        r.status = status;
        r.set_content(error_body(e).dump(), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      };
      // Host, Origin and API key first (server/web_guard.h): nothing runs for a refused page.
      const std::string origin = q.get_header_value("Origin");
      if (cors_allowed(web, origin)) {
        r.set_header("Access-Control-Allow-Origin", origin);
        r.set_header("Vary", "Origin");
        if (q.method == "OPTIONS") {  // the preflight of a configured origin
          r.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
          r.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
          r.set_header("Access-Control-Max-Age", "600");
          r.status = 204;
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      if (auto e =
              check_web_request(web, q.path, q.get_header_value("Host"), origin, q.get_header_value("Authorization")))
        return refuse(e->status, e->message, e->code);
      // Range is ignored (RFC 9110 lets a server): cpp-httplib would answer with a slice of whatever
      // the handler wrote (a generated answer, an event stream, even the error objects below) under
      // 206. Its parsed ranges live in the request it owns and passes as const; clearing them is the
      // one way to turn that off in cpp-httplib 0.11.
      const_cast<httplib::Request&>(q).ranges.clear();
      if (auto e = check_framing(q, max_body)) return refuse(e->status, e->message, e->code);
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
      if (!r.body.empty()) return;  // an OpenAI error object is already there
      ApiError e;
      e.status = r.status;
      if (r.status == 404) {
        e.message = fmt::format("no route {} {} (routes: POST /v1/completions, POST /v1/chat/completions, GET "
                                "/v1/models, /health, /metrics, /)", q.method, q.path);
        e.code = "not_found";
      } else if (r.status == 400) {
        e.message = "the HTTP request is malformed";
      } else {
        e.message = fmt::format("HTTP error {}", r.status);
        e.type = r.status >= 500 ? "server_error" : "invalid_request_error";
      }
      r.set_content(error_body(e).dump(), "application/json");
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      r.status = 500;
      r.set_content(error_body({500, what, "server_error", "", ""}).dump(), "application/json");
    });
    http.set_logger([this](const httplib::Request& q, const httplib::Response& r) { counters.count(q.path, r.status); });
  }
};

Server::Server(Engine& engine, ServerOptions options) : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  FDLLM_CHECK_ARG(engine.started(), "the server needs a started engine (Engine::start)");
  Impl& m = *impl_;
  if (m.opt.model_id.empty()) m.opt.model_id = engine.model_dir().filename().string();
  if (m.opt.model_id.empty()) m.opt.model_id = engine.model_dir().parent_path().filename().string();
  FDLLM_CHECK_ARG(m.opt.default_max_tokens >= 1, "--default-max-tokens must be >= 1, got {}", m.opt.default_max_tokens);
  m.limits.model_id = m.opt.model_id;
  m.limits.default_max_tokens = m.opt.default_max_tokens;
  const ServeOptions& so = engine.serve_options();
  m.limits.max_json_values = json_value_limit(m.limits.max_prompts, so.max_model_len);
  m.limits.max_model_len = so.max_model_len;
  m.limits.max_bytes_per_token = engine.max_bytes_per_token();
  m.http.set_payload_max_length(m.opt.max_body_bytes);
  // The listening socket: SO_REUSEADDR only (cpp-httplib's default SO_REUSEPORT lets a second
  // server bind a port in use without an error), and remembered to raise its backlog (bind()).
  m.http.set_socket_options([&m](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    m.listen_fd = sock;
  });
  m.routes();
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& m = *impl_;
  int port = m.opt.port;
  if (port == 0) {
    port = m.http.bind_to_any_port(m.opt.host);
  } else if (!m.http.bind_to_port(m.opt.host, port)) {
    port = -1;
  }
  FDLLM_CHECK(port > 0, ErrorCode::kIo, "cannot listen on {}:{} (address in use, or not an address of this host)",
              m.opt.host, m.opt.port);
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections (64 clients at once)
  // overflows it and the kernel drops them. Listening again on the socket raises the backlog.
  if (m.listen_fd >= 0) ::listen(m.listen_fd, 4096);
  m.opt.port = port;
  return port;
}

bool Server::run() { return impl_->http.listen_after_bind(); }

void Server::stop() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lk(m.stop_mu);
  if (m.stopped) return;
  m.stopped = true;
  m.draining = true;
  m.engine.stop(/*drain=*/true);  // queued and running requests finish; new ones are refused
  // The handlers write their last responses (bounded: a client that does not read them times out),
  // then the listener stops and the remaining connections (idle, or still sending) are closed.
  const auto deadline = Clock::now() + std::chrono::seconds(m.opt.write_timeout_s + 5);
  while ((m.active.load() > 0 || m.http.busy() > 0) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  m.http.stop();
  m.http.close_connections();
}

const std::string& Server::model_id() const noexcept { return impl_->opt.model_id; }

}  // namespace flashdllm::server
