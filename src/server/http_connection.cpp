// The connection loop of `flashdllm serve` (http_connection.h).
#include "server/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <utility>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

namespace flashdllm::server {
namespace {

using Clock = std::chrono::steady_clock;

thread_local std::string t_refusal;  // why the current request's head was cut ("" = it was not)
thread_local int t_refusal_status = 0;

/// poll() for `events` up to `timeout_ms`, retrying on EINTR: > 0 ready, 0 timed out, < 0 error.
int wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

/// A connected socket as cpp-httplib's Stream (as its SocketStream: buffered reads, per-read and
/// per-write timeouts), which also bounds each request's head (HeaderLimits): it counts the bytes
/// it delivers from the start of a request (start_request) to the blank line ending its headers.
class BoundedStream final : public httplib::Stream {
 public:
  BoundedStream(int fd, int read_timeout_ms, int write_timeout_ms, const HeaderLimits& limits)
      : fd_(fd), read_ms_(read_timeout_ms), write_ms_(write_timeout_ms), limits_(limits) {}

  /// The next bytes begin a request: its head is counted anew.
  void start_request() {
    in_head_ = true;
    head_started_ = false;
    head_bytes_ = 0;
    lines_ = 0;
    match_ = 0;
    t_refusal.clear();
    t_refusal_status = 0;
  }
  bool buffered() const { return pos_ < len_; }

  bool is_readable() const override { return buffered() || wait_for(fd_, POLLIN, read_ms_) > 0; }
  bool is_writable() const override {
    if (wait_for(fd_, POLLOUT, write_ms_) <= 0) return false;
    if (wait_for(fd_, POLLIN, 0) <= 0) return true;  // alive: nothing to read
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;  // 0: the peer closed
  }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (!buffered() && !fill()) return -1;
    size_t n = std::min(size, len_ - pos_);
    if (in_head_ && !count_head(n)) return -1;
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (wait_for(fd_, POLLOUT, write_ms_) <= 0) return -1;
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t l = sizeof a;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &l) == 0) socket_address(a, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t l = sizeof a;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &l) == 0) socket_address(a, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  /// Refills the buffer: waits up to the read timeout, and while a head is being read no later than
  /// its deadline. False on a timeout, an error or the peer's close.
  bool fill() {
    int timeout = read_ms_;
    if (in_head_ && head_started_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(head_deadline_ - Clock::now()).count();
      timeout = static_cast<int>(std::clamp<int64_t>(left, 0, timeout));
    }
    if (const int r = wait_for(fd_, POLLIN, timeout); r <= 0) {
      // A head that stalls (a read timeout) or runs past its deadline: 408.
      if (r == 0 && in_head_ && head_started_)
        refuse(408, fmt::format("the request's headers took longer than {} s to arrive", limits_.timeout_s));
      return false;
    }
    for (;;) {
      const ssize_t n = ::recv(fd_, buf_, sizeof buf_, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
      return true;
    }
  }

  /// Counts up to `n` head bytes from the buffer, shortening n at the blank line that ends the head
  /// (the rest is body); false when a limit is passed.
  bool count_head(size_t& n) {
    if (!head_started_) {
      head_started_ = true;
      head_deadline_ = Clock::now() + std::chrono::seconds(limits_.timeout_s);
    }
    static constexpr char kEnd[] = "\r\n\r\n";
    for (size_t k = 0; k < n; ++k) {
      const char c = buf_[pos_ + k];
      match_ = c == kEnd[match_] ? match_ + 1 : (c == '\r' ? 1 : 0);
      if (match_ == 4) {
        in_head_ = false;
        n = k + 1;
        return true;
      }
      if (++head_bytes_ > limits_.max_bytes)
        return refuse(431, fmt::format("the request's headers exceed {} bytes", limits_.max_bytes));
      if (c == '\n' && ++lines_ - 1 > limits_.max_lines)  // the request line is not a header
        return refuse(431, fmt::format("the request has more than {} header lines", limits_.max_lines));
    }
    return true;
  }

  bool refuse(int status, std::string why) {
    t_refusal = std::move(why);
    t_refusal_status = status;
    return false;
  }

  int fd_, read_ms_, write_ms_;
  const HeaderLimits& limits_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
  bool in_head_ = true, head_started_ = false;
  size_t head_bytes_ = 0;
  int lines_ = 0, match_ = 0;
  Clock::time_point head_deadline_{};
};

/// Ends a connection whose client is still sending (a head past the limits) so that it can read
/// the error first: closing with unread input would reset the connection, and the client's TCP
/// stack may drop the answer. Stops sending, then discards input for at most 1 s and 64 MiB.
void linger(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  char buf[1 << 16];
  for (size_t total = 0; total < (size_t{64} << 20) && Clock::now() < deadline;) {
    if (wait_for(fd, POLLIN, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
}

}  // namespace

bool socket_address(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
    port = ntohs(s->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
    port = ntohs(s->sin6_port);
  } else {
    return false;
  }
  ip = buf;
  return true;
}

std::optional<ApiError> check_framing(const httplib::Request& q, size_t max_body) {
  auto framing_error = [](int status, std::string message, std::string code) {
    ApiError e;
    e.status = status;
    e.message = std::move(message);
    e.code = std::move(code);
    return std::optional<ApiError>(std::move(e));
  };
  const bool te = q.has_header("Transfer-Encoding"), cl = q.has_header("Content-Length");
  if (te && cl)
    return framing_error(400, "the request has both Transfer-Encoding and Content-Length (RFC 9112, 6.3): send one",
                         "");
  // Two lengths (cpp-httplib reads the first): a proxy reading the other would frame another
  // request than ours.
  if (const size_t n = q.get_header_value_count("Content-Length"); n > 1)
    return framing_error(400, fmt::format("the request has {} Content-Length headers (RFC 9112, 6.3): send one", n),
                         "");
  if (te)
    return framing_error(411,
                         fmt::format("Transfer-Encoding '{}' is not accepted (nor chunked bodies): send the body as it "
                                     "is, with a Content-Length header",
                                     q.get_header_value("Transfer-Encoding")),
                         "length_required");
  if (!cl && q.method == "POST")  // cpp-httplib would read such a body until the client closes, unbounded
    return framing_error(411, "a POST needs a Content-Length header", "length_required");
  if (cl) {
    const std::string v = q.get_header_value("Content-Length");
    uint64_t n = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (v.empty() || ec != std::errc() || end != v.data() + v.size())
      return framing_error(400, fmt::format("Content-Length '{}' is not a byte count", v), "");
    if (n > max_body)
      return framing_error(413,
                           fmt::format("the request body ({} bytes) is larger than this server's limit of {} bytes "
                                       "(--max-body-mb)",
                                       n, max_body),
                           "request_too_large");
  }
  return std::nullopt;
}

const std::string& HttpServer::header_refusal(int* status) {
  *status = t_refusal_status;
  return t_refusal;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  // cpp-httplib's loop (process_server_socket_core): up to keep_alive_max_count_ requests, each
  // after waiting up to keep_alive_timeout_sec_ for its first byte; stop() ends it (svr_sock_).
  BoundedStream strm(sock, to_ms(read_timeout_sec_, read_timeout_usec_), to_ms(write_timeout_sec_, write_timeout_usec_),
                     limits_);
  bool ret = false;
  for (size_t count = keep_alive_max_count_; count > 0 && svr_sock_ != INVALID_SOCKET; --count) {
    if (!strm.buffered()) {
      const auto deadline = Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
      int ready = 0;
      while (ready == 0 && svr_sock_ != INVALID_SOCKET && Clock::now() < deadline) ready = wait_for(sock, POLLIN, 100);
      if (ready <= 0) break;
    }
    strm.start_request();
    bool connection_closed = false;
    ret = process_request(strm, /*close_connection=*/count == 1, connection_closed, nullptr);
    int status = 0;
    if (!header_refusal(&status).empty()) {  // a cut head: the rest is garbage
      linger(sock);
      break;
    }
    if (!ret || connection_closed) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace flashdllm::server
