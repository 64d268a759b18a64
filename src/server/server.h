// `flashdllm serve`: an OpenAI-compatible HTTP server over a started Engine (no model code here).
//
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models[/{id}], GET /health,
// GET /metrics (Prometheus text), GET / (the live-denoising page). docs/serving.md documents every
// field, flag and error.
//
// Threads: cpp-httplib accepts on one thread and hands each connection to one event-loop thread
// (server/connection_loop.h), which holds every idle or slow connection without a thread, enforces
// the connection limit, the keep-alive idle timeout and the head / body deadlines, and hands each
// complete request to a worker of a pool that grows on demand up to max_threads (default max(256,
// slots + queue + 32): every request the engine can hold, with room for quick ones). Before routing,
// the Host, Origin and API key are checked (server/web_guard.h) and the framing from the headers. A
// handler submits to the engine and then only waits on its request streams (50 ms at a time,
// checking that its client is still connected); the engine's loop thread never waits on a socket.
// A client that disconnects has its requests cancelled, which frees their slots at the next
// iteration.
//
// Shutdown (stop(), e.g. on SIGINT / SIGTERM): new requests get 503, the engine drains the queued
// and running ones, the handlers write their last responses, then the listener stops and the
// remaining connections (idle keep-alive, or a client still trickling headers) are closed.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "flashdllm/engine.h"

namespace flashdllm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                   ///< 0 = any free port (bind() returns it)
  std::string model_id;              ///< the served model's id ("" = the model directory's name)
  int64_t default_max_tokens = 128;  ///< max_tokens of requests that give none
  size_t max_body_bytes = size_t{8} << 20;  ///< larger bodies get 413
  /// Declared bytes of the bodies read or served at once; past it 503 (>= max_body_bytes).
  size_t max_buffered_body_bytes = size_t{256} << 20;
  int read_timeout_s = 10;                     ///< a request's head must arrive within it (408); a body may stall
                                               ///< this long, and must average 16 KiB/s after it (408)
  int write_timeout_s = 30;                    ///< a response may wait this long in all for its client to read
  int keep_alive_timeout_s = 5;                ///< an idle connection is closed after it
  size_t max_header_bytes = size_t{64} << 10;  ///< a request line and headers longer get 431
  int max_header_lines = 100;                  ///< more header lines get 431
  size_t max_connections = 8192;               ///< open connections; past it 503 and close (lowered to the fd limit)
  int64_t max_threads = 0;                     ///< request workers; 0 = max(256, slots + max_queue + 32)
  std::vector<std::string> allowed_hosts;  ///< Host names served beside IPs, localhost, `host` ("*": any)
  std::vector<std::string> cors_origins;   ///< web origins given CORS headers and let in ("*": any)
  std::string api_key;                     ///< "" = none; else /v1/ needs `Authorization: Bearer <key>`
};

class Server {
 public:
  /// `engine` must be started (Engine::start) and outlive the server.
  Server(Engine& engine, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds host:port. Returns the port. Throws Error(kIo) naming the address when it cannot.
  int bind();
  /// Serves until stop() (bind() first). Returns false when the listener failed.
  bool run();
  /// Drains and stops (see the file comment). Thread-safe, idempotent; returns when stopped.
  void stop();
  const std::string& model_id() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashdllm::server
