// The flashdllm command's shared options: the common flags (model, device, threads), the decoding
// flags that bind to a GenerateOptions (params.h owns their defaults and validation), and small
// parsers. Used by generate, eval, bench and serve (apps/cli/*.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashdllm/engine.h"

namespace flashdllm::cli {

struct CommonArgs {
  std::string model_dir = FLASHDLLM_DEFAULT_MODEL_DIR;
  std::string device = "cpu";
  int threads = 0;
  std::string load_format = "auto";
  uint64_t dummy_seed = 0;
  bool verbose = false;
  bool profile_ops = false;  // generate --profile-ops
  int tensor_parallel = 1;   // --tensor-parallel
  int data_parallel = 1;     // --data-parallel
  std::string quantization = "none";    // --quantization (flashdllm/precision.h)
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype
};
void add_common(CLI::App* app, CommonArgs& a);
/// --quantization and --kv-cache-dtype as a ModelPrecision (CLI11 has checked the names).
flashdllm::ModelPrecision precision_of(const CommonArgs& a);
std::unique_ptr<Engine> load_engine(const CommonArgs& a);

/// The peak memory a run reports, and what it measures: on the CPU the process's peak resident set
/// (the backend's free memory is system-wide, so other processes would move it); on a GPU the device
/// memory in use (Engine::peak_memory_bytes). Read it before the engine is released.
struct PeakMemory {
  int64_t bytes = 0;
  const char* kind = "";
};
PeakMemory peak_memory(const Engine& engine);

/// CLI11 check for integer options that must be >= 0, with a plain message.
extern const CLI::Validator kNonNegativeInt;
/// CLI11 check for a uint64 option (seeds): a decimal integer in [0, 2^64 - 1], said exactly.
extern const CLI::Validator kUint64;
/// CLI11 check for an integer in [lo, hi] with a plain message ("'abc' is not an integer", "must be
/// in [1, 64], got 65"); CLI::Range calls every non-number out of range.
CLI::Validator int_in_range(long long lo, long long hi);

/// "5,6,7" -> ids. Throws Error(kInvalidArgument) naming --prompt-ids for an empty list, an empty
/// entry or a non-id.
std::vector<int32_t> parse_ids(const std::string& s);
/// "5 6 7".
std::string ids_to_string(const std::vector<int32_t>& ids);

/// Decoding settings shared by generate, eval, bench and serve: the flags bind to a GenerateOptions
/// (params.h owns the defaults, presets and validation); enums arrive as text and are parsed here.
struct DecodeArgs {
  GenerateOptions go;
  std::string cache = cache_mode_name(DecodeSettings{}.cache);
  std::string remasking = "low_confidence";
  std::string sampler = sampler_name(DecodeSettings{}.sampler);
  std::string alg = dream_alg_name(DecodeSettings{}.dream_alg);
  std::string verify_rule = "product";
  std::string verify_kept = "released";
  double threshold = -1.0;
  int64_t eot_id = -1;
  std::string preset;
  std::string forced;
  std::string importance = "qk";
  CLI::App* app = nullptr;
  /// serve: the flags set the engine's method; per-request values come with each request (their
  /// flags are refused) and --slots sizes the pool of every mode.
  bool serving = false;

  bool given(const char* flag) const {
    const CLI::Option* o = app->get_option_no_throw(flag);
    return o != nullptr && o->count() > 0;
  }
  /// The family's own method where the command line names none: a shifted-logit model (Dream) takes
  /// cache none (Dream's sampler) unless --cache or --preset was given (ModelConfig::logit_shift).
  /// Then refuses the flags of another mode (as options() does where --cache or --preset chose it).
  void fit_to_model(GenerateOptions& o, const ModelConfig& cfg) const;
  /// Refuses a flag given for a cache mode other than d.cache; with !cache_chosen (the default
  /// mode, which a Dream model turns into none) the flags of cache none pass until fit_to_model.
  void check_scope(const DecodeSettings& d, bool cache_chosen) const;
  /// The options as given, a --preset filling what the command line left unset. With `one_mode`
  /// (generate, eval, serve) flags of another decoding mode are refused; bench's base options serve
  /// several methods and pass false.
  GenerateOptions options(bool one_mode = true) const;
};
void add_decode_options(CLI::App* app, DecodeArgs& a);

}  // namespace flashdllm::cli
