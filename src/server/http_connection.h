// `flashdllm serve`'s HTTP layer: cpp-httplib's Server (Debian's 0.11) for parsing, routing and
// writing responses, behind our connection event loop (server/connection_loop.h).
//
// cpp-httplib 0.11 serves each connection on a thread for its whole life, reads headers without a
// limit and bodies with only a per-read timeout (issue 49 items 2 and 3). HttpServer keeps its
// accept loop but overrides the per-connection entry point (process_and_close_socket, virtual),
// which runs inline on the accepting thread and hands the socket to the ConnectionLoop. The loop
// reads each request whole under its limits and deadlines; a worker of a pool (at most
// `max_threads`) then runs cpp-httplib's request processing over a stream that yields the request's
// bytes and writes the response to the socket (a write deadline: write_timeout_s in all per
// response, so a client that stops reading frees its worker), and gives the connection back to the
// loop for its next request.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <sys/socket.h>

#include <httplib.h>

#include "server/connection_loop.h"
#include "server/openai.h"

namespace flashdllm::server {

/// The numeric address and port of an IPv4 / IPv6 socket address; false for other families.
bool socket_address(const sockaddr_storage& a, std::string& ip, int& port);

/// The HTTP framing of a request, from its headers alone, before cpp-httplib reads a body (it applies
/// no size limit to chunked bodies and reads a body declared too large to skip it): 400 for both
/// Transfer-Encoding and Content-Length, two Content-Lengths or one that is not a byte count; 411
/// for a Transfer-Encoding or a POST without Content-Length; 413 past `max_body` bytes.
std::optional<ApiError> check_framing(const httplib::Request& q, size_t max_body);

/// The socket of the request being served on this thread (-1 outside a request): a handler that
/// waits on the engine peeks at it to notice a client that went away (ClientWatch).
int current_connection();

struct HttpOptions {
  ConnectionLimits limits;
  size_t max_threads = 256;  ///< workers: requests being processed at once (the others wait their turn)
  int write_timeout_s = 30;  ///< time a response may wait for its client to read, in all
  /// Called (on the loop thread) with the status of each response the connection loop gives itself
  /// before a request reaches a worker (408, 431, 503): /metrics counts them.
  std::function<void(int status)> on_refused;
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpOptions& options);
  ~HttpServer() override;

  /// Requests being processed by workers, and open connections.
  size_t busy() const;
  size_t connections() const;
  /// Closes every connection (see ConnectionLoop::close_all) and joins the workers; call after
  /// stop() ended the accept loop. Idempotent.
  void close_connections();

 private:
  bool process_and_close_socket(socket_t sock) override;
  void serve(ReadyRequest r);

  HttpOptions opt_;
  struct Workers;
  std::unique_ptr<Workers> workers_;
  std::unique_ptr<ConnectionLoop> loop_;
};

}  // namespace flashdllm::server
