// The server's view of its own connections' sockets: cpp-httplib 0.11 exposes none of them, so a
// waiting handler finds its request's socket by its addresses (ClientWatch: did the client go
// away?), and stop() finds every accepted connection of its port (shutdown_connections).
#pragma once

#include <httplib.h>

namespace flashdllm::server {

/// The socket a request arrived on, found by its addresses (/proc/self/fd), to notice a client that
/// went away while its request waits. Only peeks: never consumes data.
class ClientWatch {
 public:
  explicit ClientWatch(const httplib::Request& req);
  /// True once the peer closed or reset the connection (false when the socket was not found).
  bool gone() const;

 private:
  int fd_ = -1;
};

/// Shuts down (both directions) every connection accepted on local port `port`, so that workers
/// blocked reading a client that trickles bytes or idles on keep-alive return at once when the
/// server stops (cpp-httplib 0.11 waits for them).
void shutdown_connections(int port);

}  // namespace flashdllm::server
