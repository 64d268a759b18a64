// The event loop in front of `flashdllm serve`'s workers: one thread holds every open connection
// (epoll, non-blocking sockets) while it is idle or still sending its request, and hands a worker
// only a complete request (head and body in memory).
//
// Before (issue 49 item 3) each connection held a worker thread for its whole life: 330 clients
// trickling headers at 1 byte/s started failing ordinary requests, 500 idle keep-alive connections
// added 4 s to every request. Here an idle or slow client costs a socket and a few hundred bytes,
// never a thread; the loop enforces, per connection:
//   - a connection limit: past max_connections a new connection is answered 503 (an OpenAI error
//     object, code "too_many_connections", Retry-After: 1) and closed;
//   - an idle timeout: a connection without a request in progress for idle_timeout_s is closed;
//   - the head's limits: bytes and lines (431), and the time from its first byte (408);
//   - the body's deadline: body_stall_s without a byte, or longer than body_stall_s + length /
//     min_body_rate from the end of the head (408).
// A refusal is written by the loop itself (Connection: close), then the connection stops sending and
// discards what the client still sends for at most 1 s (closing at once would reset it, and the
// client could lose the answer).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace flashdllm::server {

/// The loop's limits (docs/serving.md lists the defaults and flags).
struct ConnectionLimits {
  size_t max_connections = 8192;               ///< open connections (503 past it); --max-connections
  int idle_timeout_s = 5;                      ///< keep-alive idle time before a close; --keep-alive-timeout
  size_t max_header_bytes = size_t{64} << 10;  ///< request line and headers (431 past it)
  int max_header_lines = 100;                  ///< header lines (431 past it)
  int header_timeout_s = 10;                   ///< from a head's first byte to its blank line (408 past it)
  size_t max_body_bytes = size_t{8} << 20;     ///< a longer declared body is left to the framing check (413)
  /// Declared body bytes of the requests being read or served at once (each reserved at the end of
  /// its head, released when its response is written or its connection closes): a body that would
  /// pass it gets 503, so buffered bodies take at most this much memory. >= max_body_bytes.
  size_t max_buffered_body_bytes = size_t{256} << 20;
  int body_stall_s = 10;                      ///< seconds without a byte of a body (408 past it)
  size_t min_body_rate = size_t{16} << 10;    ///< bytes/s a body must average after body_stall_s
  size_t max_requests_per_connection = 1000;  ///< then the response says Connection: close
};

/// A complete request, as the loop hands it to a worker.
struct ReadyRequest {
  int fd = -1;
  std::string bytes;       ///< its head and body (exactly; later pipelined bytes stay in the loop)
  bool last = false;       ///< its response closes the connection (the last allowed, or a framing the
                           ///< loop does not follow: the body was not read)
};

class ConnectionLoop {
 public:
  /// `dispatch` runs on the loop thread for each complete request and must not block (it queues
  /// the request for a worker, which calls finished() once its response is written).
  using Dispatch = std::function<void(ReadyRequest)>;
  /// `refused` (may be empty) is told the status of each error response the loop sends itself.
  using Refused = std::function<void(int status)>;
  ConnectionLoop(ConnectionLimits limits, Dispatch dispatch, Refused refused = {});
  ~ConnectionLoop();
  ConnectionLoop(const ConnectionLoop&) = delete;
  ConnectionLoop& operator=(const ConnectionLoop&) = delete;

  /// Takes an accepted socket (made non-blocking here). Thread-safe.
  void add(int fd);
  /// A worker wrote the response of `fd`'s request: keep_alive = wait for the next one, else close.
  /// Thread-safe; once close_all() has run it closes the socket itself.
  void finished(int fd, bool keep_alive);
  /// Requests handed to workers and not yet finished.
  size_t busy() const;
  /// Open connections (idle, reading, or with a worker), refused ones being closed excluded.
  size_t open() const;
  /// Ends the loop: closes every connection without a worker and shuts down (both directions) those
  /// with one (their workers fail fast and finished() closes them). Idempotent.
  void close_all();

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { kIdle, kHead, kBody, kBusy, kClosing };
  struct Conn {
    Phase phase = Phase::kIdle;
    std::string buf;           // bytes read and not yet handed on
    size_t scanned = 0;        // head bytes looked at
    int lines = 0, match = 0;  // header lines so far; where the scan is in a line (scan_head)
    size_t need = 0;           // head + body bytes of the request being read (kBody)
    size_t body = 0;           // its declared body
    size_t reserved = 0;       // body bytes it holds of the budget (max_buffered_body_bytes)
    bool last = false, continued = false, eof = false;
    size_t served = 0;
    Clock::time_point deadline{}, last_byte{};
  };
  struct Note {
    int fd;
    bool add, keep;
  };

  void run();
  void take_notes();
  void on_readable(int fd);
  void advance(int fd, Conn& c);
  bool scan_head(int fd, Conn& c);
  void dispatch(int fd, Conn& c);
  void expire(Clock::time_point now);
  void refuse(int fd, Conn& c, int status, const std::string& message, const std::string& code);
  void begin_close(int fd, Conn& c);
  void close_conn(int fd);
  void release(Conn& c);
  void watch(int fd, bool on);
  void wake();

  const ConnectionLimits limits_;
  const Dispatch dispatch_;
  const Refused refused_;
  int epoll_fd_ = -1, wake_fd_ = -1;
  std::unordered_map<int, Conn> conns_;  // loop thread only
  size_t closing_ = 0;                   // conns_ in kClosing
  size_t reserved_ = 0;                  // body bytes reserved by conns_ (Conn::reserved; loop thread only)
  mutable std::mutex mu_;
  std::vector<Note> notes_;     // from other threads
  bool stopped_ = false;        // close_all() was called
  bool drained_ = false;        // the loop thread has let go of every connection
  size_t busy_ = 0, open_ = 0;  // under mu_
  std::thread thread_;
};

}  // namespace flashdllm::server
