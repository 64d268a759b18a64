// Engine serving: start (the slot pools, sized to the free memory, the scheduler and a loop thread
// per replica), submit, cancel, stop, and the serving metrics. Loading, generate and the text
// helpers are in engine.cpp; Engine::Impl in engine_impl.h.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "core/check.h"
#include "core/log.h"
#include "engine/engine_impl.h"

namespace flashdllm {

void Engine::start(const ServeOptions& options) {
  std::lock_guard<std::mutex> lk(impl_->serve_mu);
  FDLLM_CHECK_ARG(!impl_->sched, "the engine is already started");
  const ModelConfig& cfg = impl_->model().config;
  ServeOptions so = options;
  validate(so.decode, cfg);
  if (so.decode.cache == CacheMode::kNone) so.decode.sampler = effective_sampler(so.decode, cfg);  // auto: the model's
  if (so.max_model_len == 0) so.max_model_len = cfg.max_sequence_length;
  FDLLM_CHECK_ARG(so.max_model_len >= 2 && so.max_model_len <= cfg.max_sequence_length,
                  "max_model_len must be in [2, max_sequence_length = {}], got {}", cfg.max_sequence_length,
                  so.max_model_len);
  FDLLM_CHECK_ARG(so.max_queue >= 0, "max_queue must be >= 0, got {}", so.max_queue);
  FDLLM_CHECK_ARG(so.memory_fraction > 0.0 && so.memory_fraction <= 1.0, "memory_fraction must be in (0, 1], got {}",
                  so.memory_fraction);
  const DecodeSettings& d = so.decode;
  const int32_t eot = d.eot_token_id.value_or(impl_->eot_id);
  SlotPool pool;
  pool.max_total_length = so.max_model_len;
  Backend& be = impl_->backend();
  const size_t n_rep = impl_->replicas.size();
  std::vector<std::unique_ptr<Denoiser>> dens;
  if (d.n_slots > 0) {
    pool.n_slots = d.n_slots;
    dens = impl_->make_denoisers(n_rep, d, eot, pool);
  } else {
    // As many slots as fit (the same count in every replica): K/V rows (and the full-recompute
    // activations) per slot against the free memory (the smallest of the replicas' devices; on
    // the CPU the replicas share it); fewer on an allocation failure.
    const int64_t act = static_cast<int64_t>(dtype_size(be.activation_dtype()));
    const int64_t kv_row = 2 * cfg.n_layers * model_shard(cfg, impl_->model().tp).kv_heads * cfg.head_dim * act;
    const int64_t act_row = (7 * cfg.d_model + 3 * cfg.mlp_hidden_size) * act;
    const int64_t per_slot =
        so.max_model_len * (d.cache == CacheMode::kNone ? act_row + kv_row / cfg.n_layers : kv_row) +
        d.effective_block_length() * cfg.embedding_size * 4;
    const bool shared_memory = impl_->options.device == "cpu";
    const auto budget =
        static_cast<double>(impl_->free_memory()) * so.memory_fraction / static_cast<double>(shared_memory ? n_rep : 1);
    int64_t n = std::clamp<int64_t>(static_cast<int64_t>(budget / static_cast<double>(per_slot)), 1, 256);
    for (;;) {
      pool.n_slots = n;
      try {
        dens = impl_->make_denoisers(n_rep, d, eot, pool);
        break;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kOutOfMemory || n == 1) throw;
        dens.clear();
        n = std::max<int64_t>(1, n * 3 / 4);
      }
    }
  }
  so.decode.n_slots = dens.front()->n_slots();
  Scheduler::Options sopt;
  sopt.max_queue = so.max_queue;
  sopt.checkpoint = impl_->options.model_dir.string();
  std::unique_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  impl_->sched = std::make_unique<Scheduler>(pointers(dens), impl_->codec(d), sopt);
  impl_->dens = std::move(dens);
  impl_->serve = so;
  pool_lock.unlock();
  impl_->stop_loop = false;
  Scheduler* sched = impl_->sched.get();
  std::atomic<bool>* stop_flag = &impl_->stop_loop;
  for (size_t k = 0; k < n_rep; ++k)
    impl_->loops.emplace_back([sched, stop_flag, k] {
      for (;;) {
        if (stop_flag->load() && !sched->has_work(k)) break;
        if (!sched->step(k)) sched->wait_for_work(std::chrono::milliseconds(50), k);
      }
    });
  logger().info("engine started: {} slots of {} positions{}, cache {}", so.decode.n_slots, so.max_model_len,
                n_rep > 1 ? fmt::format(" in each of {} data-parallel replicas", n_rep) : "", cache_mode_name(d.cache));
}

std::shared_ptr<RequestStream> Engine::submit(const GenerateRequest& request, const SamplingParams& params) {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);  // stop() cannot free the pool meanwhile
  Scheduler* sched = impl_->sched.get();
  FDLLM_CHECK(sched != nullptr, ErrorCode::kUnavailable, "the engine is not started (Engine::start)");
  const ModelConfig& cfg = impl_->model().config;
  const DecodeSettings& d = impl_->serve.decode;
  validate(params, d, cfg, /*exact_blocks=*/false);
  ScheduledRequest rq;
  rq.prompt = request.prompt_ids.empty() ? encode_prompt(request.prompt, request.chat) : request.prompt_ids;
  rq.chat_template = request.prompt_ids.empty() && request.chat;
  rq.params = resolve_params(params, d, /*exact_blocks=*/false);
  const auto P = static_cast<int64_t>(rq.prompt.size());
  FDLLM_CHECK_ARG(
      P + rq.params.gen_length <= impl_->serve.max_model_len,
      "prompt ({} tokens) + max_tokens ({}{}) = {} exceeds this engine's context of {} tokens "
      "(max_model_len)",
      P, params.gen_length,
      rq.params.gen_length != params.gen_length
          ? fmt::format(", rounded up to the block length {}: {}", d.effective_block_length(), rq.params.gen_length)
          : "",
      P + rq.params.gen_length, impl_->serve.max_model_len);
  rq.max_output_tokens = params.gen_length;
  rq.stop = params.stop;
  rq.finish_early = true;
  rq.stream_text = true;
  return sched->submit(std::move(rq));
}

int64_t Engine::canvas_length(const SamplingParams& params) const {
  return resolve_params(params, impl_->serve.decode, /*exact_blocks=*/false).gen_length;
}

bool Engine::cancel(uint64_t id) {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  return impl_->sched ? impl_->sched->cancel(id) : false;
}

void Engine::stop(bool drain) {
  std::lock_guard<std::mutex> lk(impl_->serve_mu);
  if (!impl_->sched) return;
  if (!drain) impl_->sched->cancel_all();
  impl_->sched->close();
  impl_->stop_loop = true;
  for (std::thread& t : impl_->loops)
    if (t.joinable()) t.join();
  impl_->loops.clear();
  MemorySample mem;
  mem.take(impl_->free_memory());
  if (impl_->free_before_load > mem.min_free)
    impl_->peak_in_use = std::max(impl_->peak_in_use, impl_->free_before_load - mem.min_free);
  std::unique_lock<std::shared_mutex> pool_lock(impl_->pool_mu);  // no submit / metrics in flight
  impl_->last_metrics = impl_->sched->metrics();                  // metrics() still reports the stopped pool
  impl_->last_metrics.max_model_len = impl_->serve.max_model_len;
  impl_->sched.reset();
  impl_->dens.clear();
}

bool Engine::started() const noexcept {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  return impl_->sched != nullptr;
}

const ServeOptions& Engine::serve_options() const { return impl_->serve; }
int Engine::replicas() const noexcept { return static_cast<int>(impl_->replicas.size()); }
int64_t Engine::total_slots() const {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  return impl_->sched ? impl_->sched->n_slots() : 0;
}

EngineMetrics Engine::metrics() const {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  if (!impl_->sched) return impl_->last_metrics;
  EngineMetrics m = impl_->sched->metrics();
  m.max_model_len = impl_->serve.max_model_len;
  return m;
}

}  // namespace flashdllm
