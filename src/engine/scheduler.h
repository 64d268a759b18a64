// The scheduler: the one owner of requests (design guide, practice 10; the shape of nano-vllm's
// add_request / step()). A request's life:
//
//   submit → queued → admitted to a free slot (its first iteration prefills) → one event per
//   iteration (committed positions, the stable text prefix) → finished (stop / length) |
//   cancelled | failed → slot released
//
// all of it here; the denoiser behind it only admits, steps and releases slots (denoise/denoiser.h).
//
// Threads: submit(), cancel(), has_work(), wait_for_work(), close() and metrics() may be called from
// any thread; step() from one thread at a time (the engine's loop, or generate's caller), which is
// the only one that touches the denoiser. step() never waits on a reader: events go into each
// request's stream (at most one per iteration of the request).
//
// Admission is FIFO into the lowest free slot, before every iteration, so a slot freed by an
// iteration is refilled before the next one (continuous batching). Cancellation of a running
// request releases its slot at the start of the next iteration.
//
// The answer of a request: the canvas up to (excluding) its first EOS / EOT, at most
// max_output_tokens tokens. Its stable prefix after an iteration is the leading run of decoded
// canvas positions, cut the same way; it only grows, because committed positions never change. The
// answer is decided once its stable prefix reaches an end id, max_output_tokens, or a stop string
// (then the text ends before the stop string). With finish_early the request then finishes and
// frees its slot although the denoiser could go on (the server); without it, it runs until the
// denoiser finishes it, so its canvas and NFE are the denoiser's own (Engine::generate).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "denoise/denoiser.h"
#include "flashdllm/engine.h"

namespace flashdllm {

/// The model's text side, as the scheduler needs it.
struct TextCodec {
  /// ids -> text, special tokens skipped; empty function: the checkpoint has no tokenizer (no text).
  std::function<std::string(std::span<const int32_t>)> decode;
  std::vector<int32_t> end_ids;  ///< EOS (and EOT): the answer ends before the first of them
  int32_t mask_id = -1;
  /// The released Flash-dLLM output slice may hold undecoded positions (reference_quirks); every
  /// other mode must never return the mask id (Error(kInternal) for the request otherwise).
  bool allow_mask_in_output = false;
};

/// A request as the engine hands it over.
struct ScheduledRequest {
  std::vector<int32_t> prompt;
  SlotParams params;               ///< resolved; params.gen_length is the canvas
  int64_t max_output_tokens = 0;   ///< the answer's cut, 1 <= it <= params.gen_length
  std::vector<std::string> stop;   ///< stop strings (need a tokenizer)
  bool finish_early = false;       ///< finish as soon as the answer is decided (see the file comment)
  bool stream_text = false;        ///< fill RequestEvent::text_delta
  bool chat_template = false;      ///< recorded in the result
  size_t tag = 0;                  ///< the caller's index, handed to the step hook
};

class Scheduler {
 public:
  /// Called after every iteration for each request that took part: its tag, its canvas, and
  /// whether it finished with this iteration (Engine::generate's progress).
  using StepHook = std::function<void(size_t tag, std::span<const int32_t> canvas, bool finished)>;
  struct Options {
    int64_t max_queue = 1024;  ///< queued requests before submit refuses (Error(kUnavailable))
    StepHook hook;
    /// The checkpoint, named in errors the model causes (Error(kInvalidCheckpoint): non-finite logits).
    std::string checkpoint;
  };

  Scheduler(Denoiser& denoiser, TextCodec codec, Options options);
  ~Scheduler();

  /// Queues a request after the denoiser's check_request. Throws that check's Error(kInvalidArgument),
  /// or Error(kUnavailable) when the queue is full or the scheduler is closed.
  std::shared_ptr<RequestStream> submit(ScheduledRequest request);
  /// Cancels a queued or running request; false when the id is unknown or already ended.
  bool cancel(uint64_t id);
  /// Refuses further submissions (the queued and running requests go on).
  void close();
  /// Cancels every queued and running request (they end at the next step()).
  void cancel_all();
  /// One iteration: drops cancelled requests, admits queued ones into free slots, runs the
  /// denoiser's step, delivers the events, finishes and releases. Returns false when there was
  /// nothing to do. A denoiser error fails the requests of that iteration (their slots released)
  /// and is not rethrown; the scheduler stays usable.
  bool step();
  /// True while a request is queued or running.
  bool has_work() const;
  /// Waits until has_work() or close(), at most `timeout`.
  void wait_for_work(std::chrono::milliseconds timeout);
  EngineMetrics metrics() const;

 private:
  struct Request;
  class Stream;
  void finish(Request& r, FinishReason reason, RequestEvent ev);
  void fail(Request& r, RequestEvent ev, const Error& e);
  std::shared_ptr<GenerateResult> make_result(Request& r, int64_t slot);
  /// Updates the request's answer from its canvas after an iteration; fills ev.stable_tokens and
  /// ev.text_delta. Returns true once the answer is decided.
  bool update_answer(Request& r, std::span<const int32_t> canvas, bool denoiser_finished, RequestEvent& ev);

  Denoiser& den_;
  TextCodec codec_;
  Options opt_;
  mutable std::mutex mu_;                        // guards the fields below up to running_
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::map<uint64_t, std::weak_ptr<Stream>> live_;  // queued and running requests by id
  uint64_t next_id_ = 1;
  bool closed_ = false;
  int64_t busy_ = 0;                             // running requests
  EngineMetrics metrics_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;  // (iteration end, committed)
  std::vector<std::shared_ptr<Request>> running_;  // per slot; step()'s thread only
};

}  // namespace flashdllm
