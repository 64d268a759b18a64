// The HTTP layer's write deadline (src/server/http_connection.h): a response waits for its client
// --write-timeout in all, not per write, so a client that reads a trickle cannot hold a worker.
#include "server/http_connection.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace flashdllm::server {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(HttpConnection, AResponseWaitsForAClientThatReadsATrickleOnlyTheWriteTimeoutInAll) {
  HttpOptions o;
  o.write_timeout_s = 1;
  o.max_threads = 2;
  HttpServer srv(o);
  std::atomic<double> gave_up_after{-1};
  // An endless body in 64 KiB chunks: the provider ends when a write fails.
  srv.Get("/endless", [&](const httplib::Request&, httplib::Response& res) {
    const auto t0 = Clock::now();
    res.set_chunked_content_provider("text/plain", [&, t0](size_t, httplib::DataSink& sink) {
      const std::string chunk(size_t{64} << 10, 'x');
      if (sink.write(chunk.data(), chunk.size())) return true;
      gave_up_after = std::chrono::duration<double>(Clock::now() - t0).count();
      return false;
    });
  });
  const int port = srv.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread server([&] { srv.listen_after_bind(); });

  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "GET /endless HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  // Everything the socket holds every 700 ms: each write waits less than the 1 s timeout (a
  // per-write timeout never fires), but the time the writes wait adds up past it.
  const auto t0 = Clock::now();
  std::string buf(size_t{1} << 20, '\0');
  bool closed = false;
  while (gave_up_after < 0 && !closed && Clock::now() - t0 < 20s) {
    std::this_thread::sleep_for(700ms);
    for (ssize_t n = 1; n > 0 && !closed;) {
      n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
      closed = n == 0;
    }
  }
  ::close(fd);
  srv.stop();
  server.join();
  srv.close_connections();
  ASSERT_GE(gave_up_after.load(), 0.0) << "the response still waited for its client after 20 s";
  // The 1 s of waiting, plus the time the socket buffers took to fill; a loaded CI machine.
  EXPECT_LT(gave_up_after.load(), 10.0);
}

}  // namespace
}  // namespace flashdllm::server
