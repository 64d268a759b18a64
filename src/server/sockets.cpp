// Noticing a client that went away; see sockets.h.
#include "server/sockets.h"

#include <sys/socket.h>

#include <cerrno>

#include "server/http_connection.h"

namespace flashdllm::server {

ClientWatch::ClientWatch() : fd_(current_connection()) {}

bool ClientWatch::gone() const {
  if (fd_ < 0) return false;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace flashdllm::server
