// Engine: loads a checkpoint onto a backend and runs requests through a denoiser.
#include "flashdllm/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "backend/backend.h"
#include "backend/profiling_backend.h"
#include "core/check.h"
#include "core/log.h"
#include "denoise/fastdllm_cache.h"
#include "denoise/flash_cache.h"
#include "denoise/flash_verify.h"
#include "denoise/llada_sampler.h"
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
  LladaModel model;
  int32_t eot_id = -1;
  double load_seconds = 0.0;
  size_t checkpoint_bytes = 0;
  size_t free_before_load = 0;  // backend free memory before weights
  size_t peak_in_use = 0;
  std::string weights_dtype;
};

namespace {

Remasking parse_remasking(const std::string& s) {
  if (s == "low_confidence") return Remasking::kLowConfidence;
  if (s == "random") return Remasking::kRandom;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "remasking must be 'low_confidence' or 'random', got '{}'", s);
}

}  // namespace

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

  impl->backend = make_backend(options.device, options.threads);
  if (options.profile_ops) impl->backend = make_profiling_backend(std::move(impl->backend), impl->op_profile);
  impl->free_before_load = impl->backend->free_memory();
  if (options.load_format == "dummy") {
    impl->model.weights = make_dummy_llada_weights(*impl->backend, cfg, options.dummy_seed);
    impl->weights_dtype = "random (dummy)";
  } else {
    FDLLM_CHECK_ARG(options.load_format == "auto", "load_format must be 'auto' or 'dummy', got '{}'",
                    options.load_format);
    Checkpoint ckpt = Checkpoint::open(dir);
    impl->checkpoint_bytes = ckpt.total_bytes();
    impl->model.weights = load_llada_weights(*impl->backend, ckpt, cfg);  // validates names and shapes first
    impl->weights_dtype = checkpoint_dtype_summary(ckpt);
  }
  // Positions up to max_sequence_length plus one 128-row tile of padding (Flash-dLLM layout).
  impl->model.rope = make_rope_tables(*impl->backend, cfg, cfg.max_sequence_length + 256);
  impl->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  impl->op_profile.clear();  // the profile covers generate calls, not loading
  logger().info("loaded {} ({} layers, d_model {}) on {} in {:.2f} s", dir.string(), cfg.n_layers, cfg.d_model,
                impl->backend->name(), impl->load_seconds);
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

std::string Engine::decode(const std::vector<int32_t>& ids) const {
  if (!impl_->tokenizer) return "";
  // The LM head scores more rows than the tokenizer knows (LLaDA-8B: 126464 vs 126349); such ids
  // have no text and are dropped, like special tokens.
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < impl_->tokenizer->vocab_size() && !impl_->tokenizer->id_to_token(id).empty())
      known.push_back(id);
  return impl_->tokenizer->decode(known, /*skip_special_tokens=*/true);
}

namespace {

/// What every denoiser returns per request, before text decoding.
struct RawOutput {
  std::vector<int32_t> canvas;  // the gen_length canvas positions (Flash-Cache: up to its stop, EOS last)
  int64_t nfe = 0;
  int64_t committed = 0;
  std::string call_kinds;
  int64_t forward_passes = -1;  // -1: = nfe
  int64_t verify_candidates = 0, verify_accepted = 0;
  int64_t committed_reference = -1;  // -1: = committed
};

/// Free backend memory while a denoiser still holds its buffers (the run's peak footprint).
struct MemorySample {
  size_t min_free = SIZE_MAX;
  void take(Backend& be) { take(be.free_memory()); }
  void take(size_t free_bytes) { min_free = std::min(min_free, free_bytes); }
};

int64_t block_or(int64_t v, int64_t fallback) { return v > 0 ? v : fallback; }

void reject_for_cache(const GenerateOptions& o, const char* mode) {
  FDLLM_CHECK_ARG(o.cfg_scale == 0.0, "--cache {}: classifier-free guidance (cfg_scale) is only supported with --cache none",
                  mode);
  FDLLM_CHECK_ARG(!o.logits_eos_inf && !o.confidence_eos_eot_inf,
                  "--cache {}: logits_eos_inf / confidence_eos_eot_inf are LLaDA-sampler options (--cache none)", mode);
  FDLLM_CHECK_ARG(o.eos_pad_tile == 0, "--cache {}: eos_pad_tile applies to --cache none only", mode);
}

std::vector<RawOutput> run_llada(Backend& be, const LladaModel& m, const GenerateOptions& o, int32_t eot,
                                 const std::vector<std::vector<int32_t>>& prompts, const ProgressCallback& progress,
                                 MemorySample& mem) {
  LladaSamplerOptions so;
  so.gen_length = o.gen_length;
  so.block_length = block_or(o.block_length, 32);
  so.steps = o.steps;
  so.temperature = o.temperature;
  so.cfg_scale = o.cfg_scale;
  so.remasking = parse_remasking(o.remasking);
  so.threshold = o.threshold;
  so.logits_eos_inf = o.logits_eos_inf;
  so.confidence_eos_eot_inf = o.confidence_eos_eot_inf;
  so.confidence_f64 = !o.confidence_f32;
  so.seed = o.seed;
  so.eot_token_id = eot;
  so.eos_pad_tile = o.eos_pad_tile;
  LladaSampler sampler(be, m, so);
  std::vector<int32_t> canvas;
  StepObserver observer;
  if (progress)
    observer = [&](size_t i, const SequenceState& s, const StepCommit&) {
      canvas.assign(s.x.begin() + s.gen_begin(), s.x.begin() + s.gen_end());
      progress(StepProgress{i, &canvas, s.done});
    };
  std::vector<RawOutput> out;
  std::vector<SequenceState> states = sampler.generate(prompts, observer);
  mem.take(be);
  for (const SequenceState& s : states)
    out.push_back({std::vector<int32_t>(s.x.begin() + s.gen_begin(), s.x.begin() + s.gen_end()), s.nfe,
                   o.gen_length, ""});
  return out;
}

std::vector<RawOutput> run_fastdllm(Backend& be, const LladaModel& m, const GenerateOptions& o, FastDllmCacheMode mode,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    const ProgressCallback& progress, MemorySample& mem) {
  reject_for_cache(o, mode == FastDllmCacheMode::kPrefix ? "prefix" : "dual");
  FastDllmCacheOptions fo;
  fo.mode = mode;
  fo.gen_length = o.gen_length;
  fo.block_length = block_or(o.block_length, 32);
  fo.steps = o.steps;
  fo.threshold = o.threshold;
  fo.temperature = o.temperature;
  fo.remasking = parse_remasking(o.remasking);
  fo.confidence_f64 = !o.confidence_f32;
  fo.seed = o.seed;
  FastDllmCacheSampler sampler(be, m, fo);
  std::vector<int32_t> canvas;
  CachedStepObserver observer;
  if (progress)
    observer = [&](size_t i, const CachedSequenceState& s, const StepCommit&) {
      canvas.assign(s.x.begin() + s.gen_begin(), s.x.begin() + s.gen_end());
      progress(StepProgress{i, &canvas, s.done});
    };
  std::vector<RawOutput> out;
  std::vector<CachedSequenceState> states = sampler.generate(prompts, observer);
  mem.take(be);
  for (const CachedSequenceState& s : states)
    out.push_back({std::vector<int32_t>(s.x.begin() + s.gen_begin(), s.x.begin() + s.gen_end()), s.nfe,
                   o.gen_length, s.call_kinds});
  return out;
}

std::vector<RawOutput> run_flash(Backend& be, const LladaModel& m, const GenerateOptions& o,
                                 const std::vector<std::vector<int32_t>>& prompts, MemorySample& mem) {
  reject_for_cache(o, "flash");
  FDLLM_CHECK_ARG(o.temperature == 0.0 && o.remasking == "low_confidence",
                  "--cache flash decodes greedily by confidence (Flash-dLLM has no temperature or random remasking)");
  FlashCacheOptions fo;
  fo.gen_length = o.gen_length;
  fo.block_length = block_or(o.block_length, 16);
  fo.threshold = o.threshold.value_or(0.9);
  fo.track_num = o.track_num;
  fo.mask_num = o.mask_num;
  fo.n_slots = o.n_slots;
  if (o.tokens_per_step > 0) {
    fo.rule = FlashDecodeRule::kFixedCount;
    fo.tokens_per_step = o.tokens_per_step;
  }
  fo.forced_schedule = o.forced_schedule;
  fo.reference_quirks = o.reference_quirks;
  fo.importance_probability_mass = o.importance_probability_mass;
  fo.max_forward_rows = o.max_forward_rows;
  fo.verify = o.verify;
  fo.gamma = o.gamma;
  fo.verify_rule = parse_flash_verify_rule(o.verify_rule);
  fo.max_candidates = o.max_candidates;
  fo.forced_acceptance = o.forced_acceptance;
  FDLLM_CHECK_ARG(o.verify || (o.max_candidates == 0 && o.forced_acceptance == 0),
                  "--cache flash: max_candidates / forced_acceptance need verify on (--verify)");
  FlashCacheDenoiser den(be, m, fo);
  FlashCacheResult res = den.generate(prompts);
  mem.take(res.stats.free_bytes_at_end);  // K/V cache and workspaces alive then; the cache is freed by now
  std::vector<RawOutput> out;
  for (const FlashRequestResult& r : res.requests)
    out.push_back({r.output_ids, r.nfe, r.num_tokens, "", r.forward_passes, r.candidates, r.accepted,
                   r.num_tokens_reference});
  return out;
}

}  // namespace

std::vector<GenerateResult> Engine::generate(const std::vector<GenerateRequest>& requests,
                                             const GenerateOptions& o, const ProgressCallback& progress) {
  FDLLM_CHECK_ARG(!requests.empty(), "generate: no requests");
  const LladaConfig& cfg = impl_->model.config;
  const int32_t eot = o.eot_token_id.value_or(impl_->eot_id);

  std::vector<std::vector<int32_t>> prompts;
  for (const GenerateRequest& r : requests)
    prompts.push_back(r.prompt_ids.empty() ? encode_prompt(r.prompt, r.chat) : r.prompt_ids);

  const auto t0 = std::chrono::steady_clock::now();
  Backend& be = *impl_->backend;
  FDLLM_CHECK_ARG(!o.verify || o.cache == "flash", "verify (Flash-Verify) needs cache 'flash', got '{}'", o.cache);
  std::vector<RawOutput> raw;
  MemorySample mem;
  if (o.cache == "none") {
    raw = run_llada(be, impl_->model, o, eot, prompts, progress, mem);
  } else if (o.cache == "prefix" || o.cache == "dual") {
    raw = run_fastdllm(be, impl_->model, o, o.cache == "prefix" ? FastDllmCacheMode::kPrefix : FastDllmCacheMode::kDual,
                       prompts, progress, mem);
  } else if (o.cache == "flash") {
    raw = run_flash(be, impl_->model, o, prompts, mem);
  } else {
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "cache must be none, prefix, dual or flash, got '{}'", o.cache);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (mem.min_free != SIZE_MAX && impl_->free_before_load > mem.min_free)
    impl_->peak_in_use = std::max(impl_->peak_in_use, impl_->free_before_load - mem.min_free);

  std::vector<GenerateResult> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    GenerateResult& r = out[i];
    r.prompt_ids = prompts[i];
    r.canvas_ids = std::move(raw[i].canvas);
    for (int32_t id : r.canvas_ids) {
      if (id == cfg.eos_token_id || (eot >= 0 && id == eot)) {
        r.stopped_at_eos = true;
        break;
      }
      r.output_ids.push_back(id);
    }
    r.text = decode(r.output_ids);
    r.nfe = raw[i].nfe;
    r.committed_tokens = raw[i].committed;
    r.committed_tokens_reference = raw[i].committed_reference >= 0 ? raw[i].committed_reference : raw[i].committed;
    r.forward_passes = raw[i].forward_passes >= 0 ? raw[i].forward_passes : raw[i].nfe;
    r.verify_candidates = raw[i].verify_candidates;
    r.verify_accepted = raw[i].verify_accepted;
    r.call_kinds = std::move(raw[i].call_kinds);
    r.seconds = seconds;
  }
  return out;
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
std::string Engine::backend_name() const { return impl_->backend->name(); }

std::string Engine::info() const {
  const LladaModelFacts f{.dir = impl_->options.model_dir,
                          .config = impl_->model.config,
                          .checkpoint_dtype = impl_->weights_dtype,
                          .checkpoint_bytes = impl_->checkpoint_bytes,
                          .eot_id = impl_->eot_id,
                          .has_tokenizer = impl_->tokenizer.has_value(),
                          .has_chat_template = impl_->chat.has_value()};
  return describe_llada_model(f, *impl_->backend);
}

}  // namespace flashdllm
