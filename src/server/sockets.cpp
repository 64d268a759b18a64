// Finding the server's connection sockets by their addresses; see sockets.h.
#include "server/sockets.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "server/http_connection.h"

namespace flashdllm::server {
namespace {

/// Calls f(fd) for every socket descriptor of this process (cpp-httplib 0.11 exposes none of its
/// connections' sockets); stops early when f returns true.
template <class F>
void for_each_socket(F f) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (f(static_cast<int>(fd))) break;
  }
  closedir(d);
}

/// The local and peer endpoints of a connected socket; false for a listening or other socket.
bool connection_endpoints(int fd, std::string& local_ip, int& local_port, std::string& peer_ip, int& peer_port) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return false;
  return socket_address(local, local_ip, local_port) && socket_address(peer, peer_ip, peer_port);
}

}  // namespace

ClientWatch::ClientWatch(const httplib::Request& req) {
  for_each_socket([&](int fd) {
    std::string lip, pip;
    int lport = -1, pport = -1;
    if (!connection_endpoints(fd, lip, lport, pip, pport)) return false;
    if (lport != req.local_port || pport != req.remote_port || pip != req.remote_addr) return false;
    fd_ = fd;
    return true;
  });
}

bool ClientWatch::gone() const {
  if (fd_ < 0) return false;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

void shutdown_connections(int port) {
  for_each_socket([&](int fd) {
    std::string lip, pip;
    int lport = -1, pport = -1;
    if (connection_endpoints(fd, lip, lport, pip, pport) && lport == port) ::shutdown(fd, SHUT_RDWR);
    return false;
  });
}

}  // namespace flashdllm::server
