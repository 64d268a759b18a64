// Tensor parallelism in the engine (tensor_parallel.h).
#include "engine/tensor_parallel.h"

#include <algorithm>

#include "core/check.h"

namespace flashdllm {

std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Backend*>& backends) {
  FDLLM_CHECK_ARG(!backends.empty(), "tensor parallel: no backends");
  const DeviceKind dev = backends[0]->device();
  for (Backend* b : backends)
    FDLLM_CHECK_ARG(b->device() == dev, "tensor parallel: ranks on different devices ({} and {})",
                    backends[0]->name(), b->name());
  if (dev == DeviceKind::kCPU) return make_local_communicators(static_cast<int>(backends.size()));
  return make_nccl_communicators(backends);
}

// ------------------------------------------------------------------------------------- Lockstep

Lockstep::Lockstep(int world, std::vector<Communicator*> comms, std::chrono::milliseconds abort_after)
    : world_(world), comms_(std::move(comms)), abort_after_(abort_after) {
  FDLLM_CHECK_ARG(world >= 1, "lockstep: world size must be >= 1, got {}", world);
  errors_.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) threads_.emplace_back([this, r] { worker(r); });
}

Lockstep::~Lockstep() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    quit_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Lockstep::worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr err;
    try {
      (*job)(rank);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      errors_[static_cast<size_t>(rank)] = err;
      --running_;
    }
    done_cv_.notify_all();
  }
}

void Lockstep::run(const std::function<void(int)>& fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    std::fill(errors_.begin(), errors_.end(), nullptr);
    running_ = world_;
    ++generation_;
  }
  work_cv_.notify_all();
  std::unique_lock<std::mutex> lk(mu_);
  auto failed = [&] { return std::any_of(errors_.begin(), errors_.end(), [](const auto& e) { return e != nullptr; }); };
  done_cv_.wait(lk, [&] { return running_ == 0 || failed(); });
  // The first failure in rank order as seen now: the one to report if the others then hang.
  std::exception_ptr first;
  if (running_ > 0) {
    for (const auto& e : errors_)
      if (e && !first) first = e;
    // A failed rank may leave its peers waiting in a collective forever: give symmetric failures
    // (every rank throwing at the same point) time to arrive, then abort the collectives.
    if (!done_cv_.wait_for(lk, abort_after_, [&] { return running_ == 0; })) {
      lk.unlock();
      for (Communicator* c : comms_)
        if (c != nullptr) c->abort();
      lk.lock();
      done_cv_.wait(lk, [&] { return running_ == 0; });
    } else {
      first = nullptr;  // everyone returned: report by rank order below
    }
  }
  job_ = nullptr;
  if (first) std::rethrow_exception(first);
  for (const auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

// ------------------------------------------------------------------------ TensorParallelDenoiser

namespace {

std::vector<Communicator*> checked(const std::vector<std::unique_ptr<Denoiser>>& ranks,
                                   std::vector<Communicator*> comms) {
  FDLLM_CHECK_ARG(ranks.size() >= 2, "tensor parallel denoiser: needs at least 2 ranks, got {}", ranks.size());
  FDLLM_CHECK_ARG(comms.size() == ranks.size(), "tensor parallel denoiser: {} ranks but {} communicators",
                  ranks.size(), comms.size());
  for (size_t r = 1; r < ranks.size(); ++r)
    FDLLM_CHECK_ARG(ranks[r]->n_slots() == ranks[0]->n_slots(),
                    "tensor parallel denoiser: rank {} has {} slots, rank 0 {}", r, ranks[r]->n_slots(),
                    ranks[0]->n_slots());
  return comms;
}

bool same_step(const SlotStep& a, const SlotStep& b) {
  return a.slot == b.slot && a.positions == b.positions && a.tokens == b.tokens && a.verified == b.verified &&
         a.finished == b.finished && a.error == b.error;
}

}  // namespace

TensorParallelDenoiser::TensorParallelDenoiser(std::vector<std::unique_ptr<Denoiser>> ranks,
                                               std::vector<Communicator*> comms)
    : ranks_(std::move(ranks)), lockstep_(static_cast<int>(ranks_.size()), checked(ranks_, std::move(comms))) {}

void TensorParallelDenoiser::admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) {
  lockstep_.run([&](int r) { ranks_[static_cast<size_t>(r)]->admit(slot, prompt, p); });
}

void TensorParallelDenoiser::release(int64_t slot) {
  lockstep_.run([&](int r) { ranks_[static_cast<size_t>(r)]->release(slot); });
}

std::vector<SlotStep> TensorParallelDenoiser::step() {
  std::vector<std::vector<SlotStep>> steps(ranks_.size());
  lockstep_.run([&](int r) { steps[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->step(); });
  for (size_t r = 1; r < steps.size(); ++r) {
    FDLLM_CHECK(steps[r].size() == steps[0].size(), ErrorCode::kInternal,
                "tensor parallel: rank {} stepped {} slots, rank 0 {} (the ranks diverged)", r, steps[r].size(),
                steps[0].size());
    for (size_t i = 0; i < steps[0].size(); ++i)
      FDLLM_CHECK(same_step(steps[r][i], steps[0][i]), ErrorCode::kInternal,
                  "tensor parallel: rank {} committed other tokens than rank 0 in slot {} (the ranks diverged: "
                  "their logits differ)",
                  r, steps[0][i].slot);
  }
  return std::move(steps[0]);
}

}  // namespace flashdllm
