// The decoding parameters' one owner: names, defaults, presets, validation, text and JSON forms
// (include/flashdllm/params.h).
#include "flashdllm/params.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "core/text.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

std::string number_text(double v) { return nlohmann::json(v).dump(); }

// Bounds that keep every product of sizes far from overflow (the real models are far below them).
constexpr int64_t kMaxCount = int64_t{1} << 24;

}  // namespace

const char* cache_mode_name(CacheMode mode) noexcept {
  switch (mode) {
    case CacheMode::kNone: return "none";
    case CacheMode::kPrefix: return "prefix";
    case CacheMode::kDual: return "dual";
    case CacheMode::kFlash: return "flash";
  }
  return "?";
}

CacheMode parse_cache_mode(std::string_view name, std::string_view what) {
  for (CacheMode m : {CacheMode::kNone, CacheMode::kPrefix, CacheMode::kDual, CacheMode::kFlash})
    if (name == cache_mode_name(m)) return m;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{} must be none, prefix, dual or flash, got '{}'", what, name);
}

const char* remasking_name(Remasking r) noexcept { return r == Remasking::kRandom ? "random" : "low_confidence"; }

Remasking parse_remasking(std::string_view name, std::string_view what) {
  if (name == "low_confidence") return Remasking::kLowConfidence;
  if (name == "random") return Remasking::kRandom;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{} must be 'low_confidence' or 'random', got '{}'", what, name);
}

const char* verify_rule_name(VerifyRule r) noexcept { return r == VerifyRule::kPaper ? "paper" : "product"; }

VerifyRule parse_verify_rule(std::string_view name, std::string_view what) {
  if (name == "product") return VerifyRule::kProduct;
  if (name == "paper") return VerifyRule::kPaper;
  FDLLM_FAIL(ErrorCode::kInvalidArgument,
             "{}: '{}' is not product or paper (product: the released code's running product of p(draft) >= gamma; "
             "paper: argmax == draft and confidence >= gamma)",
             what, name);
}

const char* verify_kept_name(VerifyKept k) noexcept { return k == VerifyKept::kCommits ? "commits" : "released"; }

VerifyKept parse_verify_kept(std::string_view name, std::string_view what) {
  if (name == "released") return VerifyKept::kReleased;
  if (name == "commits") return VerifyKept::kCommits;
  FDLLM_FAIL(ErrorCode::kInvalidArgument,
             "{}: '{}' is not released or commits (released: 2·block_length rows per verify tile, the newest decoded "
             "positions kept; commits: only this iteration's commits kept)",
             what, name);
}

const char* sampler_name(Sampler s) noexcept {
  switch (s) {
    case Sampler::kAuto: return "auto";
    case Sampler::kLlada: return "llada";
    case Sampler::kDream: return "dream";
  }
  return "?";
}

Sampler parse_sampler(std::string_view name, std::string_view what) {
  for (Sampler s : {Sampler::kAuto, Sampler::kLlada, Sampler::kDream})
    if (name == sampler_name(s)) return s;
  FDLLM_FAIL(ErrorCode::kInvalidArgument,
             "{} must be auto (the model family's own), llada (LLaDA's semi-autoregressive blocks) or dream "
             "(Dream's whole-canvas schedule), got '{}'",
             what, name);
}

const char* dream_alg_name(DreamAlg a) noexcept {
  switch (a) {
    case DreamAlg::kOrigin: return "origin";
    case DreamAlg::kMaskgitPlus: return "maskgit_plus";
    case DreamAlg::kTopkMargin: return "topk_margin";
    case DreamAlg::kEntropy: return "entropy";
  }
  return "?";
}

DreamAlg parse_dream_alg(std::string_view name, std::string_view what) {
  for (DreamAlg a : {DreamAlg::kOrigin, DreamAlg::kMaskgitPlus, DreamAlg::kTopkMargin, DreamAlg::kEntropy})
    if (name == dream_alg_name(a)) return a;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{} must be origin, maskgit_plus, topk_margin or entropy, got '{}'", what,
             name);
}

Sampler effective_sampler(const DecodeSettings& d, const ModelConfig& cfg) noexcept {
  if (d.sampler != Sampler::kAuto) return d.sampler;
  return cfg.family == ModelFamily::kDream ? Sampler::kDream : Sampler::kLlada;
}

int64_t DecodeSettings::effective_block_length() const noexcept {
  return block_length > 0 ? block_length : (cache == CacheMode::kFlash ? 16 : 32);
}

int64_t default_steps(int64_t gen_length, int64_t block_length) noexcept {
  if (gen_length <= 0 || block_length <= 0) return 1;
  const int64_t blocks = std::max<int64_t>(1, gen_length / block_length);
  const int64_t s = std::min<int64_t>(128, gen_length) / blocks * blocks;
  return std::max(s, blocks);
}

int64_t effective_steps(const DecodeSettings& d, int64_t steps, int64_t canvas) noexcept {
  if (steps > 0) return steps;
  if (d.cache == CacheMode::kNone && d.sampler == Sampler::kDream) return canvas;
  return default_steps(canvas, d.effective_block_length());
}

std::optional<double> effective_threshold(const DecodeSettings& d, const SamplingParams& s) noexcept {
  if (s.threshold) return s.threshold;
  if (d.cache == CacheMode::kFlash && d.tokens_per_step == 0 && d.forced_schedule.empty()) return 0.9;
  return std::nullopt;
}

FlashPreset flash_preset(std::string_view task) {
  FlashPreset p;
  if (task == "gsm8k" || task == "math" || task == "humaneval") {
    p.gamma = task == "gsm8k" ? 0.8 : 0.85;
  } else if (task == "mbpp") {
    p.track_num = 3;
  } else {
    FDLLM_FAIL(ErrorCode::kInvalidArgument,
               "preset '{}' is unknown (the paper's Table 3 settings: gsm8k, math, humaneval, mbpp)", task);
  }
  return p;
}

// ---------------------------------------------------------------------------------------- validation

namespace {


/// The sampler of `d` where it is known: kAuto stays kAuto without a model.
Sampler known_sampler(const DecodeSettings& d, const ModelConfig* cfg) noexcept {
  return cfg ? effective_sampler(d, *cfg) : d.sampler;
}

/// The sampler choice and Dream's options: Dream's options need sampler dream, LLaDA's block
/// options need sampler llada (checked where the sampler is known).
void check_sampler_settings(const DecodeSettings& d, const ModelConfig* cfg) {
  FDLLM_CHECK_PARAM(d.sampler == Sampler::kAuto || d.sampler == Sampler::kLlada || d.sampler == Sampler::kDream,
                    "sampler", "unknown sampler {}", static_cast<int>(d.sampler));
  FDLLM_CHECK_PARAM(d.dream_alg == DreamAlg::kOrigin || d.dream_alg == DreamAlg::kMaskgitPlus ||
                        d.dream_alg == DreamAlg::kTopkMargin || d.dream_alg == DreamAlg::kEntropy,
                    "alg", "unknown alg {}", static_cast<int>(d.dream_alg));
  FDLLM_CHECK_PARAM(d.sampler == Sampler::kAuto || d.cache == CacheMode::kNone, "sampler",
                    "sampler {} applies to cache none (the full-recompute samplers); cache is {}",
                    sampler_name(d.sampler), cache_mode_name(d.cache));
  FDLLM_CHECK_PARAM(std::isfinite(d.alg_temp) && d.alg_temp >= 0.0 && d.alg_temp <= 1e6, "alg_temp",
                    "alg_temp must be in [0, 1e6] (0 = the most confident positions), got {}", d.alg_temp);
  FDLLM_CHECK_PARAM(std::isfinite(d.timestep_eps) && d.timestep_eps > 0.0 && d.timestep_eps < 1.0, "timestep_eps",
                    "timestep_eps must be in (0, 1) (Dream's eps, the schedule's last timestep), got {}",
                    d.timestep_eps);
  const Sampler sampler = known_sampler(d, cfg);
  if (sampler == Sampler::kAuto) return;  // no model yet: the engine checks again with one
  const bool dream = d.cache == CacheMode::kNone && sampler == Sampler::kDream;
  if (!dream) {
    const DecodeSettings defaults;
    FDLLM_CHECK_PARAM(d.dream_alg == defaults.dream_alg && d.alg_temp == 0.0 && d.timestep_eps == defaults.timestep_eps,
                      d.dream_alg != defaults.dream_alg ? "alg"
                      : d.alg_temp != 0.0               ? "alg_temp"
                                                        : "timestep_eps",
                      "alg / alg_temp / timestep_eps apply to Dream's sampler only (cache none with sampler dream; "
                      "cache is {}, sampler {})",
                      cache_mode_name(d.cache), sampler_name(sampler));
    return;
  }
  // Dream's sampler decodes the whole canvas: none of the block sampler's options apply.
  const char* bad = d.block_length != 0                        ? "block_length"
                    : d.remasking != Remasking::kLowConfidence ? "remasking"
                    : d.cfg_scale != 0.0                       ? "cfg_scale"
                    : d.logits_eos_inf                         ? "logits_eos_inf"
                    : d.confidence_eos_eot_inf                 ? "confidence_eos_eot_inf"
                    : d.confidence_f32                         ? "confidence_f32"
                    : d.eos_pad_tile != 0                      ? "eos_pad_tile"
                                                               : nullptr;
  FDLLM_CHECK_PARAM(bad == nullptr, bad ? bad : "",
                    "{} applies to LLaDA's block sampler; Dream's sampler (sampler dream) decodes the whole canvas "
                    "with --alg / --alg-temp / --top-p / --top-k",
                    bad ? bad : "");
}

void check_decode(const DecodeSettings& d, const ModelConfig* cfg) {
  FDLLM_CHECK_PARAM(d.cache == CacheMode::kNone || d.cache == CacheMode::kPrefix || d.cache == CacheMode::kDual ||
                        d.cache == CacheMode::kFlash,
                    "cache", "cache mode must be none, prefix, dual or flash, got {}", static_cast<int>(d.cache));
  FDLLM_CHECK_PARAM(d.remasking == Remasking::kLowConfidence || d.remasking == Remasking::kRandom, "remasking",
                    "unknown remasking {}", static_cast<int>(d.remasking));
  FDLLM_CHECK_PARAM(d.verify_rule == VerifyRule::kProduct || d.verify_rule == VerifyRule::kPaper, "verify_rule",
                    "unknown verify_rule {}", static_cast<int>(d.verify_rule));
  FDLLM_CHECK_PARAM(d.verify_kept == VerifyKept::kReleased || d.verify_kept == VerifyKept::kCommits, "verify_kept",
                    "unknown verify_kept {}", static_cast<int>(d.verify_kept));
  const char* mode = cache_mode_name(d.cache);
  check_sampler_settings(d, cfg);
  FDLLM_CHECK_PARAM(d.block_length >= 0 && d.block_length <= kMaxCount, "block_length",
                    "block_length must be in [0, {}] (0 = the mode's "
                    "default), got {}",
                    kMaxCount, d.block_length);
  if (cfg)
    FDLLM_CHECK_PARAM(d.effective_block_length() < cfg->max_sequence_length, "block_length",
                      "block_length {} does not fit the model's max_sequence_length {}", d.effective_block_length(),
                      cfg->max_sequence_length);
  FDLLM_CHECK_PARAM(d.n_slots >= 0 && d.n_slots <= 65536, "n_slots",
                    "slots (n_slots) must be in [0, 65536] (0 = as many as fit), got {}", d.n_slots);
  if (d.eot_token_id)
    FDLLM_CHECK_PARAM(*d.eot_token_id >= 0 && (!cfg || *d.eot_token_id < cfg->embedding_size), "eot_token_id",
                      "eot_id {} is not a token id of this model ([0, {}))", *d.eot_token_id,
                      cfg ? cfg->embedding_size : 0);
  // Options of the LLaDA sampler only.
  FDLLM_CHECK_PARAM(std::isfinite(d.cfg_scale) && d.cfg_scale >= 0.0, "cfg_scale", "cfg_scale must be >= 0, got {}",
                    d.cfg_scale);
  if (d.cache != CacheMode::kNone) {
    FDLLM_CHECK_PARAM(d.cfg_scale == 0.0, "cfg_scale",
                      "cfg_scale (classifier-free guidance) applies to cache none only (cache is {})", mode);
    FDLLM_CHECK_PARAM(!d.logits_eos_inf, "logits_eos_inf", "logits_eos_inf applies to cache none only (cache is {})",
                      mode);
    FDLLM_CHECK_PARAM(!d.confidence_eos_eot_inf, "confidence_eos_eot_inf",
                      "confidence_eos_eot_inf applies to cache none only (cache is {})", mode);
    FDLLM_CHECK_PARAM(d.eos_pad_tile == 0, "eos_pad_tile", "eos_pad_tile applies to cache none only (cache is {})",
                      mode);
  }
  FDLLM_CHECK_PARAM(d.eos_pad_tile >= 0 && d.eos_pad_tile <= (cfg ? cfg->max_sequence_length : kMaxCount),
                    "eos_pad_tile", "eos_pad_tile must be in [0, max_sequence_length = {}], got {}",
                    cfg ? cfg->max_sequence_length : kMaxCount, d.eos_pad_tile);
  if (d.cache == CacheMode::kFlash) {
    FDLLM_CHECK_PARAM(d.remasking == Remasking::kLowConfidence, "remasking",
                      "remasking random applies to the block samplers (cache none/prefix/dual); Flash-Cache commits by "
                      "confidence");
    FDLLM_CHECK_PARAM(d.confidence_f32 == false, "confidence_f32",
                      "confidence_f32 applies to cache none/prefix/dual (Flash-Cache confidences are float64, §D.7)");
    FDLLM_CHECK_PARAM(std::abs(d.track_num) <= kMaxCount, "track_num", "track_num {} is implausibly large",
                      d.track_num);
    FDLLM_CHECK_PARAM(d.mask_num >= 1 && d.mask_num <= kMaxCount, "mask_num",
                      "mask_num must be >= 1 (β_m = mask_num·block_length includes the window), got {}", d.mask_num);
    FDLLM_CHECK_PARAM(d.tokens_per_step >= 0 && d.tokens_per_step <= kMaxCount, "tokens_per_step",
                      "tokens_per_step must be >= 0 (0 = the threshold rule), got {}", d.tokens_per_step);
    for (size_t i = 0; i < d.forced_schedule.size(); ++i)
      FDLLM_CHECK_PARAM(d.forced_schedule[i] >= 1 && d.forced_schedule[i] <= kMaxCount, "forced_schedule",
                        "forced_schedule[{}] = {} must be in [1, {}]", i, d.forced_schedule[i], kMaxCount);
    FDLLM_CHECK_PARAM(!(d.tokens_per_step > 0 && !d.forced_schedule.empty()), "forced_schedule",
                      "tokens_per_step and forced_schedule exclude each other (both fix the commits per iteration)");
    FDLLM_CHECK_PARAM(d.max_forward_rows >= 0, "max_forward_rows",
                      "max_forward_rows must be >= 0 (0 = no bound), got {}", d.max_forward_rows);
    FDLLM_CHECK_PARAM(d.query_tile_rows >= 0 && d.query_tile_rows <= kMaxCount, "query_tile_rows",
                      "query_tile_rows must be in [0, {}] (0 = the whole tracked set as one tile), got {}", kMaxCount,
                      d.query_tile_rows);
  } else {
    FDLLM_CHECK_PARAM(!d.verify, "verify", "verify (Flash-Verify) needs cache flash, cache is {}", mode);
    FDLLM_CHECK_PARAM(d.tokens_per_step == 0 && d.forced_schedule.empty() && !d.importance_probability_mass,
                      d.tokens_per_step != 0       ? "tokens_per_step"
                      : !d.forced_schedule.empty() ? "forced_schedule"
                                                   : "importance_probability_mass",
                      "tokens_per_step / forced_schedule / importance apply to cache flash only (cache is {})", mode);
    FDLLM_CHECK_PARAM(d.track_num == 4 && d.mask_num == 4, d.track_num != 4 ? "track_num" : "mask_num",
                      "track_num / mask_num apply to cache flash only (cache is {})", mode);
  }
  if (d.verify) {
    FDLLM_CHECK_PARAM(std::isfinite(d.gamma) && d.gamma > 0.0 && d.gamma <= 1.0, "gamma",
                      "gamma must be in (0, 1], got {}", d.gamma);
    FDLLM_CHECK_PARAM(d.max_candidates >= 0 && d.max_candidates <= d.effective_block_length(), "max_candidates",
                      "max_candidates must be in [0, block_length = {}] (0 = block_length / 2), got {}",
                      d.effective_block_length(), d.max_candidates);
    FDLLM_CHECK_PARAM(d.forced_acceptance >= 0 && d.forced_acceptance <= kMaxCount, "forced_acceptance",
                      "forced_acceptance must be >= 0, got {}", d.forced_acceptance);
  } else {
    FDLLM_CHECK_PARAM(d.max_candidates == 0 && d.forced_acceptance == 0 && d.verify_kept == VerifyKept::kReleased,
                      d.max_candidates != 0      ? "max_candidates"
                      : d.forced_acceptance != 0 ? "forced_acceptance"
                                                 : "verify_kept",
                      "max_candidates / verify_kept / forced_acceptance apply to verify (Flash-Verify) only");
  }
}

void check_sampling(const SamplingParams& s, const DecodeSettings& d, const ModelConfig* cfg, bool exact_blocks) {
  validate_fields(s);
  const char* mode = cache_mode_name(d.cache);
  const int64_t G = s.gen_length, B = d.effective_block_length();
  const int64_t max_len = cfg ? cfg->max_sequence_length : kMaxCount;
  FDLLM_CHECK_PARAM(G < max_len, "gen_length",
                    "gen_length must be in [1, max_sequence_length = {}) of this model, got {}", max_len, G);
  const Sampler sampler = known_sampler(d, cfg);
  const bool dream = d.cache == CacheMode::kNone && sampler == Sampler::kDream;
  if (sampler != Sampler::kAuto && !dream)
    FDLLM_CHECK_PARAM(s.top_p == 1.0 && s.top_k == 0, s.top_p != 1.0 ? "top_p" : "top_k",
                      "top_p / top_k apply to Dream's sampler only (cache none with sampler dream; cache is {}, "
                      "sampler {})",
                      mode, sampler_name(sampler));
  if (dream) {
    FDLLM_CHECK_PARAM(!s.threshold, "threshold",
                      "Dream's sampler commits a scheduled number of tokens per step (steps); it has no threshold");
    FDLLM_CHECK_PARAM(s.steps <= G, "steps", "steps must be in [1, gen_length = {}] or 0 (= gen_length), got {}", G,
                      s.steps);
    return;
  }
  // Cache none with sampler auto before a model is known: the family decides between LLaDA's blocks
  // and Dream's whole canvas, so the block checks wait for the model (what both refuse is checked).
  const bool blocks_unknown = d.cache == CacheMode::kNone && sampler == Sampler::kAuto;
  if (d.cache == CacheMode::kFlash) {
    FDLLM_CHECK_PARAM(s.steps == 0, "steps",
                      "steps applies to quota decoding (cache none/prefix/dual without a threshold); "
                      "Flash-Cache iterates until the canvas is decoded");
    FDLLM_CHECK_PARAM(!(s.threshold && (d.tokens_per_step > 0 || !d.forced_schedule.empty())), "threshold",
                      "threshold and {} exclude each other (both decide the commits per iteration)",
                      d.tokens_per_step > 0 ? "tokens_per_step" : "forced_schedule");
    // A whole batch's setting (generate, eval) larger than its canvas would be cut to it silently;
    // a server's requests differ in max_tokens, so there a count above a request's canvas means
    // "the whole canvas in one step" (docs/serving.md).
    if (exact_blocks)
      FDLLM_CHECK_PARAM(d.tokens_per_step <= G, "tokens_per_step",
                        "tokens_per_step {} is more than gen_length {} (a step cannot commit more tokens than the "
                        "canvas holds): pass at most {}",
                        d.tokens_per_step, G, G);
    return;
  }
  const int64_t canvas = exact_blocks ? G : (G + B - 1) / B * B;
  if (exact_blocks && !blocks_unknown)
    FDLLM_CHECK_PARAM(G % B == 0, "gen_length",
                      "gen_length {} is not a multiple of block_length {}{}: pass a block length that divides {} "
                      "(--block-length) or a gen_length that is a multiple of {}",
                      G, B, d.block_length == 0 ? fmt::format(" (the default block for cache {})", mode) : "", G, B);
  FDLLM_CHECK_PARAM(canvas < max_len, "gen_length",
                    "gen_length {} rounded up to the block length {} is {}, beyond the model's "
                    "max_sequence_length {}",
                    G, B, canvas, max_len);
  if (s.threshold) {
    FDLLM_CHECK_PARAM(s.steps == 0, "steps",
                      "steps applies to quota decoding only; with a threshold every block runs until it "
                      "is full (drop steps or the threshold)");
  } else if (s.steps > 0) {
    const int64_t blocks = canvas / B;
    FDLLM_CHECK_PARAM(s.steps <= canvas, "steps",
                      "steps must be in [1, gen_length = {}] (a step commits at least one token), "
                      "got {}",
                      canvas, s.steps);
    FDLLM_CHECK_PARAM(blocks_unknown || s.steps % blocks == 0, "steps",
                      "steps ({}) must be divisible by the number of blocks gen_length / "
                      "block_length = {} (LLaDA generate.py asserts this)",
                      s.steps, blocks);
  }
}

}  // namespace

void validate_fields(const SamplingParams& s) {
  const int64_t G = s.gen_length;
  // The upper bound is the model's (validate: below max_sequence_length).
  FDLLM_CHECK_PARAM(G >= 1, "gen_length", "gen_length must be positive (in [1, max_sequence_length)), got {}", G);
  FDLLM_CHECK_PARAM(std::isfinite(s.temperature) && s.temperature >= 0.0 && s.temperature <= 1e6, "temperature",
                    "temperature must be in [0, 1e6], got {}", s.temperature);
  if (s.threshold)
    FDLLM_CHECK_PARAM(std::isfinite(*s.threshold) && *s.threshold > 0.0 && *s.threshold <= 1.0, "threshold",
                      "threshold must be in (0, 1], got {}", *s.threshold);
  FDLLM_CHECK_PARAM(std::isfinite(s.top_p) && s.top_p > 0.0 && s.top_p <= 1.0, "top_p",
                    "top_p must be in (0, 1] (1 = off), got {}", s.top_p);
  FDLLM_CHECK_PARAM(s.top_k >= 0 && s.top_k <= kMaxCount, "top_k", "top_k must be in [0, {}] (0 = off), got {}",
                    kMaxCount, s.top_k);
  FDLLM_CHECK_PARAM(s.steps >= 0, "steps", "steps must be in [1, gen_length = {}] or 0 (the default), got {}", G,
                    s.steps);
  FDLLM_CHECK_PARAM(s.stop.size() <= 16, "stop", "at most 16 stop strings are supported, got {}", s.stop.size());
  FDLLM_CHECK_PARAM(s.logprobs >= -1 && s.logprobs <= SamplingParams::kMaxTopLogprobs, "logprobs",
                    "logprobs must be in [0, {}] top alternatives, or -1 for none, got {}",
                    SamplingParams::kMaxTopLogprobs, s.logprobs);
  for (size_t i = 0; i < s.stop.size(); ++i)
    FDLLM_CHECK_PARAM(!s.stop[i].empty() && s.stop[i].size() <= 1024, "stop",
                      "stop[{}] must be a non-empty string of at most 1024 bytes", i);
}

void validate(const DecodeSettings& d, const ModelConfig& cfg) { check_decode(d, &cfg); }

void validate(const SamplingParams& s, const DecodeSettings& d, const ModelConfig& cfg, bool exact_blocks) {
  check_sampling(s, d, &cfg, exact_blocks);
}

void validate_without_model(const GenerateOptions& o) {
  check_decode(o.decode, nullptr);
  check_sampling(o.sampling, o.decode, nullptr, /*exact_blocks=*/true);
}

// ---------------------------------------------------------------------------------------- text form

const std::vector<std::string>& option_keys() {
  static const std::vector<std::string> keys = {
      "threshold", "gamma",       "track_num",      "mask_num",    "block_length",    "gen_length",
      "steps",     "verify_rule", "max_candidates", "verify_kept", "tokens_per_step", "temperature",
      "seed",      "top_p",       "top_k",          "alg",         "alg_temp"};
  return keys;
}

std::string canonical_option_key(std::string_view key) {
  std::string k = trim(key);
  std::replace(k.begin(), k.end(), '-', '_');
  const auto& keys = option_keys();
  if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
    std::string list;
    for (const auto& x : keys) list += (list.empty() ? "" : ", ") + x;
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "unknown option key '{}' (keys: {})", key, list);
  }
  return k;
}

std::string option_text(const GenerateOptions& o, std::string_view key) {
  const DecodeSettings& d = o.decode;
  const SamplingParams& s = o.sampling;
  if (key == "threshold") {
    const auto t = effective_threshold(d, s);
    return t ? number_text(*t) : std::string("off");
  }
  if (key == "gamma") return number_text(d.gamma);
  if (key == "track_num") return std::to_string(d.track_num);
  if (key == "mask_num") return std::to_string(d.mask_num);
  if (key == "block_length") return std::to_string(d.effective_block_length());
  if (key == "gen_length") return std::to_string(s.gen_length);
  if (key == "steps") return std::to_string(effective_steps(d, s.steps, s.gen_length));
  if (key == "top_p") return number_text(s.top_p);
  if (key == "top_k") return std::to_string(s.top_k);
  if (key == "alg") return dream_alg_name(d.dream_alg);
  if (key == "alg_temp") return number_text(d.alg_temp);
  if (key == "verify_rule") return verify_rule_name(d.verify_rule);
  if (key == "max_candidates") return std::to_string(d.max_candidates);
  if (key == "verify_kept") return verify_kept_name(d.verify_kept);
  if (key == "tokens_per_step") return std::to_string(d.tokens_per_step);
  if (key == "temperature") return number_text(s.temperature);
  if (key == "seed") return std::to_string(s.seed);
  return "";
}

void set_option(GenerateOptions& o, std::string_view key, std::string_view value) {
  const std::string k = canonical_option_key(key);
  const std::string v = trim(value);
  auto real = [&](double lo, double hi, bool lo_open) {
    const auto x = parse_double(v);
    FDLLM_CHECK_PARAM(x && (lo_open ? *x > lo : *x >= lo) && *x <= hi, k.c_str(),
                      "option {}: '{}' is not a number in {}{}, {}]", k, v, lo_open ? "(" : "[", lo, hi);
    return *x;
  };
  auto count = [&](int64_t lo) {
    const auto i = parse_int(v);
    FDLLM_CHECK_PARAM(i && *i >= lo && *i <= kMaxCount, k.c_str(),
                      "option {}: '{}' is not an integer >= {} (at most {})", k, v, lo, kMaxCount);
    return *i;
  };
  DecodeSettings& d = o.decode;
  SamplingParams& s = o.sampling;
  if (k == "threshold") {
    if (v == "off")
      s.threshold.reset();
    else
      s.threshold = real(0.0, 1.0, true);
  } else if (k == "gamma") {
    d.gamma = real(0.0, 1.0, true);
  } else if (k == "track_num") {
    const auto i = parse_int(v);
    FDLLM_CHECK_PARAM(i && std::abs(*i) <= kMaxCount, "track_num", "option track_num: '{}' is not an integer", v);
    d.track_num = *i;
  } else if (k == "mask_num") {
    d.mask_num = count(1);
  } else if (k == "block_length") {
    d.block_length = count(0);
  } else if (k == "gen_length") {
    s.gen_length = count(1);
  } else if (k == "steps") {
    s.steps = count(1);
  } else if (k == "verify_rule") {
    d.verify_rule = parse_verify_rule(v, "option verify_rule");
  } else if (k == "max_candidates") {
    d.max_candidates = count(0);
  } else if (k == "verify_kept") {
    d.verify_kept = parse_verify_kept(v, "option verify_kept");
  } else if (k == "tokens_per_step") {
    d.tokens_per_step = count(0);
  } else if (k == "temperature") {
    s.temperature = real(0.0, 1e6, false);
  } else if (k == "seed") {
    s.seed = static_cast<uint64_t>(count(0));
  } else if (k == "top_p") {
    s.top_p = real(0.0, 1.0, true);
  } else if (k == "top_k") {
    s.top_k = count(0);
  } else if (k == "alg") {
    d.dream_alg = parse_dream_alg(v, "option alg");
  } else if (k == "alg_temp") {
    d.alg_temp = real(0.0, 1e6, false);
  }
}

// ---------------------------------------------------------------------------------------- JSON

nlohmann::ordered_json to_json(const GenerateOptions& o) {
  const DecodeSettings& d = o.decode;
  const SamplingParams& s = o.sampling;
  nlohmann::ordered_json j;
  j["cache"] = cache_mode_name(d.cache);
  j["gen_length"] = s.gen_length;
  j["block_length"] = d.effective_block_length();
  const auto threshold = effective_threshold(d, s);
  if (threshold) {
    j["decoding"] = "threshold";
    j["threshold"] = *threshold;
  } else if (d.cache == CacheMode::kFlash) {
    j["decoding"] = d.tokens_per_step > 0 ? "fixed_count" : "forced_schedule";
  } else {
    j["decoding"] = "quota";
    j["steps"] = effective_steps(d, s.steps, s.gen_length);
  }
  j["temperature"] = s.temperature;
  j["seed"] = s.seed;
  if (!s.stop.empty()) j["stop"] = s.stop;
  if (s.logprobs >= 0) j["logprobs"] = s.logprobs;
  if (d.reference_quirks) j["reference_quirks"] = true;
  if (d.cache == CacheMode::kNone) j["sampler"] = sampler_name(d.sampler);
  if (d.cache == CacheMode::kNone && d.sampler == Sampler::kDream) {
    j.erase("block_length");
    j["alg"] = dream_alg_name(d.dream_alg);
    j["alg_temp"] = d.alg_temp;
    j["timestep_eps"] = d.timestep_eps;
    j["top_p"] = s.top_p;
    j["top_k"] = s.top_k;
  } else if (d.cache != CacheMode::kFlash) {
    j["remasking"] = remasking_name(d.remasking);
    j["confidence"] = d.confidence_f32 ? "float32" : "float64";
  }
  if (d.cache == CacheMode::kNone && d.sampler != Sampler::kDream) {
    j["cfg_scale"] = d.cfg_scale;
    j["logits_eos_inf"] = d.logits_eos_inf;
    j["confidence_eos_eot_inf"] = d.confidence_eos_eot_inf;
    j["eos_pad_tile"] = d.eos_pad_tile;
  }
  if (d.eot_token_id) j["eot_id"] = *d.eot_token_id;
  if (d.cache == CacheMode::kFlash) {
    nlohmann::ordered_json f;
    f["slots"] = d.n_slots;
    f["track_num"] = d.track_num;
    f["mask_num"] = d.mask_num;
    f["tracked_budget"] = d.track_num < 0 ? nlohmann::ordered_json("full") : nlohmann::ordered_json(d.track_num * d.effective_block_length());
    f["masked_window"] = d.mask_num * d.effective_block_length();
    if (d.tokens_per_step > 0) f["tokens_per_step"] = d.tokens_per_step;
    if (!d.forced_schedule.empty()) f["forced_schedule"] = d.forced_schedule;
    f["importance"] = d.importance_probability_mass ? "prob" : "qk";
    f["max_forward_rows"] = d.max_forward_rows;
    f["query_tile_rows"] = d.query_tile_rows;
    j["flash"] = std::move(f);
    j["verify"] = d.verify;
    if (d.verify) {
      nlohmann::ordered_json v;
      v["gamma"] = d.gamma;
      v["rule"] = verify_rule_name(d.verify_rule);
      v["max_candidates"] = d.max_candidates > 0 ? d.max_candidates : d.effective_block_length() / 2;
      v["kept"] = verify_kept_name(d.verify_kept);
      if (d.forced_acceptance > 0) v["forced_acceptance"] = d.forced_acceptance;
      j["verify_options"] = std::move(v);
    }
  }
  return j;
}

}  // namespace flashdllm
