// The HTTP server's connection workers (src/server/worker_pool.h): every job below the bound gets
// a thread at once, also in a burst that arrives while earlier workers are still waking up.
#include "server/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace flashdllm::server {
namespace {

using namespace std::chrono_literals;

/// Jobs that each wait until `n` of them run at the same time (or `timeout` passes): like open
/// connections, which hold their worker until the client is done.
struct Rendezvous {
  explicit Rendezvous(int n) : n(n) {}
  const int n;
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  std::atomic<int> met{0};

  void job(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lk(mu);
    ++running;
    cv.notify_all();
    if (cv.wait_for(lk, timeout, [&] { return running >= n; })) ++met;
  }
};

/// Runs `warm` quick jobs and waits until their workers wait again (idle threads left over from
/// earlier connections, which is when the lost wake-ups happened).
void warm_up(WorkerPool& pool, int warm) {
  std::atomic<int> done{0};
  for (int i = 0; i < warm; ++i) pool.enqueue([&] { ++done; });
  while (done < warm) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(50ms);
}

TEST(WorkerPool, BurstPastTheIdleWorkersGetsAThreadEach) {
  // 4 idle workers, then a burst of 24 jobs that can only finish together: every one needs its own
  // thread at once. Counting "no worker waits" instead of the jobs left the burst's later jobs
  // queued behind jobs that never end (here: until the timeout).
  for (int round = 0; round < 20; ++round) {
    WorkerPool pool(64);
    warm_up(pool, 4);
    Rendezvous r(24);
    for (int i = 0; i < 24; ++i) pool.enqueue([&] { r.job(5s); });
    pool.shutdown();
    ASSERT_EQ(r.met, 24) << "round " << round << ": " << r.met << " of 24 jobs ran at once";
    EXPECT_LE(pool.threads(), 24u + 4u);
  }
}

TEST(WorkerPool, JobsPastTheBoundWaitForAFreeWorker) {
  WorkerPool pool(3);
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> started{0}, finished{0};
  for (int i = 0; i < 5; ++i)
    pool.enqueue([&] {
      ++started;
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return release; });
      ++finished;
    });
  const auto t0 = std::chrono::steady_clock::now();
  while (started < 3 && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(started, 3);  // the bound: two jobs wait
  EXPECT_EQ(pool.threads(), 3u);
  {
    std::lock_guard<std::mutex> lk(mu);
    release = true;
  }
  cv.notify_all();
  pool.shutdown();  // runs what is queued, then joins
  EXPECT_EQ(started, 5);
  EXPECT_EQ(finished, 5);
  EXPECT_EQ(pool.threads(), 3u);
}

}  // namespace
}  // namespace flashdllm::server
