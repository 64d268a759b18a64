// Tensor parallelism in the engine (issue 14): the communicators of one process's ranks and the
// denoiser that runs N rank denoisers in lockstep.
//
// Every rank holds a full denoiser (its own backend, model shard, K/V stores and slot pool) and runs
// the same host logic on the same requests; the forward's collectives (model/model.h) make their
// logits identical, so their decisions are too (SPMD). TensorParallelDenoiser calls admit / step /
// release on all ranks at once, one thread per rank, and reports
// rank 0's events after checking that every rank produced the same ones. One process drives all
// ranks: CPU rank threads, or GPUs 0..N-1 of one host with NCCL. A launch of one rank per process
// (several hosts) would reuse the forward and the NCCL communicator unchanged (comm.h:
// TensorParallelLaunch, exchange_nccl_unique_id) but needs a control plane that this
// class replaces in-process: rank 0's scheduler broadcasting each admit (slot, prompt ids,
// SlotParams), step and release to the follower processes, which run only a denoiser (docs/design.md).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/comm.h"
#include "denoise/denoiser.h"

namespace flashdllm {

/// Communicators for one process's ranks, one per backend (rank r = backends[r]): in-process for
/// CPU backends, NCCL for CUDA backends (one GPU each). Throws Error(kInvalidArgument) for no
/// backends or a mix of devices, Error(kUnsupported) for CUDA backends in a build without NCCL,
/// Error(kDevice) when NCCL fails.
std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Backend*>& backends);

/// Runs a function on N ranks at once, each on its own persistent worker thread, while the calling
/// thread supervises (a rank blocked in a collective must not be the one that could abort it).
/// run() returns when every rank has returned. A failed rank's error is rethrown
/// (the lowest failing rank's); if a rank fails while others are still running (they may wait in a
/// collective for it) the communicators are aborted after `abort_after` so the others return too
/// (then the communicators are unusable). Not reentrant; one caller at a time.
class Lockstep {
 public:
  Lockstep(int world, std::vector<Communicator*> comms,
           std::chrono::milliseconds abort_after = std::chrono::milliseconds(10000));
  ~Lockstep();
  Lockstep(const Lockstep&) = delete;
  Lockstep& operator=(const Lockstep&) = delete;

  int world() const noexcept { return world_; }
  void run(const std::function<void(int rank)>& fn);

 private:
  void worker(int rank);

  const int world_;
  std::vector<Communicator*> comms_;
  std::chrono::milliseconds abort_after_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;  // ranks still inside the current job
  bool quit_ = false;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

/// The slot contract (denoise/denoiser.h) over N tensor-parallel rank denoisers made with identical
/// settings over the N shards of one model (model.tp rank r of N for ranks[r]). check_request,
/// active, canvas, output and model_passes answer from rank 0; admit, step and release run on all
/// ranks in lockstep. step() raises Error(kInternal) naming the rank and slot if a rank's events
/// differ from rank 0's (a broken collective), and rethrows a rank's error (see Lockstep).
class TensorParallelDenoiser final : public Denoiser {
 public:
  /// Throws Error(kInvalidArgument) for fewer than 2 ranks or ranks whose slot counts differ.
  explicit TensorParallelDenoiser(std::vector<std::unique_ptr<Denoiser>> ranks, std::vector<Communicator*> comms);

  int64_t n_slots() const noexcept override { return ranks_[0]->n_slots(); }
  void check_request(std::span<const int32_t> prompt, const SlotParams& p) const override {
    ranks_[0]->check_request(prompt, p);
  }
  void admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) override;
  std::vector<SlotStep> step() override;
  void release(int64_t slot) override;
  bool active(int64_t slot) const noexcept override { return ranks_[0]->active(slot); }
  std::span<const int32_t> canvas(int64_t slot) const override { return ranks_[0]->canvas(slot); }
  SlotOutput output(int64_t slot) const override { return ranks_[0]->output(slot); }
  int64_t model_passes() const noexcept override { return ranks_[0]->model_passes(); }
  /// Rank 0's phases (the ranks step in lockstep).
  std::vector<StepPhase> step_phases() const override { return ranks_[0]->step_phases(); }

  int world() const noexcept { return static_cast<int>(ranks_.size()); }

 private:
  std::vector<std::unique_ptr<Denoiser>> ranks_;
  Lockstep lockstep_;
};

}  // namespace flashdllm
