// The scheduler: the one owner of requests (design guide, practice 10; the shape of nano-vllm's
// add_request / step()). A request's life:
//
//   submit → queued → admitted to a free slot (its first iteration prefills) → one event per
//   iteration (committed positions, the stable text prefix) → finished (stop / length) |
//   cancelled | failed → slot released
//
// all of it here; the denoiser behind it only admits, steps and releases slots (denoise/denoiser.h).
//
// Replicas (data parallelism): the scheduler may run over several denoisers, each a whole model
// (one GPU or one tensor-parallel group) with its own slot pool, behind one shared FIFO queue.
// Each replica is stepped by its own thread: step(r) runs replica r's iteration and touches only
// its denoiser and its slots, so replicas run concurrently. A queued request is given to the least
// loaded replica that has a free slot (fewest running + assigned requests; ties: the lowest index)
// as soon as one has (at submit, and whenever a replica's step frees slots), and that replica
// admits it at the start of its next iteration. One replica is the plain case.
//
// Threads: submit(), cancel(), has_work(), wait_for_work(), close() and metrics() may be called from
// any thread; step(r) from one thread at a time per replica (the engine's loop of that replica, or
// generate's), which is the only one that touches replica r's denoiser. step() never waits on a
// reader: events go into each request's stream (at most one per iteration of the request).
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
#include "io/tokenizer.h"  // TextStream

namespace flashdllm {

/// The model's text side, as the scheduler needs it.
struct TextCodec {
  /// ids -> text, special tokens skipped; empty function: the checkpoint has no tokenizer (no text).
  std::function<std::string(std::span<const int32_t>)> decode;
  /// A fresh incremental decoder with decode's result (TextStream::text() == decode(ids appended
  /// so far)): a streamed or stop-checked answer is decoded once, not again after every iteration.
  /// Empty function: decode is called on the whole answer instead.
  std::function<TextStream()> text_stream;
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
    /// Requests waiting for a slot (every replica's slots busy) before submit refuses
    /// (Error(kUnavailable)); a request that gets a free slot at once does not count.
    int64_t max_queue = 1024;
    /// Called from the stepping threads, one call at a time (a mutex orders the replicas' calls).
    StepHook hook;
    /// The checkpoint, named in errors the model causes (Error(kInvalidCheckpoint): non-finite logits).
    std::string checkpoint;
  };

  Scheduler(Denoiser& denoiser, TextCodec codec, Options options);
  /// Over several replicas (data parallelism): equal pools (the same check_request; replica 0's
  /// is asked). Throws Error(kInvalidArgument) for no replica or a null one.
  Scheduler(std::vector<Denoiser*> replicas, TextCodec codec, Options options);
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
  /// One iteration of replica `replica` (in [0, replicas())): drops cancelled requests, admits
  /// the requests given to it into free slots, runs its denoiser's step, delivers the events,
  /// finishes and releases. Returns false when there was nothing to do for this replica. A
  /// denoiser error fails the requests of that iteration (their slots released) and is not
  /// rethrown; the scheduler stays usable.
  bool step(size_t replica = 0);
  /// True while a request is queued or running (anywhere).
  bool has_work() const;
  /// True while a request is queued, or given to or running on `replica`.
  bool has_work(size_t replica) const;
  /// Waits until has_work(replica) or close(), at most `timeout`.
  void wait_for_work(std::chrono::milliseconds timeout, size_t replica = 0);
  size_t replicas() const noexcept { return reps_.size(); }
  /// Slots over all replicas.
  int64_t n_slots() const noexcept { return metrics_.n_slots; }
  EngineMetrics metrics() const;

 private:
  struct Request;
  class Stream;
  struct Replica {
    Denoiser* den = nullptr;
    std::vector<std::shared_ptr<Request>> running;  // per slot; the replica's stepping thread only
    std::deque<std::shared_ptr<Request>> assigned;  // under mu_: given a slot, admitted at the next step
    int64_t busy = 0;                               // under mu_: running requests
    std::vector<StepPhase> phases;                  // den->step_phases() after the last step (totals)
  };
  /// Gives queued requests to replicas with free slots (see the file comment). Holds mu_.
  void distribute_locked();
  /// Frees the slot and returns its request: callers deliver the final event after this, so a
  /// reader that saw it also sees the slot free in metrics().
  std::shared_ptr<Request> release_slot(Replica& rep, size_t slot);
  void finish(Request& r, FinishReason reason, RequestEvent ev);
  void fail(Request& r, RequestEvent ev, const Error& e);
  std::shared_ptr<GenerateResult> make_result(Request& r, Denoiser& den, int64_t slot);
  /// Updates the request's answer from its canvas after an iteration; fills ev.stable_tokens and
  /// ev.text_delta. Returns true once the answer is decided.
  bool update_answer(Request& r, std::span<const int32_t> canvas, bool denoiser_finished, RequestEvent& ev);
  // The phases of step(replica), in order.
  /// Phase 1: cancelled running requests free their slots, cancelled waiting ones leave the queue,
  /// the requests given to this replica take its free slots (lowest first) and are admitted; the
  /// admitted slots go to `admitted`. Returns whether anything happened.
  bool admit_and_cancel(Replica& rep, std::vector<size_t>& admitted);
  /// Phase 2 failed as a whole (a device error): every running request of the replica fails.
  void fail_running(Replica& rep, const Error& e);
  /// Phase 3: one event per stepped slot, the answers, the finished and failed requests. Returns
  /// the positions committed over all slots.
  int64_t deliver(Replica& rep, std::vector<SlotStep>& steps);
  /// Phase 4: the iteration's metrics (the denoiser step's wall time t0..t1 and model passes, the
  /// host phases since `entered`).
  void record_iteration(Replica& rep, size_t replica, bool admission, int64_t committed, int64_t passes,
                        std::chrono::steady_clock::time_point entered, std::chrono::steady_clock::time_point t0,
                        std::chrono::steady_clock::time_point t1);

  std::vector<Replica> reps_;  // never resized after construction
  TextCodec codec_;
  Options opt_;
  std::mutex hook_mu_;     // one hook call at a time
  mutable std::mutex mu_;  // guards the fields below and Replica's marked ones
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Request>> queue_;      // waiting for a slot of any replica
  std::map<uint64_t, std::weak_ptr<Stream>> live_;  // queued and running requests by id
  uint64_t next_id_ = 1;
  bool closed_ = false;
  int64_t busy_ = 0;  // running requests, all replicas
  EngineMetrics metrics_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;  // (iteration end, committed)
  /// The newest iteration wall times (seconds, at most EngineMetrics::kIterationWindow each) of
  /// iterations without and with an admission (EngineMetrics::decode_iterations / admission_iterations).
  std::deque<double> decode_seconds_, admission_seconds_;
};

}  // namespace flashdllm
