// `flashdllm serve`'s HTTP layer; see server.h for the routes, threads and shutdown. Here: the HTTP
// layer's set-up (limits, file limit, socket), the routes and their guards, Server's API; the
// completion handlers are in server_handlers.cpp, Server::Impl in server_impl.h.
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
#include "server/server_impl.h"
#include "server/sockets.h"
#include "server/web_guard.h"

namespace flashdllm::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxDefaultThreads = 4096;  // as --http-threads allows

/// The HTTP layer's options from the server's (limits, workers) and the engine's size.
HttpOptions http_options(const Engine& engine, const ServerOptions& o, std::function<void(int)> on_refused) {
  HttpOptions h;
  h.on_refused = std::move(on_refused);
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

}  // namespace

Server::Impl::Impl(Engine& e, ServerOptions o)
    : engine(e),
      opt(fitted(std::move(o))),
      http(http_options(e, opt, [this](int status) { counters.count("", status); })) {}

ServerOptions Server::Impl::fitted(ServerOptions o) {
  o.max_connections = fit_file_limit(o.max_connections);
  return o;
}

void Server::Impl::routes() {
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
      e.message = fmt::format(
          "no route {} {} (routes: POST /v1/completions, POST /v1/chat/completions, GET "
          "/v1/models, /health, /metrics, /)",
          q.method, q.path);
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
