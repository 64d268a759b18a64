// The connection loop of `flashdllm serve` (http_connection.h).
#include "server/http_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "server/worker_pool.h"

namespace flashdllm::server {
namespace {

using Clock = std::chrono::steady_clock;

thread_local int t_connection = -1;  // the socket of the request this thread serves

/// poll() for `events` up to `timeout_ms`, retrying on EINTR: > 0 ready, 0 timed out, < 0 error.
int wait_for(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

/// One complete request (its bytes, read by the ConnectionLoop) as cpp-httplib's Stream: reads
/// yield those bytes, writes go to the (non-blocking) socket. The time writes wait for the client
/// to read is bounded in all, per response: past `write_ms`, writes fail (and a stream is cancelled).
class RequestStream final : public httplib::Stream {
 public:
  RequestStream(int fd, std::string bytes, int write_ms) : fd_(fd), bytes_(std::move(bytes)), budget_ms_(write_ms) {}

  bool is_readable() const override { return pos_ < bytes_.size(); }
  bool is_writable() const override {
    if (!wait_writable()) return false;
    if (wait_for(fd_, POLLIN, 0) <= 0) return true;  // alive: nothing to read
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;  // 0: the peer closed
  }

  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, bytes_.size() - pos_);
    if (n == 0) return -1;  // the loop read the whole request: there is no more
    std::memcpy(ptr, bytes_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // cpp-httplib answers `Expect: 100-continue` once it has the request, body included: too late
    // to be of use. The loop answered it when the client was waiting for it, before it read the
    // body; else the body came unasked (HTTP/1.0 clients, to which a 100 must not be sent, RFC
    // 9110, 10.1.1) and the 100 is dropped here.
    if (!wrote_ && std::string_view(ptr, size) == kContinue) return static_cast<ssize_t>(size);
    wrote_ = true;
    for (;;) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno != EAGAIN && errno != EWOULDBLOCK) || !wait_writable()) return -1;
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
  /// Waits for room in the socket's buffer, out of what is left of the response's write budget.
  bool wait_writable() const {
    if (wait_for(fd_, POLLOUT, 0) > 0) return true;
    if (budget_ms_ <= 0) return false;
    const auto t0 = Clock::now();
    const int r = wait_for(fd_, POLLOUT, static_cast<int>(budget_ms_));
    budget_ms_ -= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    return r > 0;
  }

  int fd_;
  std::string bytes_;
  size_t pos_ = 0;
  mutable int64_t budget_ms_;
  bool wrote_ = false;  // a byte of the response was written
};

/// cpp-httplib's TaskQueue for its accept loop: the per-connection job only hands the socket to
/// the ConnectionLoop, so it runs inline on the accepting thread.
class Inline final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

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

int current_connection() { return t_connection; }

struct HttpServer::Workers {
  explicit Workers(size_t n) : pool(n) {}
  WorkerPool pool;
};

HttpServer::HttpServer(const HttpOptions& options) : opt_(options) {
  workers_ = std::make_unique<Workers>(opt_.max_threads);
  loop_ = std::make_unique<ConnectionLoop>(
      opt_.limits,
      [this](ReadyRequest r) {
        auto job = std::make_shared<ReadyRequest>(std::move(r));
        workers_->pool.enqueue([this, job] { serve(std::move(*job)); });
      },
      opt_.on_refused);
  new_task_queue = [] { return new Inline; };
  // What cpp-httplib's responses advertise (Keep-Alive: timeout=..., max=...): the loop's values.
  set_keep_alive_timeout(opt_.limits.idle_timeout_s);
  set_keep_alive_max_count(opt_.limits.max_requests_per_connection);
}

HttpServer::~HttpServer() { close_connections(); }

size_t HttpServer::busy() const { return loop_->busy(); }
size_t HttpServer::connections() const { return loop_->open(); }

void HttpServer::close_connections() {
  loop_->close_all();
  workers_->pool.shutdown();
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  loop_->add(sock);
  return true;
}

void HttpServer::serve(ReadyRequest r) {
  RequestStream strm(r.fd, std::move(r.bytes), opt_.write_timeout_s * 1000);
  t_connection = r.fd;
  bool closed = false;
  const bool ok = process_request(strm, r.last, closed, nullptr);
  t_connection = -1;
  loop_->finished(r.fd, ok && !closed && !r.last);
}

}  // namespace flashdllm::server
