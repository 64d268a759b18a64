// Connection workers of the HTTP server: threads made on demand up to a bound.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flashdllm::server {

/// Runs queued jobs on up to `max_threads` threads, started when a job would otherwise wait: a
/// connection holds its worker while it is open, so every open connection below the bound must get
/// one at once (cpp-httplib's own pool has a fixed 8). Jobs past the bound wait in FIFO order for a
/// worker to come free. Thread-safe; shutdown() (or the destructor) runs the jobs already queued,
/// then joins every thread.
class WorkerPool {
 public:
  explicit WorkerPool(size_t max_threads) : max_(std::max<size_t>(max_threads, 1)) {}
  ~WorkerPool() { shutdown(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void enqueue(std::function<void()> fn) {
    std::unique_lock<std::mutex> lk(mu_);
    jobs_.push_back(std::move(fn));
    // A waiting worker counts as free until it has taken a job, and one woken by an earlier
    // enqueue has not taken it yet: compare the jobs waiting with the workers waiting, not
    // "no worker waits" (that lost the wake-ups of a burst, and its jobs then waited for a busy
    // connection to end).
    if (jobs_.size() > idle_ && threads_.size() < max_)
      threads_.emplace_back([this] { work(); });
    else
      cv_.notify_one();
  }
  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  /// Threads started so far (they stay until shutdown).
  size_t threads() {
    std::lock_guard<std::mutex> lk(mu_);
    return threads_.size();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lk(mu_);
        ++idle_;
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) return;  // stopping
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;  // workers waiting for a job (woken ones included until they take it)
  bool stop_ = false;
};

}  // namespace flashdllm::server
