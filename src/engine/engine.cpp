// Engine: loads a checkpoint onto a backend, runs a batch of requests through a denoiser (generate),
// encodes and decodes text and describes the model. Serving (start / submit / stop) is in
// engine_serve.cpp; the replicas and Engine::Impl in engine_impl.h.
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
#include "engine/engine_impl.h"
#include "engine/tensor_parallel.h"
#include "io/chat_template.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"
#include "model/model_info.h"

namespace flashdllm {

namespace fs = std::filesystem;

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const EngineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const fs::path dir = options.model_dir;
  check_model_directory(dir);
  const ModelConfig cfg = load_model_config(dir / "config.json");
  if (std::optional<Tokenizer> tok = Tokenizer::from_model_dir(dir)) {  // tokenizer.json, or Qwen2's slow files
    impl->tokenizer.emplace(std::move(*tok));
    validate_tokenizer(*impl->tokenizer, cfg, Tokenizer::model_dir_source(dir));
    if (auto id = end_of_turn_id(*impl->tokenizer, cfg)) impl->eot_id = *id;
    impl->max_bytes_per_token = impl->tokenizer->max_bytes_per_token();
  }
  // A missing or unusable template only matters when the chat template is asked for (or taken by
  // default: chat_by_default).
  ChatTemplateLookup chat = find_chat_template(dir);
  impl->chat = std::move(chat.chat);
  impl->chat_error = std::move(chat.error);
  impl->chat_unusable = chat.unusable;

  const int world = options.tensor_parallel;
  const int dp = options.data_parallel;
  FDLLM_CHECK_ARG(world >= 1 && world <= 64, "tensor_parallel must be in [1, 64], got {}", world);
  FDLLM_CHECK_ARG(dp >= 1 && dp <= 64, "data_parallel must be in [1, 64], got {}", dp);
  FDLLM_CHECK_ARG(world * dp <= 64, "tensor_parallel x data_parallel = {} x {} exceeds 64 ranks", world, dp);
  if (world > 1) model_shard(cfg, {0, world, nullptr});  // refuse sizes the ranks cannot split before loading anything
  FDLLM_CHECK_ARG(!options.profile_ops || (world == 1 && dp == 1),
                  "profile_ops is not supported with tensor_parallel {} / data_parallel {} (one rank's profile "
                  "would not say where the group's time goes)",
                  world, dp);
  // Replica k's rank t is device rank k * world + t: GPUs K.. in order, or a 1 / (world * dp)
  // share of the CPU threads.
  for (int k = 0; k < dp; ++k) {
    auto rep = std::make_unique<ModelReplica>();
    rep->backend = make_backend(options.device, options.threads, k * world, world * dp, options.backend);
    if (options.profile_ops) rep->backend = make_profiling_backend(std::move(rep->backend), impl->op_profile);
    rep->peers.reserve(static_cast<size_t>(world - 1));
    for (int r = 1; r < world; ++r)
      rep->peers.push_back(
          {make_backend(options.device, options.threads, k * world + r, world * dp, options.backend), Model{}});
    if (world > 1) {
      std::vector<Backend*> bes{rep->backend.get()};
      for (auto& p : rep->peers) bes.push_back(p.backend.get());
      rep->comms = make_communicators(bes);
    }
    impl->replicas.push_back(std::move(rep));
  }
  impl->free_before_load = impl->free_memory();
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
  // Every replica's every rank's shard (rank 0's is rep.model), each from the one mapped checkpoint.
  for (auto& rep : impl->replicas)
    for (int r = 0; r < world; ++r) {
      Backend& be = r == 0 ? *rep->backend : *rep->peers[static_cast<size_t>(r - 1)].backend;
      Model& m = r == 0 ? rep->model : rep->peers[static_cast<size_t>(r - 1)].model;
      m.config = cfg;
      if (world > 1) m.tp = {r, world, rep->comms[static_cast<size_t>(r)].get()};
      m.weights = ckpt ? load_model_weights(be, *ckpt, cfg, m.tp, options.precision)
                       : make_dummy_weights(be, cfg, options.dummy_seed, m.tp, options.precision);
      // Positions up to max_sequence_length plus one 128-row tile of padding (Flash-dLLM layout).
      m.rope = make_rope_tables(be, cfg, cfg.max_sequence_length + 256);
    }
  impl->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  impl->op_profile.clear();  // the profile covers generate calls, not loading
  logger().info("loaded {} ({} layers, d_model {}) on {} in {:.2f} s", dir.string(), cfg.n_layers, cfg.d_model,
                impl->backend_name(), impl->load_seconds);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

std::vector<int32_t> Engine::encode_prompt(const std::string& text, bool chat) const {
  FDLLM_CHECK_ARG(impl_->tokenizer.has_value(),
                  "'{}' has no tokenizer.json: give the prompt as token ids instead of text (generate: --prompt-ids; "
                  "the server's /v1/completions: a list of integers)",
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

namespace {

/// ceil(bytes / per_token), or 0 without a bound (per_token 0).
int64_t min_tokens_of_bytes(size_t bytes, size_t per_token) {
  return per_token == 0 ? 0 : static_cast<int64_t>((bytes + per_token - 1) / per_token);
}

}  // namespace

int64_t Engine::min_prompt_tokens(const std::string& text, bool chat) const {
  if (!chat) return min_tokens_of_bytes(text.size(), impl_->max_bytes_per_token);
  if (!impl_->chat) return 0;  // encode_prompt refuses it
  return min_tokens_of_bytes(impl_->chat->render({{"user", text}}).size(), impl_->max_bytes_per_token);
}

int64_t Engine::min_chat_tokens(const std::vector<ChatMessage>& messages) const {
  if (!impl_->chat) return 0;  // encode_chat refuses it
  return min_tokens_of_bytes(impl_->chat->render(messages).size(), impl_->max_bytes_per_token);
}

size_t Engine::max_bytes_per_token() const noexcept { return impl_->max_bytes_per_token; }

const std::filesystem::path& Engine::model_dir() const noexcept { return impl_->options.model_dir; }

namespace {

/// Rows of one full-recompute step for a prompt of P tokens and a canvas of G (with the Flash-dLLM
/// EOS padding of the LLaDA sampler).
int64_t step_rows(int64_t P, int64_t G, const DecodeSettings& d) {
  const int64_t total = P + G;
  return d.eos_pad_tile > 0 ? total / d.eos_pad_tile * d.eos_pad_tile + d.eos_pad_tile : total;
}

/// The pool each of n_rep replicas needs for its share of the batch (data parallelism: the
/// requests are dealt over the replicas through the scheduler's shared queue): flash
/// min(slots, share) slots (0 = the whole share), the block samplers the share at once; rows for
/// the longest prompt and the share's largest full-recompute steps.
SlotPool replica_pool(const std::vector<std::vector<int32_t>>& prompts, size_t n_rep, int64_t gen_length,
                      const DecodeSettings& d) {
  const auto N = static_cast<int64_t>(prompts.size());
  const int64_t share = (N + static_cast<int64_t>(n_rep) - 1) / static_cast<int64_t>(n_rep);
  SlotPool pool;
  pool.n_slots = d.cache == CacheMode::kFlash && d.n_slots > 0 ? std::min<int64_t>(d.n_slots, share) : share;
  int64_t max_p = 0;
  std::vector<int64_t> rows;
  for (const auto& p : prompts) {
    max_p = std::max<int64_t>(max_p, static_cast<int64_t>(p.size()));
    rows.push_back(step_rows(static_cast<int64_t>(p.size()), gen_length, d));
  }
  std::sort(rows.begin(), rows.end(), std::greater<>());
  for (int64_t i = 0; i < share; ++i) pool.max_step_rows += rows[static_cast<size_t>(i)];
  pool.max_total_length = max_p + gen_length;
  if (d.cache == CacheMode::kFlash) pool.max_step_rows = 0;
  return pool;
}

/// Moves every finished request's result from its stream into out[i] and sets have[i]. A request
/// whose own logits were not finite (kInvalidCheckpoint) fails alone; any other error is thrown.
void collect_finished(const std::vector<std::shared_ptr<RequestStream>>& streams,
                      const std::vector<std::vector<int32_t>>& prompts, const std::vector<bool>& templated,
                      std::vector<GenerateResult>& out, std::vector<bool>& have) {
  for (size_t i = 0; i < streams.size(); ++i)
    while (auto ev = streams[i]->next(std::chrono::milliseconds(0))) {
      if (!ev->finished) continue;
      if (ev->finish_reason == FinishReason::kError) {
        // A request whose own logits were not finite fails alone; any other failure fails the call.
        if (ev->error_code != ErrorCode::kInvalidCheckpoint) throw Error(ev->error_code, ev->error);
        out[i].prompt_ids = prompts[i];
        out[i].chat_template = templated[i];
        out[i].finish_reason = FinishReason::kError;
        out[i].error = ev->error;
        have[i] = true;
        continue;
      }
      FDLLM_CHECK(ev->result != nullptr, ErrorCode::kInternal, "request {} ended ({}) without a result", i,
                  finish_reason_name(ev->finish_reason));
      out[i] = *ev->result;
      have[i] = true;
    }
}

/// The threads stepping replicas 1..: on destruction (an exception) any still running are
/// cancelled through the scheduler and joined, so they end before the pools go.
struct Joiner {
  Scheduler& sched;
  std::vector<std::thread> threads;
  ~Joiner() {
    if (std::any_of(threads.begin(), threads.end(), [](const std::thread& t) { return t.joinable(); }))
      sched.cancel_all();
    for (std::thread& t : threads)
      if (t.joinable()) t.join();
  }
};

}  // namespace

TextCodec Engine::Impl::codec(const DecodeSettings& d) const {
  TextCodec c;
  if (tokenizer) {
    c.decode = [this](std::span<const int32_t> ids) { return decode_ids(ids); };
    c.text_stream = [this] { return TextStream(*tokenizer, /*skip_special_tokens=*/true, /*drop_unknown_ids=*/true); };
  }
  c.end_ids.push_back(model().config.eos_token_id);
  const int32_t eot = d.eot_token_id.value_or(eot_id);
  if (eot >= 0 && eot != model().config.eos_token_id) c.end_ids.push_back(eot);
  c.mask_id = model().config.mask_token_id;
  c.allow_mask_in_output = d.cache == CacheMode::kFlash && d.reference_quirks;
  return c;
}

std::string Engine::Impl::decode_ids(std::span<const int32_t> ids) const {
  if (!tokenizer) return "";
  // The LM head scores more rows than the tokenizer knows (LLaDA-8B: 126464 vs 126349); such ids
  // have no text and are dropped, like special tokens.
  TextStream text(*tokenizer, /*skip_special_tokens=*/true, /*drop_unknown_ids=*/true);
  text.append(ids);
  return text.text();
}

std::string Engine::decode(std::span<const int32_t> ids) const { return impl_->decode_ids(ids); }

std::vector<GenerateResult> Engine::generate(const std::vector<GenerateRequest>& requests,
                                             const GenerateOptions& o, const ProgressCallback& progress) {
  FDLLM_CHECK_ARG(!requests.empty(), "generate: no requests");
  FDLLM_CHECK_ARG(!started(), "generate: the engine is started (serving); submit requests instead");
  const ModelConfig& cfg = impl_->model().config;
  validate(o.decode, cfg);
  validate(o.sampling, o.decode, cfg, /*exact_blocks=*/true);
  DecodeSettings d = o.decode;
  // The model's own full-recompute sampler when auto (resolve_params' step default); the sampler
  // applies to cache none only.
  if (d.cache == CacheMode::kNone) d.sampler = effective_sampler(d, cfg);
  const int32_t eot = d.eot_token_id.value_or(impl_->eot_id);

  std::vector<std::vector<int32_t>> prompts;
  std::vector<bool> templated;
  for (const GenerateRequest& r : requests) {
    templated.push_back(r.prompt_ids.empty() && r.chat);
    prompts.push_back(r.prompt_ids.empty() ? encode_prompt(r.prompt, r.chat) : r.prompt_ids);
  }

  const auto t0 = std::chrono::steady_clock::now();
  const SlotParams params = resolve_params(o.sampling, d, /*exact_blocks=*/true);
  // Data parallelism: the requests are dealt over min(replicas, requests) replicas.
  const auto N = static_cast<int64_t>(prompts.size());
  const size_t n_rep = std::min(impl_->replicas.size(), prompts.size());
  const SlotPool pool = replica_pool(prompts, n_rep, params.gen_length, d);

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
    const std::vector<std::unique_ptr<Denoiser>> dens = impl_->make_denoisers(n_rep, d, eot, pool);
    Scheduler sched(pointers(dens), impl_->codec(d), so);
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
    auto drain = [&] { collect_finished(streams, prompts, templated, out, have); };
    // Replicas 1.. step on their own threads until their share is done (nothing is submitted
    // later, so a replica with nothing to do is finished); replica 0 steps here and collects.
    // On an exception the others are cancelled and joined before the pools go.
    Joiner others{sched, {}};
    for (size_t k = 1; k < n_rep; ++k)
      others.threads.emplace_back([&sched, k] {
        while (sched.step(k)) {
        }
      });
    while (sched.step(0)) drain();
    for (std::thread& t : others.threads) t.join();
    drain();
    mem.take(impl_->free_memory());  // K/V stores and workspaces still allocated
    {
      std::unique_lock<std::shared_mutex> pool_lock(impl_->pool_mu);
      impl_->last_metrics = sched.metrics();  // metrics() reports this call until the next one or start()
    }
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

const ModelConfig& Engine::config() const noexcept { return impl_->model().config; }
bool Engine::has_tokenizer() const noexcept { return impl_->tokenizer.has_value(); }
bool Engine::has_chat_template() const noexcept { return impl_->chat.has_value(); }
bool Engine::chat_by_default() const {
  FDLLM_CHECK(!impl_->chat_unusable, ErrorCode::kInvalidCheckpoint,
              "cannot apply the checkpoint's chat template: {} (pass --raw to send prompts without it)",
              impl_->chat_error);
  return impl_->chat.has_value();
}
int32_t Engine::mask_token_id() const noexcept { return impl_->model().config.mask_token_id; }
int32_t Engine::eot_token_id() const noexcept { return impl_->eot_id; }
double Engine::load_seconds() const noexcept { return impl_->load_seconds; }
size_t Engine::peak_memory_bytes() const noexcept { return impl_->peak_in_use; }

std::vector<OpProfileEntry> Engine::op_profile() const { return impl_->op_profile.entries(); }
Engine::GraphStats Engine::graph_stats() const {
  GraphStats g;
  for (const auto& r : impl_->replicas) {
    const Backend::RecordingStats s = r->backend->recording_stats();
    g.direct += s.direct;
    g.captures += s.captures;
    g.replays += s.replays;
    g.failed += s.failed;
    g.cached += s.cached;
  }
  return g;
}
size_t Engine::weight_bytes() const noexcept { return impl_->checkpoint_bytes; }
std::string Engine::backend_name() const { return impl_->backend_name(); }

std::string Engine::Impl::backend_name() const {
  const ModelReplica& r = *replicas.front();
  std::string name = r.backend->name();
  if (!r.peers.empty())
    name = fmt::format("{} x {} tensor-parallel ranks ({})", name, r.peers.size() + 1, r.comms[0]->name());
  if (replicas.size() > 1) name = fmt::format("{}, x {} data-parallel replicas", name, replicas.size());
  return name;
}

std::string Engine::info() const {
  const ModelFacts f{.dir = impl_->options.model_dir,
                     .config = impl_->model().config,
                     .checkpoint_dtype = impl_->weights_dtype,
                     .checkpoint_bytes = impl_->checkpoint_bytes,
                     .eot_id = impl_->eot_id,
                     .has_tokenizer = impl_->tokenizer.has_value(),
                     .has_chat_template = impl_->chat.has_value(),
                     .chat_template_problem = impl_->chat_unusable ? impl_->chat_error : std::string(),
                     .precision = impl_->options.precision};
  return describe_model(f, impl_->backend(), static_cast<int>(impl_->replicas.front()->peers.size()) + 1,
                              backend_name());
}

}  // namespace flashdllm
