// The server's internals, shared by server.cpp (the routes, the HTTP layer's set-up, Server's
// API) and server_handlers.cpp (the completion handlers: submission, events, responses, streaming):
// an API call in flight and Server::Impl. Not a public header.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/http_connection.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/server.h"

namespace flashdllm::server {

/// How long a handler waits on its requests' events before it looks at the client again.
constexpr auto kPoll = std::chrono::milliseconds(50);

inline int64_t unix_time() { return static_cast<int64_t>(std::time(nullptr)); }

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

inline std::string finish_text(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

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

  Impl(Engine& e, ServerOptions o);
  /// `o` with max_connections fitted to the open-file limit (fit_file_limit, server.cpp).
  static ServerOptions fitted(ServerOptions o);

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
  std::optional<ApiError> submit(Call& call);
  /// Submits (again) the generation of choice `p`: its prompt, seeded seed + sample + (attempts - 1)
  /// * n, so that a retry is a fresh draw that no other choice of the call makes. Throws as submit.
  void submit_attempt(const Call& call, Pending& p);
  /// response_format json_object / json_schema: checks every newly finished choice's answer and
  /// submits again, with a fresh seed, those that fail while they have attempts left (temperature
  /// > 0 only). Returns whether it resubmitted any (the call is not done then). A resubmission the
  /// engine refuses (queue full, stopping) keeps the answer it has.
  bool retry_invalid_formats(Call& call);
  std::vector<LogprobEntry> logprob_entries(const std::vector<TokenLogprob>& lps) const;
  /// Takes the events that are there (waiting up to `wait` for the first undone request) and
  /// hands each to `on_event`.
  template <class OnEvent>
  void pump(Call& call, std::chrono::milliseconds wait, OnEvent&& on_event);
  ChoiceResult choice_of(const Call& call, const Pending& p) const;
  /// POST /v1/completions (chat false) and /v1/chat/completions: parse, submit, wait (or stream).
  void complete(const httplib::Request& hreq, httplib::Response& res, bool chat);
  /// Server-Sent Events: the first chunk of every choice as soon as the call is accepted (queued or
  /// running), chunks of the stable text as it grows, the final chunk of every choice, the usage
  /// chunk when asked, then [DONE]; canvas events (stream_canvas) between them. A choice's `index`
  /// is its place in call->pending (prompt * n + sample).
  void stream(httplib::Response& res, std::shared_ptr<Call> call);
  /// Installs the routes and the pre-routing, error, exception and logging handlers (server.cpp).
  void routes();
};

}  // namespace flashdllm::server
