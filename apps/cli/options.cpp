// The flashdllm command's shared options (options.h).
#include "options.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <limits>
#include <sstream>

#include "backend/backend.h"
#include "env_registry.h"
#include "model/model_config.h"
#include "eval/runner.h"

namespace flashdllm::cli {

using flashdllm::Error;
using flashdllm::ErrorCode;


void add_common(CLI::App* app, CommonArgs& a) {
  app->add_option("-m,--model", a.model_dir, "Hugging Face checkpoint directory (LLaDA, LLaDA-1.5, Dream, LLaDA-MoE)")
      ->default_str("the embedded small model (models/llada-arith-12m)");
  app->add_option("--device", a.device, "cpu | cuda | cuda:N")->capture_default_str();
  const int max_threads = flashdllm::max_cpu_threads();  // 4 x the hardware threads
  app->add_option("--threads", a.threads,
                  fmt::format("CPU threads, 0 = all cores; at most 4 x the hardware threads ({} here)", max_threads))
      ->capture_default_str()
      ->check(int_in_range(0, max_threads));
  app->add_option("--load-format", a.load_format, "auto (safetensors) | dummy (random weights, config.json only)")
      ->capture_default_str();
  app->add_option("--dummy-seed", a.dummy_seed, "seed of --load-format dummy weights")
      ->check(kUint64)
      ->capture_default_str();
  app->add_option("--tensor-parallel", a.tensor_parallel,
                  "split the model over N ranks (heads, MLP columns, vocabulary; Megatron layout): cpu: N rank "
                  "threads; cuda[:K]: GPUs K..K+N-1 with NCCL. N must divide n_heads, n_kv_heads, mlp_hidden_size "
                  "and embedding_size")
      ->check(int_in_range(1, 64))
      ->capture_default_str();
  app->add_option("--data-parallel", a.data_parallel,
                  "N whole copies of the model behind one request queue (serve: requests go to the least loaded "
                  "copy; generate / eval: the batch is dealt over them): cpu: --threads split N ways, at least 1 "
                  "each; cuda[:K]: copy k on GPUs K + k x tensor-parallel..; --slots is per copy")
      ->check(int_in_range(1, 64))
      ->capture_default_str();
  app->add_option("--quantization", a.quantization,
                  "weights: none (as the checkpoint stores them) | fp8 (quantise q/k/v, o, gate/up, down to e4m3 in "
                  "128 x 128 blocks while loading, activations per token in 1 x 128 groups; an FP8 checkpoint is "
                  "FP8 either way)")
      ->check(CLI::IsMember({"none", "fp8"}))
      ->capture_default_str();
  app->add_option("--kv-cache-dtype", a.kv_cache_dtype,
                  "K/V cache: auto (the activation dtype) | fp8 (e4m3, one static scale per layer and K/V head: 1.0)")
      ->check(CLI::IsMember({"auto", "fp8"}))
      ->capture_default_str();
  app->add_flag("-v,--verbose", a.verbose, "log loading details");
}

flashdllm::ModelPrecision precision_of(const CommonArgs& a) {
  flashdllm::ModelPrecision p;
  p.quantization = flashdllm::parse_weight_quantization(a.quantization).value_or(flashdllm::WeightQuantization::kNone);
  p.kv_cache_dtype = flashdllm::parse_kv_cache_dtype(a.kv_cache_dtype).value_or(flashdllm::KvCacheDtype::kAuto);
  return p;
}

PeakMemory peak_memory(const flashdllm::Engine& engine) {
  if (engine.backend_name().rfind("cpu", 0) == 0) return {flashdllm::eval::peak_rss_bytes(), "host max RSS (getrusage)"};
  return {static_cast<int64_t>(engine.peak_memory_bytes()),
          "device memory in use (weights + K/V + workspaces, Engine::peak_memory_bytes)"};
}

std::unique_ptr<flashdllm::Engine> load_engine(const CommonArgs& a) {
  flashdllm::EngineOptions eo;
  eo.model_dir = a.model_dir;
  eo.device = a.device;
  eo.threads = a.threads;
  eo.load_format = a.load_format;
  eo.dummy_seed = a.dummy_seed;
  eo.profile_ops = a.profile_ops;
  eo.tensor_parallel = a.tensor_parallel;
  eo.data_parallel = a.data_parallel;
  eo.precision = precision_of(a);
  eo.backend = env_settings().backend;
  return flashdllm::Engine::load(eo);
}

/// An integer option's value in [lo, hi], or the message why not.
static std::string check_int(const std::string& v, long long lo, long long hi, bool show_hi) {
  try {
    size_t end = 0;
    const long long x = std::stoll(v, &end);
    if (end != v.size() || v.empty() || v.front() == ' ') return "'" + v + "' is not an integer";
    if (x < lo || x > hi)
      return show_hi ? fmt::format("must be in [{}, {}], got {}", lo, hi, v)
                     : fmt::format("must be >= {}, got {}", lo, v);
  } catch (const std::out_of_range&) {
    return "'" + v + "' is out of range";
  } catch (const std::exception&) {
    return "'" + v + "' is not an integer";
  }
  return {};
}

/// CLI11 check for integer options that must be >= 0, with a plain message (CLI11's NonNegativeNumber
/// prints its double range, and calls "abc" out of range).
const CLI::Validator kNonNegativeInt(
    [](std::string& v) -> std::string { return check_int(v, 0, LLONG_MAX, /*show_hi=*/false); }, "NONNEGATIVE");

const CLI::Validator kUint64(
    [](std::string& v) -> std::string {
      // CLI11 reads "-1" as 2^64 - 1 and saturates what is past 2^64: a seed must be said exactly.
      uint64_t x = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
      if (v.empty() || end != v.data() + v.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
        return "'" + v + "' is not an unsigned integer";
      if (ec == std::errc::result_out_of_range) return fmt::format("must be in [0, {}], got {}", UINT64_MAX, v);
      return {};
    },
    "UINT64");

CLI::Validator int_in_range(long long lo, long long hi) {
  return CLI::Validator([lo, hi](std::string& v) { return check_int(v, lo, hi, /*show_hi=*/true); },
                        fmt::format("INT in [{}, {}]", lo, hi));
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  // getline leaves out a trailing empty entry: "1,2," is as malformed as "1,,2".
  if (const size_t last = s.find_last_not_of(" \t"); last != std::string::npos && s[last] == ',')
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--prompt-ids: empty entry in '{}'", s));
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty())
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--prompt-ids: empty entry in '{}'", s));
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--prompt-ids: '{}' is not a token id", item));
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw Error(ErrorCode::kInvalidArgument, "--prompt-ids: no token ids given");
  return ids;
}

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(ids[i]);
  }
  return s;
}

void DecodeArgs::check_scope(const flashdllm::DecodeSettings& d, bool cache_chosen) const {
  using flashdllm::CacheMode;
  struct Scope {
    const char* flag;
    std::vector<CacheMode> modes;
    const char* names;
  };
  const std::vector<CacheMode> flash = {CacheMode::kFlash}, none = {CacheMode::kNone},
                               blocks = {CacheMode::kNone, CacheMode::kPrefix, CacheMode::kDual};
  const Scope scopes[] = {{"--slots", flash, "flash"},
                          {"--track-num", flash, "flash"},
                          {"--mask-num", flash, "flash"},
                          {"--tokens-per-step", flash, "flash"},
                          {"--forced-schedule", flash, "flash"},
                          {"--importance", flash, "flash"},
                          {"--max-forward-rows", flash, "flash"},
                          {"--query-tile-rows", flash, "flash"},
                          {"--verify", flash, "flash"},
                          {"--steps", blocks, "none/prefix/dual"},
                          {"--remasking", blocks, "none/prefix/dual"},
                          {"--confidence-f32", blocks, "none/prefix/dual"},
                          {"--cfg-scale", none, "none"},
                          {"--logits-eos-inf", none, "none"},
                          {"--confidence-eos-eot-inf", none, "none"},
                          {"--eos-pad-tile", none, "none"},
                          {"--sampler", none, "none"},
                          {"--alg", none, "none"},
                          {"--alg-temp", none, "none"},
                          {"--timestep-eps", none, "none"},
                          {"--top-p", none, "none"},
                          {"--top-k", none, "none"}};
  for (const Scope& sc : scopes) {
    auto in = [&](CacheMode m) { return std::find(sc.modes.begin(), sc.modes.end(), m) != sc.modes.end(); };
    if (given(sc.flag) && !in(d.cache) && !(serving && std::string(sc.flag) == "--slots") &&
        (cache_chosen || !in(CacheMode::kNone)))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("{} applies to --cache {} only (cache is '{}'{})", sc.flag, sc.names,
                              flashdllm::cache_mode_name(d.cache),
                              given("--cache") || preset.size()              ? ""
                              : d.cache == flashdllm::DecodeSettings{}.cache ? ", the default"
                                                                             : ", this model's default"));
  }
}

void DecodeArgs::fit_to_model(flashdllm::GenerateOptions& o, const flashdllm::ModelConfig& cfg) const {
  if (cfg.logit_shift && !given("--cache") && preset.empty()) o.decode.cache = flashdllm::CacheMode::kNone;
  if (o.decode.cache == flashdllm::CacheMode::kNone) o.decode.sampler = flashdllm::effective_sampler(o.decode, cfg);
  check_scope(o.decode, /*cache_chosen=*/true);
}

flashdllm::GenerateOptions DecodeArgs::options(bool one_mode) const {
  flashdllm::GenerateOptions o = go;
  flashdllm::DecodeSettings& d = o.decode;
  flashdllm::SamplingParams& sp = o.sampling;
  d.cache = flashdllm::parse_cache_mode(cache, "--cache");
  d.remasking = flashdllm::parse_remasking(remasking, "--remasking");
  d.sampler = flashdllm::parse_sampler(sampler, "--sampler");
  d.dream_alg = flashdllm::parse_dream_alg(alg, "--alg");
  d.verify_rule = flashdllm::parse_verify_rule(verify_rule, "--verify-rule");
  d.verify_kept = flashdllm::parse_verify_kept(verify_kept, "--verify-kept");
  if (!preset.empty()) {
    const flashdllm::FlashPreset p = flashdllm::flash_preset(preset);
    if (!given("--cache")) d.cache = flashdllm::CacheMode::kFlash;
    if (!given("--gen-length")) sp.gen_length = p.gen_length;
    if (!given("--block-length")) d.block_length = p.block_length;
    if (!given("--track-num")) d.track_num = p.track_num;
    if (!given("--mask-num")) d.mask_num = p.mask_num;
    if (!given("--threshold")) sp.threshold = p.threshold;
    if (!given("--gamma") && d.verify) d.gamma = p.gamma;
  }
  if (given("--threshold")) sp.threshold = threshold;  // params.h checks (0, 1]
  // Options of one mode given to another are refused rather than silently ignored; where neither
  // --cache nor --preset chose the mode, a shifted-logit model may still take cache none
  // (fit_to_model checks again then).
  if (one_mode) check_scope(d, given("--cache") || !preset.empty());
  if (one_mode && !d.verify)
    for (const char* f : {"--gamma", "--verify-rule", "--max-candidates", "--verify-kept", "--forced-acceptance"})
      if (given(f)) throw Error(ErrorCode::kInvalidArgument, fmt::format("{} applies to --verify only", f));
  if (given("--eot-id")) {
    if (eot_id < 0 || eot_id > INT32_MAX)
      throw Error(ErrorCode::kInvalidArgument, fmt::format("--eot-id must be a token id >= 0, got {}", eot_id));
    d.eot_token_id = static_cast<int32_t>(eot_id);
  }
  if (!forced.empty()) {
    std::stringstream ss(forced);
    for (std::string item; std::getline(ss, item, ',');) {
      try {
        size_t used = 0;
        d.forced_schedule.push_back(std::stoll(item, &used));
        if (used != item.size()) throw std::invalid_argument(item);
      } catch (...) {
        throw Error(ErrorCode::kInvalidArgument, fmt::format("--forced-schedule: '{}' is not a count", item));
      }
    }
  }
  if (importance != "qk" && importance != "prob")
    throw Error(ErrorCode::kInvalidArgument, fmt::format("--importance must be qk or prob, got '{}'", importance));
  d.importance_probability_mass = importance == "prob";
  return o;
}

void add_decode_options(CLI::App* app, DecodeArgs& a) {
  auto& d = a.go.decode;
  auto& sp = a.go.sampling;
  a.app = app;
  app->add_option("--cache", a.cache,
                  "flash (Flash-Cache, the default) | none (LLaDA sampler, full recompute) | prefix | dual (Fast-dLLM)")
      ->capture_default_str();
  if (!a.serving)
    app->add_option("--gen-length", sp.gen_length, "tokens to generate (canvas length)")->capture_default_str();
  app->add_option("--block-length", d.block_length,
                  "semi-autoregressive block (none/prefix/dual) or masked window (flash); 0 = 32, or 16 for flash")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  if (!a.serving)
    app->add_option(
           "--steps", sp.steps,
           "none/prefix/dual quota decoding: forward passes (default: 128, at most gen_length, a multiple of the "
           "block count; Dream's sampler: gen_length)")
        ->check(int_in_range(1, std::numeric_limits<int32_t>::max()));
  app->add_option("--remasking", a.remasking, "none/prefix/dual: low_confidence | random")->capture_default_str();
  if (!a.serving)
    app->add_option("--temperature", sp.temperature, "Gumbel-max sampling temperature (0 = greedy)")->capture_default_str();
  app->add_option("--cfg-scale", d.cfg_scale, "none: classifier-free guidance scale (0 = off)")->capture_default_str();
  if (!a.serving)
    app->add_option("--threshold", a.threshold,
                    "confidence-threshold decoding: commit every masked position with confidence >= this (flash: "
                    "default 0.9; none/prefix/dual: default off = quota decoding)");
  if (!a.serving) app->add_option("--seed", sp.seed, "noise seed")->check(kUint64)->capture_default_str();
  app->add_flag("--logits-eos-inf", d.logits_eos_inf, "none: never generate EOS");
  app->add_flag("--confidence-eos-eot-inf", d.confidence_eos_eot_inf,
                "none: EOS and EOT get confidence 0, so they are committed last in their block (at any temperature; "
                "--reference-quirks: upstream's ordering, where at temperature > 0 only EOT does)");
  app->add_flag("--confidence-f32", d.confidence_f32, "none/prefix/dual: float32 softmax confidences (default float64)");
  app->add_option("--sampler", a.sampler,
                  "none: auto (the model family's own) | llada (semi-autoregressive blocks) | dream (Dream's "
                  "whole-canvas schedule)")
      ->capture_default_str();
  app->add_option("--alg", a.alg, "none, Dream's sampler: entropy | maskgit_plus | topk_margin | origin")
      ->capture_default_str();
  app->add_option("--alg-temp", d.alg_temp,
                  "none, Dream's sampler: > 0 draws the committed positions from softmax(confidence / alg-temp)")
      ->capture_default_str();
  app->add_option("--timestep-eps", d.timestep_eps, "none, Dream's sampler: the schedule's last timestep eps")
      ->capture_default_str();
  if (!a.serving) {
    app->add_option("--top-p", sp.top_p, "Dream's sampler: nucleus filtering of the token distribution (1 = off)")
        ->capture_default_str();
    app->add_option("--top-k", sp.top_k, "Dream's sampler: keep the top-k logits (0 = off)")
        ->check(kNonNegativeInt)
        ->capture_default_str();
  }
  app->add_option("--eot-id", a.eot_id, "end-of-turn token id for checkpoints without a tokenizer");
  app->add_option("--eos-pad-tile", d.eos_pad_tile,
                  "none: Flash-dLLM row layout, EOS padding after the canvas to the next multiple of this tile (e.g. 128)")
      ->capture_default_str();
  if (!a.serving)
    app->add_option("--preset", a.preset, "Flash-Cache presets of the paper's Table 3: gsm8k | math | humaneval | mbpp");
  app->add_option("--track-num", d.track_num, "flash: tracked budget = track-num x block-length; < 0 = full recompute")
      ->capture_default_str();
  app->add_option("--mask-num", d.mask_num, "flash: masked window = mask-num x block-length queried positions")
      ->capture_default_str();
  app->add_option("--slots", d.n_slots,
                  a.serving ? "slots of the pool: concurrent requests, every mode (0 = as many as fit)"
                            : "flash: concurrent slots (continuous batching; 0 = as many as fit)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  app->add_option("--max-forward-rows", d.max_forward_rows,
                  "flash: query rows per forward call; admission prefills above it run in slot groups (0 = no bound)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  app->add_option("--query-tile-rows", d.query_tile_rows,
                  "flash: query rows per attention tile of a tracked set (0 = the whole set; the block length = "
                  "the released code's tiling; same results)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  app->add_option("--tokens-per-step", d.tokens_per_step, "flash: greedy fixed-count decoding (0 = threshold rule)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  app->add_option("--forced-schedule", a.forced,
                  "flash benchmarks: tokens committed per iteration regardless of confidence, e.g. 4 or 8,4,2");
  app->add_flag("--reference-quirks", d.reference_quirks,
                "reproduce the released codes' bugs (flash: EOS padding and output slice; none: the "
                "confidence-eos-eot-inf ordering) for parity runs");
  app->add_option("--importance", a.importance, "flash: a_i from raw q·k (qk, released code) or attention mass (prob, paper)")
      ->capture_default_str();
  app->add_flag("--verify", d.verify, "flash: Flash-Verify (a verify pass per iteration checks further drafts)");
  app->add_option("--gamma", d.gamma,
                  a.serving ? "flash verify: acceptance threshold"
                            : "flash verify: acceptance threshold (a --preset sets its task's value)")
      ->capture_default_str();
  app->add_option("--verify-rule", a.verify_rule,
                  "flash verify: product (released code: running product of p(draft) >= gamma) | paper (argmax == draft "
                  "and confidence >= gamma)")
      ->capture_default_str();
  app->add_option("--max-candidates", d.max_candidates,
                  "flash verify: drafts checked per iteration (<= block length; 0 = block length / 2)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
  app->add_option("--verify-kept", a.verify_kept,
                  "flash verify: decoded positions recomputed in each verify tile: released (2 x block length rows "
                  "per tile) | commits (only this iteration's commits: fewer rows, a faster verify pass)")
      ->capture_default_str();
  app->add_option("--forced-acceptance", d.forced_acceptance,
                  "flash verify benchmarks: accept up to this many drafts per iteration regardless of gamma (0 = off)")
      ->check(kNonNegativeInt)
      ->capture_default_str();
}


}  // namespace flashdllm::cli
