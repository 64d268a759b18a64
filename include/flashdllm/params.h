// flashdllm public API: the decoding parameters, typed, with one owner for their defaults,
// presets, validation, text form (bench sweeps, CLI) and JSON (reports).
//
// Two kinds of parameters:
//  * SamplingParams — per request: what may differ between requests that share one running batch
//    (gen_length = the OpenAI `max_tokens`, steps, threshold ε, temperature, seed, stop strings).
//  * DecodeSettings — per engine: what fixes the shape of an iteration (cache mode, block length,
//    the Flash-Cache budgets β_t / β_m, slots, Flash-Verify and γ, ...), so a running batch shares it.
// GenerateOptions bundles both for the batch API (Engine::generate, the CLI, eval, bench).
//
// Sources: LLaDA generate.py (reference-algorithms.md §B), Fast-dLLM (§C), Flash-dLLM (§D; the
// paper's defaults ε 0.9, block 16, β_t 64, β_m 64 and the scripts' presets, §D.1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashdllm {

struct ModelConfig;

/// KV-cache strategy (= decoding method family).
enum class CacheMode {
  kNone,    ///< LLaDA sampler, full recompute every step (reference §B)
  kPrefix,  ///< Fast-dLLM prefix cache (§C)
  kDual,    ///< Fast-dLLM dual cache (§C)
  kFlash,   ///< Flash-Cache (§D), optionally with Flash-Verify (§D.8)
};
/// "none" | "prefix" | "dual" | "flash".
const char* cache_mode_name(CacheMode mode) noexcept;
/// Inverse of cache_mode_name. Throws Error(kInvalidArgument) naming `what` and the value.
CacheMode parse_cache_mode(std::string_view name, std::string_view what = "cache");

/// Which masked positions a quota step commits (LLaDA `remasking`, §B).
enum class Remasking { kLowConfidence, kRandom };
const char* remasking_name(Remasking r) noexcept;  ///< "low_confidence" | "random"
Remasking parse_remasking(std::string_view name, std::string_view what = "remasking");

/// The full-recompute sampler of cache none: LLaDA's semi-autoregressive blocks (§B, ML-GSAI/LLaDA
/// generate.py) or Dream's whole-canvas schedule (Dream-org `generation_utils.py` `_sample`:
/// timesteps linspace(1, eps, steps + 1), k = ⌊n_masked·(1 − s/t)⌋ commits per step, docs/decisions.md).
/// Either runs on any family (the logit shift is the model's); kAuto is the family's own.
enum class Sampler { kAuto, kLlada, kDream };
const char* sampler_name(Sampler s) noexcept;  ///< "auto" | "llada" | "dream"
Sampler parse_sampler(std::string_view name, std::string_view what = "sampler");

/// The confidence by which Dream's sampler ranks the masked positions (`alg` of diffusion_generate):
/// origin commits each masked position with probability 1 − s/t (random, no confidence);
/// maskgit_plus: the probability of the chosen token; topk_margin: top-1 − top-2 probability;
/// entropy: Σ p·log(p + 1e-10) (the negative entropy).
enum class DreamAlg { kOrigin, kMaskgitPlus, kTopkMargin, kEntropy };
const char* dream_alg_name(DreamAlg a) noexcept;  ///< "origin" | "maskgit_plus" | "topk_margin" | "entropy"
DreamAlg parse_dream_alg(std::string_view name, std::string_view what = "alg");

/// Acceptance rule of Flash-Verify (§D.8, §F.1).
enum class VerifyRule {
  kProduct,  ///< released code: the longest prefix whose running product of mask-view p(draft) is >= γ
  kPaper,    ///< README/paper: accept while the mask-view argmax is the draft and its probability is >= γ
};
const char* verify_rule_name(VerifyRule r) noexcept;  ///< "product" | "paper"
VerifyRule parse_verify_rule(std::string_view name, std::string_view what = "verify_rule");

/// Which decoded positions a verify tile recomputes as "kept" query rows (§D.8, ambiguity §F.6).
/// Either way the kept rows' fresh K/V replace their cached K/V inside the tile; every other
/// position is a cached key.
enum class VerifyKept {
  /// Released code: T = 2·bm − 2·S, the newest decoded entries, so every tile has 2·bm rows
  /// (32 at block 16) whatever S is. A shifted-logit model's tile (S more source rows,
  /// flash_verify.h): T = max(k1, 2·bm − 3·S), still 2·bm rows for S <= bm / 2.
  kReleased,
  /// T = k1: only this iteration's phase-1 commits. In the default mode with track_num >= 1 they are
  /// the one set of decoded positions whose cached K/V is still of the [MASK] state (the main pass
  /// wrote it before the commit; older commits were refreshed when pinned into a main pass); with
  /// reference_quirks (only verified tokens pinned) or track_num 0 older stale positions stay cached
  /// keys. A tile has k1 + 2·S <= bm + S rows (k1 + 3·S with source rows).
  kCommits,
};
const char* verify_kept_name(VerifyKept k) noexcept;  ///< "released" | "commits"
VerifyKept parse_verify_kept(std::string_view name, std::string_view what = "verify_kept");

/// Per-request parameters.
struct SamplingParams {
  /// Canvas length G: tokens generated (OpenAI `max_tokens`). The block samplers need a multiple of
  /// the block length: the CLI refuses others, the server rounds the canvas up and cuts the answer
  /// at max_tokens.
  int64_t gen_length = 128;
  /// Quota decoding (threshold unset, cache none/prefix/dual): forward passes for the canvas; 0 =
  /// default_steps(gen_length, block_length). Refused together with a threshold or with flash.
  int64_t steps = 0;
  /// Confidence-threshold decoding ε in (0, 1]: commit every candidate with confidence >= ε, at least
  /// the most confident one. Unset: quota decoding for none/prefix/dual, 0.9 for flash (the paper).
  std::optional<double> threshold;
  double temperature = 0.0;  ///< Gumbel-max sampling temperature, >= 0 (0 = greedy argmax)
  uint64_t seed = 0;         ///< noise seed (temperature > 0, random remasking)
  /// Nucleus filtering (OpenAI / Dream `top_p`) in (0, 1]: the token distribution keeps the most
  /// probable tokens up to cumulative probability top_p (and the first one past it); 1 = off. Only
  /// Dream's sampler applies it (validate refuses it elsewhere).
  double top_p = 1.0;
  /// Keep the top_k largest logits (Dream `top_k`; ties with the k-th kept); 0 = off. Dream's sampler only.
  int64_t top_k = 0;
  /// Stop strings: the answer ends before the first occurrence of any of them in the stable text
  /// (finish_reason "stop"). Only Engine::submit honours them; Engine::generate ignores them.
  std::vector<std::string> stop;
  /// Log-probabilities of the committed tokens (OpenAI chat `logprobs` + `top_logprobs`, completions
  /// `logprobs`): -1 = none (nothing computed); k in [0, kMaxTopLogprobs] = each answer token's
  /// log-probability and its row's k most probable tokens (TokenLogprob, request.h, defines them).
  /// Costs a copy of the committing rows' logits to the host; only for requests that ask.
  int64_t logprobs = -1;
  static constexpr int64_t kMaxTopLogprobs = 20;
};

/// Per-engine decoding settings. Defaults are the method this project exists for: Flash-Cache
/// with the paper's budgets (block 16, track_num 4 -> β_t 64, mask_num 4 -> β_m 64, ε 0.9), 32
/// slots, Flash-Verify off (it does not pay on the embedded model; docs/decisions.md).
struct DecodeSettings {
  CacheMode cache = CacheMode::kFlash;
  /// Semi-autoregressive block (none/prefix/dual; gen_length % block_length == 0) or the masked
  /// window bm of Flash-Cache; 0 = the mode's default (effective_block_length()).
  int64_t block_length = 0;
  Remasking remasking = Remasking::kLowConfidence;  ///< none/prefix/dual
  double cfg_scale = 0.0;              ///< unsupervised classifier-free guidance (none only); 0 = off
  bool logits_eos_inf = false;         ///< never generate EOS (none only)
  bool confidence_eos_eot_inf = false; ///< EOS and EOT get confidence 0 (transferred last in a block; none only)
  bool confidence_f32 = false;         ///< float32 softmax confidences instead of float64 (none/prefix/dual)
  std::optional<int32_t> eot_token_id; ///< overrides the tokenizer's <|eot_id|> (tokenizer-less checkpoints)
  /// Flash-dLLM row layout for the LLaDA sampler: EOS padding after the canvas up to the next
  /// multiple of this tile (128 in Flash-dLLM), visible as context; 0 = LLaDA's layout (none only).
  int64_t eos_pad_tile = 0;
  /// Reproduce the released codes' behaviour where we fixed it: flash, the EOS-padding and
  /// output-slice bugs (§D.9, §F.11); none, confidence_eos_eot_inf's ordering (at temperature > 0
  /// only EOT loses its confidence, §B quirk).
  bool reference_quirks = false;

  // Cache none: which sampler, and Dream's options (sampler dream).
  Sampler sampler = Sampler::kAuto;
  DreamAlg dream_alg = DreamAlg::kEntropy;  ///< the Dream model card's choice (upstream's default is origin)
  /// > 0: the committed positions are drawn from softmax(confidence / alg_temp) without replacement
  /// instead of the k most confident (Dream `alg_temp`); 0 = the top k.
  double alg_temp = 0.0;
  double timestep_eps = 1e-3;  ///< Dream `eps`: the schedule's last timestep, in (0, 1)

  // Flash-Cache (cache == kFlash), §D.
  int64_t track_num = 4;   ///< tracked budget β_t = track_num · block_length; < 0 = full recompute
  int64_t mask_num = 4;    ///< masked window β_m = mask_num · block_length queried positions, >= 1
  int64_t n_slots = 32;    ///< concurrent slots (continuous batching); the server's slot pool (all modes)
  int64_t tokens_per_step = 0;           ///< > 0: greedy fixed-count decoding instead of the threshold rule
  std::vector<int64_t> forced_schedule;  ///< benchmarks: tokens committed per iteration regardless of confidence
  bool importance_probability_mass = false;  ///< a_i from attention probabilities (paper) instead of raw q·k (code)
  /// Query rows per forward call; an iteration needing more (admission prefills) runs as several
  /// calls over slot groups, with identical results and a smaller activation workspace. 0 = no bound.
  int64_t max_forward_rows = 4096;
  /// Query rows per attention tile of a slot's tracked set (its window is always one tile).
  /// 0 = the whole tracked set as one tile (default: full tensor-core tiles); block_length =
  /// the released code's tiling. Results are identical (each row sees the same keys); only the
  /// attention kernel's work items change.
  int64_t query_tile_rows = 0;

  // Flash-Verify (cache == kFlash), §D.8.
  bool verify = false;
  double gamma = 0.8;                        ///< acceptance threshold γ in (0, 1]
  VerifyRule verify_rule = VerifyRule::kProduct;
  int64_t max_candidates = 0;                ///< drafts checked per iteration (<= block_length); 0 = block_length / 2
  VerifyKept verify_kept = VerifyKept::kReleased;  ///< kept rows of a verify tile (docs/decisions.md)
  int64_t forced_acceptance = 0;             ///< benchmarks: accept up to this many drafts regardless of γ; 0 = off

  /// block_length, or the mode's default when 0: 16 for flash (the paper), 32 otherwise (LLaDA's demo).
  int64_t effective_block_length() const noexcept;
};

/// Everything one Engine::generate call needs.
struct GenerateOptions {
  DecodeSettings decode;
  SamplingParams sampling;
};

/// `d.sampler`, kAuto resolved to the family's own sampler (Dream: kDream, else kLlada).
Sampler effective_sampler(const DecodeSettings& d, const ModelConfig& cfg) noexcept;

/// The quota-mode default of `steps` for a canvas of gen_length in blocks of block_length: LLaDA's
/// demo value 128, at most gen_length (one token per step), rounded down to a multiple of the block
/// count (gen_length / block_length), at least one step per block.
int64_t default_steps(int64_t gen_length, int64_t block_length) noexcept;

/// The steps a request of `steps` (0 = the default) runs on a canvas of `canvas` positions: its own,
/// else gen_length for Dream's sampler (one token per step, as Dream's demo runs it; d.sampler must be
/// resolved, effective_sampler), else default_steps(canvas, block length).
int64_t effective_steps(const DecodeSettings& d, int64_t steps, int64_t canvas) noexcept;

/// The threshold a request decodes with: its own, else 0.9 for flash (the paper), else none (quota).
std::optional<double> effective_threshold(const DecodeSettings& d, const SamplingParams& s) noexcept;

/// One of the paper's Table 3 settings (= the scripts'): gen_length 512, block 16, ε 0.9,
/// track_num 4 (mbpp: 3), mask_num 4, and the scripts' Flash-Verify γ (gsm8k / mbpp 0.8, math /
/// humaneval 0.85; verify itself stays off).
struct FlashPreset {
  int64_t gen_length = 512, block_length = 16, track_num = 4, mask_num = 4;
  double threshold = 0.9, gamma = 0.8;
};
/// "gsm8k" | "math" | "humaneval" | "mbpp". Throws Error(kInvalidArgument) listing the presets.
FlashPreset flash_preset(std::string_view task);

/// Checks the settings against the model: every value in range and every combination meaningful
/// (nothing is silently ignored: e.g. steps with a threshold, tokens_per_step with a threshold,
/// cfg_scale outside cache none, verify options without verify, temperature with a forced
/// schedule). This is the one validation of the decoding parameters: the CLI, the server, the
/// engine and the denoisers' constructors all call it. Throws Error(kInvalidArgument) naming the
/// parameter in its message and, by its key (the member's name, e.g. "gen_length", "n_slots"), in
/// Error::field(); where a default caused the problem, the message names the flag to change.
void validate(const DecodeSettings& d, const ModelConfig& cfg);
/// The checks of a request's own fields that need neither the engine's settings nor the model:
/// gen_length >= 1, temperature in [0, 1e6], threshold in (0, 1], steps >= 0 (0 = the
/// default), at most 16 stop strings of 1 to 1024 bytes, logprobs in [-1, 20]. validate(s, d, cfg) starts with them;
/// the server's request parser calls them alone (src/server/openai.cpp). Throws Error(kInvalidArgument) whose field()
/// is the parameter's key ("gen_length", "temperature", ...).
void validate_fields(const SamplingParams& s);
/// Checks a request's parameters under `d` (validate(d) is assumed): validate_fields, then
/// gen_length below max_sequence_length, its block divisibility when `exact_blocks` (otherwise the
/// canvas is rounded up), steps and threshold against the mode. Throws as validate.
void validate(const SamplingParams& s, const DecodeSettings& d, const ModelConfig& cfg, bool exact_blocks = true);
inline void validate(const GenerateOptions& o, const ModelConfig& cfg) {
  validate(o.decode, cfg);
  validate(o.sampling, o.decode, cfg);
}
/// validate(o, cfg) without the model's bounds (max_sequence_length, vocabulary): for settings
/// checked before a model is loaded (bench grids).
void validate_without_model(const GenerateOptions& o);

/// The option keys that option_text / set_option know (sweeps, grid files): threshold, gamma,
/// track_num, mask_num, block_length, gen_length, steps, verify_rule, max_candidates, verify_kept,
/// tokens_per_step, temperature, seed, top_p, top_k, alg, alg_temp.
const std::vector<std::string>& option_keys();
/// The canonical spelling of an option key ('-' accepted for '_'). Throws Error(kInvalidArgument)
/// listing the keys for an unknown key.
std::string canonical_option_key(std::string_view key);
/// The effective value of `key` as text ("off" for no threshold in quota mode; flash's 0.9 when
/// unset; the mode's block length when 0).
std::string option_text(const GenerateOptions& o, std::string_view key);
/// Sets `key` from its text form. Throws Error(kInvalidArgument) naming the key and the value when
/// the value does not parse or is out of range (threshold in (0, 1] or "off", gamma in (0, 1], counts >= 0 ...).
void set_option(GenerateOptions& o, std::string_view key, std::string_view value);

/// The settings that apply to the mode, with their effective values (threshold 0.9 for flash when
/// unset, the block length in use, steps only in quota mode, flash / verify sub-objects only for
/// those modes): what a report records about a run.
nlohmann::ordered_json to_json(const GenerateOptions& o);

}  // namespace flashdllm
