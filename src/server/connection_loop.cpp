// The connection event loop of `flashdllm serve` (connection_loop.h).
#include "server/connection_loop.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/check.h"
#include "server/openai.h"

namespace flashdllm::server {
namespace {

constexpr int kTickMs = 100;  // deadlines are checked this often
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kMaxReadPerEvent = 256 << 10;  // per readiness event, so that one client cannot starve the others
constexpr auto kLinger = std::chrono::seconds(1);

/// What the loop needs of a head: how long its body is, and whether the client waits for 100.
struct HeadFraming {
  size_t lengths = 0;  // Content-Length headers
  bool length_ok = false;
  uint64_t length = 0;
  bool transfer_encoding = false, expect_continue = false;
  bool http10 = false;  // an HTTP/1.0 request: no 100 Continue for it (RFC 9110, 10.1.1)
};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return (x | 0x20) == (y | 0x20); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

HeadFraming framing_of(std::string_view head) {
  HeadFraming f;
  size_t pos = head.find('\n');  // past the request line
  const std::string_view request_line = trim(head.substr(0, pos));
  f.http10 = request_line.size() >= 8 && request_line.substr(request_line.size() - 8) == "HTTP/1.0";
  while (pos != std::string_view::npos && pos + 1 < head.size()) {
    const size_t start = pos + 1;
    pos = head.find('\n', start);
    const std::string_view line = head.substr(start, pos == std::string_view::npos ? head.npos : pos - start);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      ++f.lengths;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), f.length);
      f.length_ok = !value.empty() && ec == std::errc() && end == value.data() + value.size();
    } else if (iequals(name, "Transfer-Encoding")) {
      f.transfer_encoding = true;
    } else if (iequals(name, "Expect")) {
      f.expect_continue = iequals(value, "100-continue");
    }
  }
  return f;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

/// Sends what the socket takes now (a refusal is a few hundred bytes: the socket buffer holds it).
void send_now(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

ConnectionLoop::ConnectionLoop(ConnectionLimits limits, Dispatch dispatch, Refused refused)
    : limits_(limits), dispatch_(std::move(dispatch)), refused_(std::move(refused)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  FDLLM_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0, ErrorCode::kIo, "cannot create the connection loop's epoll: {}",
              std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { run(); });
}

ConnectionLoop::~ConnectionLoop() {
  close_all();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void ConnectionLoop::add(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!stopped_) {
      notes_.push_back({fd, true, false});
      wake();
      return;
    }
  }
  ::close(fd);
}

void ConnectionLoop::finished(int fd, bool keep_alive) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!drained_) {
      notes_.push_back({fd, false, keep_alive});
      wake();
      return;
    }
    --busy_;
    --open_;
  }
  ::close(fd);
}

size_t ConnectionLoop::busy() const {
  std::lock_guard<std::mutex> lk(mu_);
  return busy_;
}

size_t ConnectionLoop::open() const {
  std::lock_guard<std::mutex> lk(mu_);
  return open_;
}

void ConnectionLoop::close_all() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopped_) return;
    stopped_ = true;
    wake();
  }
  if (thread_.joinable()) thread_.join();
}

void ConnectionLoop::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void ConnectionLoop::watch(int fd, bool on) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_fd_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, &ev);
}

void ConnectionLoop::run() {
  pthread_setname_np(pthread_self(), "fdllm-conns");  // its CPU time shows in top -H and /proc
  std::vector<epoll_event> events(512);
  auto next_tick = Clock::now();
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), kTickMs);
    for (int i = 0; i < n; ++i) {
      const int fd = events[static_cast<size_t>(i)].data.fd;
      if (fd == wake_fd_) {
        uint64_t v;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &v, sizeof v);
      } else {
        on_readable(fd);
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopped_) break;
    }
    take_notes();
    if (const auto now = Clock::now(); now >= next_tick) {
      expire(now);
      next_tick = now + std::chrono::milliseconds(kTickMs);
    }
  }
  // Stopping: what has no worker closes now; a worker's socket is shut down (its worker fails fast),
  // and finished() closes it once drained_ is set. Notes still queued are settled here, under the
  // lock that finished() takes, so that no socket is closed twice.
  std::lock_guard<std::mutex> lk(mu_);
  for (const Note& note : notes_) {
    ::close(note.fd);
    if (note.add) continue;  // not counted yet
    --busy_;
    --open_;
    conns_.erase(note.fd);
  }
  notes_.clear();
  for (auto& [fd, c] : conns_) {
    if (c.phase == Phase::kBusy) {
      ::shutdown(fd, SHUT_RDWR);
    } else {
      ::close(fd);
      if (c.phase != Phase::kClosing) --open_;
    }
  }
  conns_.clear();
  drained_ = true;
}

void ConnectionLoop::take_notes() {
  std::vector<Note> notes;
  {
    std::lock_guard<std::mutex> lk(mu_);
    notes.swap(notes_);
  }
  for (const Note& note : notes) {
    const int fd = note.fd;
    if (note.add) {
      Conn& c = conns_[fd];
      c = Conn{};
      watch(fd, true);
      size_t open = 0;
      {
        std::lock_guard<std::mutex> lk(mu_);
        open = ++open_;
      }
      if (open > limits_.max_connections) {         // past the limit: refused (it does not count)
        if (closing_ >= limits_.max_connections) {  // a flood: no lingering either
          close_conn(fd);
          continue;
        }
        refuse(fd, c, 503,
               fmt::format("the server has {} connections open, its limit (--max-connections): retry later",
                           limits_.max_connections),
               "too_many_connections");
        continue;
      }
      c.deadline = Clock::now() + std::chrono::seconds(limits_.idle_timeout_s);
      continue;
    }
    auto it = conns_.find(fd);
    if (it == conns_.end()) continue;
    Conn& c = it->second;
    {
      std::lock_guard<std::mutex> lk(mu_);
      --busy_;
    }
    c.phase = Phase::kIdle;
    release(c);  // the worker is done with the request's bytes
    if (!note.keep) {
      watch(fd, true);  // to discard what the client still sends while the close lingers
      begin_close(fd, c);
      continue;
    }
    if (c.eof) {  // the client sent all it will: answer what is buffered, then close
      advance(fd, c);
      if (c.phase != Phase::kBusy) close_conn(fd);
      continue;
    }
    watch(fd, true);
    c.deadline = Clock::now() + std::chrono::seconds(limits_.idle_timeout_s);
    advance(fd, c);  // a pipelined request may be there already
  }
}

void ConnectionLoop::on_readable(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  char buf[kReadChunk];
  bool eof = false;
  for (size_t total = 0; total < kMaxReadPerEvent;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {  // the peer closed (or stopped sending), or an error
      eof = true;
      break;
    }
    total += static_cast<size_t>(n);
    if (c.phase == Phase::kClosing) continue;  // discarded
    c.buf.append(buf, static_cast<size_t>(n));
    c.last_byte = Clock::now();
    if (c.phase == Phase::kHead && c.buf.size() > limits_.max_header_bytes + kReadChunk) break;
  }
  if (c.phase == Phase::kClosing) {
    if (eof) close_conn(fd);
    return;
  }
  c.eof = eof;  // a client may send its requests and then stop sending: they are still answered
  advance(fd, c);
  if (eof && c.phase != Phase::kBusy) close_conn(fd);
}

void ConnectionLoop::advance(int fd, Conn& c) {
  if (c.phase == Phase::kIdle && !c.buf.empty()) {
    c.phase = Phase::kHead;
    c.scanned = 0;
    c.lines = 0;
    c.match = 0;
    c.deadline = Clock::now() + std::chrono::seconds(limits_.header_timeout_s);
  }
  if (c.phase == Phase::kHead && !scan_head(fd, c)) return;
  if (c.phase == Phase::kBody && c.buf.size() >= c.need) dispatch(fd, c);
}

bool ConnectionLoop::scan_head(int fd, Conn& c) {
  // The head ends at an empty line: "\r\n\r\n", or with a bare LF ending either line ("\n\n",
  // "\n\r\n", "\r\n\n"; RFC 9112, 2.2). cpp-httplib refuses bare LF lines with 400; waiting for a
  // "\r\n\r\n" that never comes would answer such a client 408 only after --read-timeout.
  // match: 0 within a line, 1 at a line's start, 2 at a line's start after a CR.
  bool end = false;
  for (; c.scanned < c.buf.size(); ++c.scanned) {
    const char ch = c.buf[c.scanned];
    if (ch == '\n') {
      end = c.match > 0;
      c.match = 1;
    } else {
      c.match = ch == '\r' && c.match == 1 ? 2 : 0;
    }
    if (end) break;
    if (c.scanned + 1 > limits_.max_header_bytes) {
      refuse(fd, c, 431, fmt::format("the request's headers exceed {} bytes", limits_.max_header_bytes),
             "request_header_fields_too_large");
      return false;
    }
    if (ch == '\n' && ++c.lines - 1 > limits_.max_header_lines) {  // the request line is not a header
      refuse(fd, c, 431, fmt::format("the request has more than {} header lines", limits_.max_header_lines),
             "request_header_fields_too_large");
      return false;
    }
  }
  if (!end) return false;  // more to come
  const size_t head = c.scanned + 1;
  const HeadFraming f = framing_of(std::string_view(c.buf).substr(0, head));
  c.last = c.served + 1 >= limits_.max_requests_per_connection;
  c.body = 0;
  if (f.transfer_encoding || f.lengths > 1 || (f.lengths == 1 && (!f.length_ok || f.length > limits_.max_body_bytes))) {
    c.last = true;  // the framing check answers it from the head (400, 411 or 413); the body is not read
  } else if (f.lengths == 1) {
    c.body = static_cast<size_t>(f.length);
  }
  if (c.body > 0) {  // reserve the body's bytes of the budget until its response is written
    if (reserved_ + c.body > limits_.max_buffered_body_bytes) {
      refuse(fd, c, 503,
             fmt::format("the server is reading or serving {} bytes of request bodies, its budget "
                         "(--max-buffered-body-mb) leaves no room for this one of {} bytes: retry later",
                         reserved_, c.body),
             "server_busy");
      return false;
    }
    reserved_ += c.body;
    c.reserved = c.body;
  }
  c.need = head + c.body;
  c.continued = false;
  c.phase = Phase::kBody;
  if (c.buf.size() < c.need) {
    if (f.expect_continue && !f.http10) {  // the client waits for this before it sends the body
      send_now(fd, "HTTP/1.1 100 Continue\r\n\r\n");
      c.continued = true;
    }
    c.last_byte = Clock::now();
    c.deadline = c.last_byte + std::chrono::seconds(limits_.body_stall_s) +
                 std::chrono::milliseconds(c.body * 1000 / limits_.min_body_rate);
  }
  return true;
}

void ConnectionLoop::dispatch(int fd, Conn& c) {
  ReadyRequest r;
  r.fd = fd;
  r.bytes = c.buf.substr(0, c.need);
  r.last = c.last;
  c.buf.erase(0, c.need);
  c.phase = Phase::kBusy;
  ++c.served;
  watch(fd, false);
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++busy_;
  }
  dispatch_(std::move(r));
}

void ConnectionLoop::expire(Clock::time_point now) {
  std::vector<int> due;
  for (auto& [fd, c] : conns_) {
    if (c.phase == Phase::kBusy) continue;
    const bool stalled = c.phase == Phase::kBody && now >= c.last_byte + std::chrono::seconds(limits_.body_stall_s);
    if (now >= c.deadline || stalled) due.push_back(fd);
  }
  for (const int fd : due) {
    Conn& c = conns_[fd];
    if (c.phase == Phase::kHead) {
      refuse(fd, c, 408, fmt::format("the request's headers took longer than {} s to arrive", limits_.header_timeout_s),
             "request_timeout");
    } else if (c.phase == Phase::kBody) {
      const bool stalled = now >= c.last_byte + std::chrono::seconds(limits_.body_stall_s);
      refuse(fd, c, 408,
             stalled
                 ? fmt::format("no byte of the request body arrived for {} s (--read-timeout)", limits_.body_stall_s)
                 : fmt::format("the request body ({} bytes) arrived slower than {} bytes/s after its first {} s "
                               "(--read-timeout)",
                               c.body, limits_.min_body_rate, limits_.body_stall_s),
             "request_timeout");
    } else {
      close_conn(fd);  // idle past the keep-alive timeout, or a refusal's linger is over
    }
  }
}

void ConnectionLoop::refuse(int fd, Conn& c, int status, const std::string& message, const std::string& code) {
  ApiError e;
  e.status = status;
  e.message = message;
  e.code = code;
  if (status >= 500) e.type = "server_error";
  const std::string body = error_body(e).dump();
  send_now(fd,
           fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}"
                       "Connection: close\r\n\r\n{}",
                       status, reason_phrase(status), body.size(), status == 503 ? "Retry-After: 1\r\n" : "", body));
  begin_close(fd, c);
  if (refused_) refused_(status);
}

void ConnectionLoop::begin_close(int fd, Conn& c) {
  ::shutdown(fd, SHUT_WR);
  if (c.phase != Phase::kBusy) release(c);  // a busy one's worker still holds the bytes (finished())
  if (c.phase != Phase::kClosing) {
    ++closing_;
    std::lock_guard<std::mutex> lk(mu_);
    --open_;
  }
  c.phase = Phase::kClosing;
  c.buf.clear();
  c.buf.shrink_to_fit();
  c.deadline = Clock::now() + kLinger;
}

void ConnectionLoop::close_conn(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  if (it->second.phase == Phase::kClosing) {
    --closing_;
  } else {
    std::lock_guard<std::mutex> lk(mu_);
    --open_;
  }
  if (it->second.phase != Phase::kBusy) release(it->second);
  watch(fd, false);
  ::close(fd);
  conns_.erase(it);
}

void ConnectionLoop::release(Conn& c) {
  reserved_ -= c.reserved;
  c.reserved = 0;
}

}  // namespace flashdllm::server
