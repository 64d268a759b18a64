// Whether a waiting handler's client is still there (ClientWatch), from the socket its request
// arrived on (current_connection(), server/http_connection.h).
#pragma once

namespace flashdllm::server {

/// The socket of the request served on this thread, to notice a client that went away while its
/// request waits. Only peeks: never consumes data. Construct it on the handler's thread.
class ClientWatch {
 public:
  ClientWatch();
  /// True once the peer closed or reset the connection (false outside a request).
  bool gone() const;

 private:
  int fd_ = -1;
};

}  // namespace flashdllm::server
