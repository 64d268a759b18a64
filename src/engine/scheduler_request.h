// The scheduler's request records, shared by scheduler.cpp (queue, slots, steps) and
// scheduler_answer.cpp (each request's answer and result): a request's event stream and its state.
// Not a public header.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler.h"

namespace flashdllm {

/// A request's events, in order: filled by the replica's stepping thread, read by the caller.
class Scheduler::Stream final : public RequestStream {
 public:
  explicit Stream(uint64_t id) : id_(id) {}
  uint64_t id() const noexcept override { return id_; }

  std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lk(mu_);
    const auto ready = [&] { return !events_.empty() || final_taken_; };
    // A zero timeout only looks. A timed wait that is already due still sleeps for the kernel's timer
    // slack (about 70 us per call on this Linux, 50 us slack), which generate's drain loop paid once
    // per stream per iteration: 2.4 ms per iteration at 32 slots (bench/results/2026-12-04-h200-gpu-gaps/).
    if (timeout.count() <= 0 ? !ready() : !cv_.wait_for(lk, timeout, ready)) return std::nullopt;
    if (events_.empty()) return std::nullopt;  // the final event was taken earlier
    RequestEvent ev = std::move(events_.front());
    events_.pop_front();
    if (ev.finished) final_taken_ = true;
    return ev;
  }
  void cancel() noexcept override { cancel_.store(true); }
  bool finished() const noexcept override {
    std::lock_guard<std::mutex> lk(mu_);
    return final_taken_;
  }

  bool cancel_requested() const noexcept { return cancel_.load(); }
  void push(RequestEvent ev) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      events_.push_back(std::move(ev));
    }
    cv_.notify_all();
  }

 private:
  const uint64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  bool final_taken_ = false;
  std::atomic<bool> cancel_{false};
};

struct Scheduler::Request {
  uint64_t id = 0;
  ScheduledRequest spec;
  std::shared_ptr<Stream> stream;
  std::chrono::steady_clock::time_point submitted;
  int64_t iterations = 0;
  // The answer (see update_answer).
  bool decided = false;               // the answer cannot change any more
  int64_t answer_tokens = 0;          // stable answer tokens so far
  int64_t scanned = 0;                // canvas[0, scanned) holds no mask and no end id (update_answer resumes there)
  int64_t stop_tokens = -1;           // a stop string ended the answer: tokens before it; -1 = none
  std::string text;                   // the stable answer's text (stop strings cut)
  std::optional<TextStream> decoder;  // codec.text_stream: the answer's ids decoded so far
  int64_t decoded = 0;                // ids appended to `decoder`
  size_t sent = 0;                    // bytes of `text` delivered as deltas
  // params.logprobs >= 0: each canvas position's TokenLogprob once committed, and the answer
  // tokens whose logprobs went out with events.
  std::vector<TokenLogprob> logprobs;
  int64_t logprobs_sent = 0;
};

}  // namespace flashdllm
