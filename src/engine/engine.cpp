// Engine: loads a checkpoint onto a backend and runs requests through a denoiser.
#include "flashdllm/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <shared_mutex>
#include <thread>

#include "backend/backend.h"
#include "backend/profiling_backend.h"
#include "core/check.h"
#include "core/log.h"
#include "denoise/fastdllm_cache.h"
#include "denoise/flash_cache.h"
#include "denoise/flash_verify.h"
#include "denoise/llada_sampler.h"
#include "engine/scheduler.h"
#include "engine/slot_pool.h"
#include "engine/tensor_parallel.h"
#include "io/chat_template.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/llada.h"
#include "model/llada_checkpoint.h"
#include "model/llada_config.h"
#include "model/llada_info.h"

namespace flashdllm {

namespace fs = std::filesystem;

struct Engine::Impl {
  EngineOptions options;
  OpProfile op_profile;  // before backend: a profiling backend refers to it
  std::unique_ptr<Backend> backend;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat;
  std::string chat_error;  // why there is no chat template, for the error message
  LladaModel model;  // rank 0's shard under tensor parallelism
  // Tensor parallelism: the communicators of all ranks, and ranks 1..N-1's backends and shards
  // (made once at load and never resized: denoisers hold references to the models).
  std::vector<std::unique_ptr<Communicator>> comms;
  struct Peer {
    std::unique_ptr<Backend> backend;
    LladaModel model;
  };
  std::vector<Peer> peers;
  int32_t eot_id = -1;
  double load_seconds = 0.0;
  size_t checkpoint_bytes = 0;
  size_t free_before_load = 0;  // backend free memory before weights
  size_t peak_in_use = 0;
  std::string weights_dtype;
  // Serving (start / submit / stop): the slot pool, its scheduler and the loop thread. serve_mu
  // orders start / stop; pool_mu guards sched / den / serve against submit, cancel and metrics
  // from other threads (shared) while start installs or stop frees them (exclusive).
  std::mutex serve_mu;
  mutable std::shared_mutex pool_mu;
  ServeOptions serve;
  std::unique_ptr<Denoiser> den;
  std::unique_ptr<Scheduler> sched;
  std::thread loop;
  std::atomic<bool> stop_loop{false};
  EngineMetrics last_metrics;  // of the last stopped pool

  ~Impl() {
    if (sched) {
      sched->cancel_all();
      sched->close();
      stop_loop = true;
      if (loop.joinable()) loop.join();
    }
  }
  TextCodec codec(const DecodeSettings& d) const;
  std::string decode_ids(std::span<const int32_t> ids) const;
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

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const EngineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const fs::path dir = options.model_dir;
  check_model_directory(dir);
  impl->model.config = load_llada_config(dir / "config.json");
  const LladaConfig& cfg = impl->model.config;

  if (fs::exists(dir / "tokenizer.json")) {
    impl->tokenizer.emplace(Tokenizer::from_file(dir / "tokenizer.json"));
    validate_llada_tokenizer(*impl->tokenizer, cfg, dir / "tokenizer.json");
    if (auto id = impl->tokenizer->token_to_id("<|eot_id|>")) impl->eot_id = *id;
  }
  if (fs::exists(dir / "tokenizer_config.json")) {
    try {
      impl->chat.emplace(ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json"));
    } catch (const Error& e) {
      impl->chat_error = e.what();  // reported only if the chat template is asked for
    }
  } else {
    impl->chat_error = fmt::format("'{}' has no tokenizer_config.json with a chat template", dir.string());
  }

  const int world = options.tensor_parallel;
  FDLLM_CHECK_ARG(world >= 1 && world <= 64, "tensor_parallel must be in [1, 64], got {}", world);
  if (world > 1) {
    FDLLM_CHECK_ARG(!options.profile_ops, "profile_ops is not supported with tensor_parallel {} (one rank's "
                                          "profile would not say where the group's time goes)", world);
    llada_shard(cfg, {0, world, nullptr});  // refuse sizes the ranks cannot split before loading anything
  }
  impl->backend = make_backend(options.device, options.threads, 0, world);
  if (options.profile_ops) impl->backend = make_profiling_backend(std::move(impl->backend), impl->op_profile);
  impl->peers.reserve(static_cast<size_t>(world - 1));
  for (int r = 1; r < world; ++r)
    impl->peers.push_back({make_backend(options.device, options.threads, r, world), LladaModel{}});
  if (world > 1) {
    std::vector<Backend*> bes{impl->backend.get()};
    for (auto& p : impl->peers) bes.push_back(p.backend.get());
    impl->comms = make_communicators(bes);
  }
  impl->free_before_load = impl->backend->free_memory();
  std::optional<Checkpoint> ckpt;
  if (options.load_format != "dummy") {
    FDLLM_CHECK_ARG(options.load_format == "auto", "load_format must be 'auto' or 'dummy', got '{}'",
                    options.load_format);
    ckpt.emplace(Checkpoint::open(dir));
    impl->checkpoint_bytes = ckpt->total_bytes();
    impl->weights_dtype = checkpoint_dtype_summary(*ckpt);
  } else {
    impl->weights_dtype = "random (dummy)";
  }
  // Every rank's shard (rank 0's is impl->model), each from the one mapped checkpoint.
  for (int r = 0; r < world; ++r) {
    Backend& be = r == 0 ? *impl->backend : *impl->peers[static_cast<size_t>(r - 1)].backend;
    LladaModel& m = r == 0 ? impl->model : impl->peers[static_cast<size_t>(r - 1)].model;
    m.config = cfg;
    if (world > 1) m.tp = {r, world, impl->comms[static_cast<size_t>(r)].get()};
    m.weights =
        ckpt ? load_llada_weights(be, *ckpt, cfg, m.tp) : make_dummy_llada_weights(be, cfg, options.dummy_seed, m.tp);
    // Positions up to max_sequence_length plus one 128-row tile of padding (Flash-dLLM layout).
    m.rope = make_rope_tables(be, cfg, cfg.max_sequence_length + 256);
  }
  impl->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  impl->op_profile.clear();  // the profile covers generate calls, not loading
  logger().info("loaded {} ({} layers, d_model {}) on {}{} in {:.2f} s", dir.string(), cfg.n_layers, cfg.d_model,
                impl->backend->name(), world > 1 ? fmt::format(" x {} tensor-parallel ranks", world) : "",
                impl->load_seconds);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::vector<int32_t> Engine::encode_prompt(const std::string& text, bool chat) const {
  FDLLM_CHECK_ARG(impl_->tokenizer.has_value(),
                  "'{}' has no tokenizer.json: pass token ids (--prompt-ids) instead of text",
                  impl_->options.model_dir.string());
  if (!chat) return impl_->tokenizer->encode(text, /*add_special_tokens=*/false);
  FDLLM_CHECK_ARG(impl_->chat.has_value(), "cannot apply the chat template: {} (use --raw)", impl_->chat_error);
  return impl_->tokenizer->encode(impl_->chat->render({{"user", text}}), false);
}

std::vector<int32_t> Engine::encode_chat(const std::vector<ChatMessage>& messages) const {
  FDLLM_CHECK_ARG(impl_->tokenizer.has_value(), "'{}' has no tokenizer.json: chat messages cannot be tokenized",
                  impl_->options.model_dir.string());
  FDLLM_CHECK_ARG(impl_->chat.has_value(), "cannot apply the chat template: {}", impl_->chat_error);
  return impl_->tokenizer->encode(impl_->chat->render(messages), false);
}

const std::filesystem::path& Engine::model_dir() const noexcept { return impl_->options.model_dir; }

namespace {

/// Free backend memory while a denoiser still holds its buffers (the run's peak footprint).
struct MemorySample {
  size_t min_free = SIZE_MAX;
  void take(size_t free_bytes) { min_free = std::min(min_free, free_bytes); }
};

/// Rows of one full-recompute step for a prompt of P tokens and a canvas of G (with the Flash-dLLM
/// EOS padding of the LLaDA sampler).
int64_t step_rows(int64_t P, int64_t G, const DecodeSettings& d) {
  const int64_t total = P + G;
  return d.eos_pad_tile > 0 ? total / d.eos_pad_tile * d.eos_pad_tile + d.eos_pad_tile : total;
}

}  // namespace

TextCodec Engine::Impl::codec(const DecodeSettings& d) const {
  TextCodec c;
  if (tokenizer) c.decode = [this](std::span<const int32_t> ids) { return decode_ids(ids); };
  c.end_ids.push_back(model.config.eos_token_id);
  const int32_t eot = d.eot_token_id.value_or(eot_id);
  if (eot >= 0 && eot != model.config.eos_token_id) c.end_ids.push_back(eot);
  c.mask_id = model.config.mask_token_id;
  c.allow_mask_in_output = d.cache == CacheMode::kFlash && d.reference_quirks;
  return c;
}

std::string Engine::Impl::decode_ids(std::span<const int32_t> ids) const {
  if (!tokenizer) return "";
  // The LM head scores more rows than the tokenizer knows (LLaDA-8B: 126464 vs 126349); such ids
  // have no text and are dropped, like special tokens.
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < tokenizer->vocab_size() && !tokenizer->id_to_token(id).empty()) known.push_back(id);
  return tokenizer->decode(known, /*skip_special_tokens=*/true);
}

std::string Engine::decode(std::span<const int32_t> ids) const { return impl_->decode_ids(ids); }

std::vector<GenerateResult> Engine::generate(const std::vector<GenerateRequest>& requests,
                                             const GenerateOptions& o, const ProgressCallback& progress) {
  FDLLM_CHECK_ARG(!requests.empty(), "generate: no requests");
  FDLLM_CHECK_ARG(!started(), "generate: the engine is started (serving); submit requests instead");
  const LladaConfig& cfg = impl_->model.config;
  validate(o.decode, cfg);
  validate(o.sampling, o.decode, cfg, /*exact_blocks=*/true);
  const DecodeSettings& d = o.decode;
  const int32_t eot = d.eot_token_id.value_or(impl_->eot_id);

  std::vector<std::vector<int32_t>> prompts;
  std::vector<bool> templated;
  for (const GenerateRequest& r : requests) {
    templated.push_back(r.prompt_ids.empty() && r.chat);
    prompts.push_back(r.prompt_ids.empty() ? encode_prompt(r.prompt, r.chat) : r.prompt_ids);
  }

  const auto t0 = std::chrono::steady_clock::now();
  const SlotParams params = resolve_params(o.sampling, d, /*exact_blocks=*/true);
  // The pool this batch needs: flash min(slots, requests) slots (0 = every request), the block
  // samplers every request at once; rows for the longest prompt.
  SlotPool pool;
  const auto N = static_cast<int64_t>(prompts.size());
  pool.n_slots = d.cache == CacheMode::kFlash && d.n_slots > 0 ? std::min<int64_t>(d.n_slots, N) : N;
  int64_t max_p = 0;
  for (const auto& p : prompts) {
    max_p = std::max<int64_t>(max_p, static_cast<int64_t>(p.size()));
    pool.max_step_rows += step_rows(static_cast<int64_t>(p.size()), params.gen_length, d);
  }
  pool.max_total_length = max_p + params.gen_length;
  if (d.cache == CacheMode::kFlash) pool.max_step_rows = 0;

  std::vector<std::vector<int32_t>> canvases(prompts.size());
  std::vector<double> finished_at(prompts.size(), -1.0);
  Scheduler::Options so;
  so.max_queue = N;
  so.checkpoint = impl_->options.model_dir.string();
  so.hook = [&](size_t i, std::span<const int32_t> canvas, bool done) {
    if (done && finished_at[i] < 0)
      finished_at[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!progress) return;
    canvases[i].assign(canvas.begin(), canvas.end());
    progress(StepProgress{i, &canvases[i], done});
  };
  MemorySample mem;
  std::vector<GenerateResult> out(prompts.size());
  {
    std::unique_ptr<Denoiser> den = make_denoiser(impl_->ranks(), d, eot, params, pool);
    Scheduler sched(*den, impl_->codec(d), so);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ScheduledRequest rq;
      rq.prompt = prompts[i];
      rq.params = params;
      rq.max_output_tokens = params.gen_length;
      rq.chat_template = templated[i];
      rq.tag = i;
      streams.push_back(sched.submit(std::move(rq)));
    }
    std::vector<bool> have(prompts.size(), false);
    auto drain = [&] {
      for (size_t i = 0; i < streams.size(); ++i)
        while (auto ev = streams[i]->next(std::chrono::milliseconds(0))) {
          if (!ev->finished) continue;
          if (ev->finish_reason == FinishReason::kError) throw Error(ev->error_code, ev->error);
          FDLLM_CHECK(ev->result != nullptr, ErrorCode::kInternal, "request {} ended ({}) without a result", i,
                      finish_reason_name(ev->finish_reason));
          out[i] = *ev->result;
          have[i] = true;
        }
    };
    while (sched.step()) drain();
    drain();
    mem.take(impl_->free_memory());  // K/V stores and workspaces still allocated
    for (size_t i = 0; i < have.size(); ++i)
      FDLLM_CHECK(have[i], ErrorCode::kInternal, "generate: request {} did not finish", i);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (mem.min_free != SIZE_MAX && impl_->free_before_load > mem.min_free)
    impl_->peak_in_use = std::max(impl_->peak_in_use, impl_->free_before_load - mem.min_free);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].seconds = seconds;
    out[i].latency_seconds = finished_at[i] >= 0 ? std::min(finished_at[i], seconds) : seconds;
  }
  return out;
}

// ---------------------------------------------------------------------------------- serving

void Engine::start(const ServeOptions& options) {
  std::lock_guard<std::mutex> lk(impl_->serve_mu);
  FDLLM_CHECK_ARG(!impl_->sched, "the engine is already started");
  const LladaConfig& cfg = impl_->model.config;
  ServeOptions so = options;
  validate(so.decode, cfg);
  if (so.max_model_len == 0) so.max_model_len = cfg.max_sequence_length;
  FDLLM_CHECK_ARG(so.max_model_len >= 2 && so.max_model_len <= cfg.max_sequence_length,
                  "max_model_len must be in [2, max_sequence_length = {}], got {}", cfg.max_sequence_length,
                  so.max_model_len);
  FDLLM_CHECK_ARG(so.max_queue >= 0, "max_queue must be >= 0, got {}", so.max_queue);
  FDLLM_CHECK_ARG(so.memory_fraction > 0.0 && so.memory_fraction <= 1.0, "memory_fraction must be in (0, 1], got {}",
                  so.memory_fraction);
  const DecodeSettings& d = so.decode;
  const int32_t eot = d.eot_token_id.value_or(impl_->eot_id);
  // The options' default request: a canvas of one block (the real ones come with each request).
  SamplingParams probe;
  probe.gen_length = std::min<int64_t>(d.effective_block_length(), so.max_model_len - 1);
  const SlotParams defaults = resolve_params(probe, d, /*exact_blocks=*/false);
  SlotPool pool;
  pool.max_total_length = so.max_model_len;
  Backend& be = *impl_->backend;
  std::unique_ptr<Denoiser> den;
  const std::vector<ModelRank> ranks = impl_->ranks();
  if (d.n_slots > 0) {
    pool.n_slots = d.n_slots;
    den = make_denoiser(ranks, d, eot, defaults, pool);
  } else {
    // As many slots as fit: K/V rows (and the full-recompute activations) per slot against the
    // free memory; fewer on an allocation failure.
    const int64_t act = static_cast<int64_t>(dtype_size(be.activation_dtype()));
    const int64_t kv_row = 2 * cfg.n_layers * llada_shard(cfg, impl_->model.tp).heads * cfg.head_dim * act;
    const int64_t act_row = (7 * cfg.d_model + 3 * cfg.mlp_hidden_size) * act;
    const int64_t per_slot = so.max_model_len * (d.cache == CacheMode::kNone ? act_row + kv_row / cfg.n_layers
                                                                              : kv_row) +
                             d.effective_block_length() * cfg.embedding_size * 4;
    const auto budget = static_cast<double>(impl_->free_memory()) * so.memory_fraction;
    int64_t n = std::clamp<int64_t>(static_cast<int64_t>(budget / static_cast<double>(per_slot)), 1, 256);
    for (;;) {
      pool.n_slots = n;
      try {
        den = make_denoiser(ranks, d, eot, defaults, pool);
        break;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kOutOfMemory || n == 1) throw;
        n = std::max<int64_t>(1, n * 3 / 4);
      }
    }
  }
  so.decode.n_slots = den->n_slots();
  Scheduler::Options sopt;
  sopt.max_queue = so.max_queue;
  sopt.checkpoint = impl_->options.model_dir.string();
  std::unique_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  impl_->sched = std::make_unique<Scheduler>(*den, impl_->codec(d), sopt);
  impl_->den = std::move(den);
  impl_->serve = so;
  pool_lock.unlock();
  impl_->stop_loop = false;
  Scheduler* sched = impl_->sched.get();
  std::atomic<bool>* stop_flag = &impl_->stop_loop;
  impl_->loop = std::thread([sched, stop_flag] {
    for (;;) {
      if (stop_flag->load() && !sched->has_work()) break;
      if (!sched->step()) sched->wait_for_work(std::chrono::milliseconds(50));
    }
  });
  logger().info("engine started: {} slots of {} positions, cache {}", impl_->den->n_slots(), so.max_model_len,
                cache_mode_name(d.cache));
}

std::shared_ptr<RequestStream> Engine::submit(const GenerateRequest& request, const SamplingParams& params) {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);  // stop() cannot free the pool meanwhile
  Scheduler* sched = impl_->sched.get();
  FDLLM_CHECK(sched != nullptr, ErrorCode::kUnavailable, "the engine is not started (Engine::start)");
  const LladaConfig& cfg = impl_->model.config;
  const DecodeSettings& d = impl_->serve.decode;
  validate(params, d, cfg, /*exact_blocks=*/false);
  ScheduledRequest rq;
  rq.prompt = request.prompt_ids.empty() ? encode_prompt(request.prompt, request.chat) : request.prompt_ids;
  rq.chat_template = request.prompt_ids.empty() && request.chat;
  rq.params = resolve_params(params, d, /*exact_blocks=*/false);
  const auto P = static_cast<int64_t>(rq.prompt.size());
  FDLLM_CHECK_ARG(P + rq.params.gen_length <= impl_->serve.max_model_len,
                  "prompt ({} tokens) + max_tokens ({}{}) = {} exceeds this engine's context of {} tokens "
                  "(max_model_len)",
                  P, params.gen_length,
                  rq.params.gen_length != params.gen_length
                      ? fmt::format(", rounded up to the block length {}: {}", d.effective_block_length(),
                                    rq.params.gen_length)
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
  if (impl_->loop.joinable()) impl_->loop.join();
  MemorySample mem;
  mem.take(impl_->free_memory());
  if (impl_->free_before_load > mem.min_free)
    impl_->peak_in_use = std::max(impl_->peak_in_use, impl_->free_before_load - mem.min_free);
  std::unique_lock<std::shared_mutex> pool_lock(impl_->pool_mu);  // no submit / metrics in flight
  impl_->last_metrics = impl_->sched->metrics();  // metrics() still reports the stopped pool
  impl_->last_metrics.max_model_len = impl_->serve.max_model_len;
  impl_->sched.reset();
  impl_->den.reset();
}

bool Engine::started() const noexcept {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  return impl_->sched != nullptr;
}

const ServeOptions& Engine::serve_options() const { return impl_->serve; }

EngineMetrics Engine::metrics() const {
  std::shared_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
  if (!impl_->sched) return impl_->last_metrics;
  EngineMetrics m = impl_->sched->metrics();
  m.max_model_len = impl_->serve.max_model_len;
  return m;
}

const LladaConfig& Engine::config() const noexcept { return impl_->model.config; }
bool Engine::has_tokenizer() const noexcept { return impl_->tokenizer.has_value(); }
bool Engine::has_chat_template() const noexcept { return impl_->chat.has_value(); }
int32_t Engine::mask_token_id() const noexcept { return impl_->model.config.mask_token_id; }
int32_t Engine::eot_token_id() const noexcept { return impl_->eot_id; }
double Engine::load_seconds() const noexcept { return impl_->load_seconds; }
size_t Engine::peak_memory_bytes() const noexcept { return impl_->peak_in_use; }

std::vector<OpProfileEntry> Engine::op_profile() const { return impl_->op_profile.entries(); }
size_t Engine::weight_bytes() const noexcept { return impl_->checkpoint_bytes; }
std::string Engine::backend_name() const {
  if (impl_->peers.empty()) return impl_->backend->name();
  return fmt::format("{} x {} tensor-parallel ranks ({})", impl_->backend->name(), impl_->peers.size() + 1,
                     impl_->comms[0]->name());
}

std::string Engine::info() const {
  const LladaModelFacts f{.dir = impl_->options.model_dir,
                          .config = impl_->model.config,
                          .checkpoint_dtype = impl_->weights_dtype,
                          .checkpoint_bytes = impl_->checkpoint_bytes,
                          .eot_id = impl_->eot_id,
                          .has_tokenizer = impl_->tokenizer.has_value(),
                          .has_chat_template = impl_->chat.has_value()};
  return describe_llada_model(f, *impl_->backend, static_cast<int>(impl_->peers.size()) + 1, backend_name());
}

}  // namespace flashdllm
