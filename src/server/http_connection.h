// The connection loop of `flashdllm serve`: cpp-httplib's Server with each accepted connection
// served by our own loop and socket stream, so that a request's headers are bounded.
//
// cpp-httplib 0.11 (Debian's, a compiled library: its limits are fixed at its build) reads request
// headers without a count or total size limit (100 MB of header lines were accepted, +118 MB RSS,
// issue 49 item 2) and with only a per-read timeout (a client trickling one byte a second holds its
// worker forever). HttpServer overrides its per-connection entry point (process_and_close_socket, a
// virtual member) with the same keep-alive loop cpp-httplib runs, over a stream that counts the
// header bytes and lines of each request and the time they take: past a limit the stream fails the
// read, cpp-httplib answers 400, and the error handler turns that into 431 (too large) or 408 (too
// slow) with an OpenAI error object naming the limit (header_refusal()).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <sys/socket.h>

#include <httplib.h>

#include "server/openai.h"

namespace flashdllm::server {

/// The numeric address and port of an IPv4 / IPv6 socket address; false for other families.
bool socket_address(const sockaddr_storage& a, std::string& ip, int& port);

/// The HTTP framing of a request, from its headers alone, before cpp-httplib reads a body (it applies
/// no size limit to chunked bodies and reads a body declared too large to skip it): 400 for both
/// Transfer-Encoding and Content-Length, two Content-Lengths or one that is not a byte count; 411
/// for a Transfer-Encoding or a POST without Content-Length; 413 past `max_body` bytes.
std::optional<ApiError> check_framing(const httplib::Request& q, size_t max_body);

/// Bounds of one request's head (request line and header lines, up to the blank line).
struct HeaderLimits {
  size_t max_bytes = size_t{64} << 10;  ///< bytes of the request line and headers (431 past it)
  int max_lines = 100;                  ///< header lines (431 past it)
  int timeout_s = 10;                   ///< seconds from its first byte to its blank line (408 past it)
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(HeaderLimits limits) : limits_(limits) {}

  /// What cut the head of the request being served on this thread ("" = nothing): the error
  /// handler's message; its status (431 or 408) in *status.
  static const std::string& header_refusal(int* status);

 private:
  bool process_and_close_socket(socket_t sock) override;
  HeaderLimits limits_;
};

}  // namespace flashdllm::server
