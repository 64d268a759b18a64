// Engine internals shared by engine.cpp (loading, the offline generate, text, facts) and
// engine_serve.cpp (serving: start / submit / cancel / stop, metrics): the model replicas and
// Engine::Impl. Not a public header.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/comm.h"
#include "backend/profiling_backend.h"
#include "engine/scheduler.h"
#include "engine/slot_pool.h"
#include "flashdllm/engine.h"
#include "io/chat_template.h"
#include "io/tokenizer.h"
#include "model/model.h"

namespace flashdllm {

/// One whole model: a backend and the model on it, or a tensor-parallel group of ranks (the
/// communicators of all ranks, ranks 1..N-1's backends and shards; made once at load and never
/// resized: denoisers hold references to the models).
struct ModelReplica {
  std::unique_ptr<Backend> backend;  // rank 0's
  Model model;                       // rank 0's shard under tensor parallelism
  std::vector<std::unique_ptr<Communicator>> comms;
  struct Peer {
    std::unique_ptr<Backend> backend;
    Model model;
  };
  std::vector<Peer> peers;

  /// The model's ranks (one without tensor parallelism).
  std::vector<ModelRank> ranks() const {
    std::vector<ModelRank> r{{backend.get(), &model}};
    for (const Peer& p : peers) r.push_back({p.backend.get(), &p.model});
    return r;
  }
  /// The smallest free memory over the ranks' backends.
  size_t free_memory() const {
    size_t f = backend->free_memory();
    for (const Peer& p : peers) f = std::min(f, p.backend->free_memory());
    return f;
  }
};

struct Engine::Impl {
  EngineOptions options;
  OpProfile op_profile;  // before the backends: a profiling backend refers to it
  std::optional<Tokenizer> tokenizer;
  size_t max_bytes_per_token = 0;  // tokenizer->max_bytes_per_token(), once (0: no bound, or no tokenizer)
  std::optional<ChatTemplate> chat;
  std::string chat_error;      // why there is no chat template, for the error message
  bool chat_unusable = false;  // tokenizer_config.json asks for a template we cannot use
  // Data parallelism: options.data_parallel replicas of the model (one without); never resized.
  std::vector<std::unique_ptr<ModelReplica>> replicas;
  int32_t eot_id = -1;
  double load_seconds = 0.0;
  size_t checkpoint_bytes = 0;
  size_t free_before_load = 0;  // backend free memory before weights
  size_t peak_in_use = 0;
  std::string weights_dtype;
  // Serving (start / submit / stop): a slot pool per replica, the scheduler over them and a loop
  // thread per replica. serve_mu orders start / stop; pool_mu guards sched / dens / serve against
  // submit, cancel and metrics from other threads (shared) while start installs or stop frees
  // them (exclusive).
  std::mutex serve_mu;
  mutable std::shared_mutex pool_mu;
  ServeOptions serve;
  std::vector<std::unique_ptr<Denoiser>> dens;
  std::unique_ptr<Scheduler> sched;
  std::vector<std::thread> loops;
  std::atomic<bool> stop_loop{false};
  EngineMetrics last_metrics;  // of the last stopped pool

  ~Impl() {
    if (sched) {
      sched->cancel_all();
      sched->close();
      stop_loop = true;
      for (std::thread& t : loops)
        if (t.joinable()) t.join();
    }
  }
  const Model& model() const { return replicas.front()->model; }
  Backend& backend() const { return *replicas.front()->backend; }
  TextCodec codec(const DecodeSettings& d) const;
  std::string backend_name() const;
  std::string decode_ids(std::span<const int32_t> ids) const;
  /// The smallest free memory over every replica's ranks.
  size_t free_memory() const {
    size_t f = SIZE_MAX;
    for (const auto& r : replicas) f = std::min(f, r->free_memory());
    return f;
  }
  /// The denoisers of `replicas` (one per replica, in order) over equal pools.
  std::vector<std::unique_ptr<Denoiser>> make_denoisers(size_t replicas, const DecodeSettings& d, int32_t eot,
                                                        const SlotPool& pool) const {
    std::vector<std::unique_ptr<Denoiser>> out;
    for (size_t i = 0; i < replicas; ++i) out.push_back(make_denoiser(this->replicas[i]->ranks(), d, eot, pool));
    return out;
  }
};

/// The raw pointers of `dens`, in order (what the scheduler takes).
inline std::vector<Denoiser*> pointers(const std::vector<std::unique_ptr<Denoiser>>& dens) {
  std::vector<Denoiser*> p;
  for (const auto& d : dens) p.push_back(d.get());
  return p;
}

/// Free backend memory while a denoiser still holds its buffers (the run's peak footprint).
struct MemorySample {
  size_t min_free = SIZE_MAX;
  void take(size_t free_bytes) { min_free = std::min(min_free, free_bytes); }
};

}  // namespace flashdllm
