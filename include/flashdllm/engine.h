// flashdllm public API: load a LLaDA checkpoint and generate.
//
// Worked example (error handling: every failure throws flashdllm::Error, see status.h):
//
//   #include <flashdllm/engine.h>
//   flashdllm::EngineOptions eo;
//   eo.model_dir = "/models/LLaDA-8B-Instruct";   // HF layout: config.json, *.safetensors, tokenizer.json
//   eo.device = "cuda";                           // or "cpu"
//   auto engine = flashdllm::Engine::load(eo);
//   flashdllm::GenerateOptions go;                 // gen_length 128, block 32, steps 128, greedy
//   flashdllm::GenerateRequest rq;
//   rq.prompt = "What is 12 * 7?";                 // chat template applied (rq.chat = true)
//   auto results = engine->generate({rq}, go);
//   std::cout << results[0].text << "\n";
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashdllm/op_profile.h"
#include "flashdllm/request.h"
#include "flashdllm/status.h"

namespace flashdllm {

class Tokenizer;
struct LladaConfig;

struct EngineOptions {
  std::filesystem::path model_dir;     ///< HF checkpoint directory
  std::string device = "cpu";          ///< "cpu" | "cuda" | "cuda:N"
  int threads = 0;                     ///< CPU worker threads (0 = all)
  std::string load_format = "auto";    ///< "auto" (safetensors) | "dummy" (seeded random weights, config only)
  uint64_t dummy_seed = 0;             ///< seed of dummy weights
  /// Time every backend op (a synchronisation before and after each; slower runs) into op_profile().
  bool profile_ops = false;
};


/// Progress of a running generate call: request index, its current canvas (gen_length ids,
/// mask id where undecoded) and whether it is finished.
struct StepProgress {
  size_t request = 0;
  const std::vector<int32_t>* canvas = nullptr;
  bool done = false;
};
using ProgressCallback = std::function<void(const StepProgress&)>;

class Engine {
 public:
  /// Loads config, tokenizer (if present), chat template (if present) and weights.
  /// Throws Error(kIo / kInvalidCheckpoint / kUnsupported / kOutOfMemory / kDevice).
  static std::unique_ptr<Engine> load(const EngineOptions& options);
  ~Engine();

  /// Runs a batch of requests to completion with one setting. Throws Error(kInvalidArgument)
  /// for impossible settings or prompts (empty, too long for max_sequence_length, ...).
  std::vector<GenerateResult> generate(const std::vector<GenerateRequest>& requests, const GenerateOptions& options,
                                       const ProgressCallback& progress = {});

  /// Tokenizes a prompt (with the chat template when `chat`). Throws Error(kInvalidArgument)
  /// when the checkpoint has no tokenizer, or no chat template and `chat` is set.
  std::vector<int32_t> encode_prompt(const std::string& text, bool chat) const;
  /// Decodes ids (special tokens skipped); "" when there is no tokenizer.
  std::string decode(const std::vector<int32_t>& ids) const;

  const LladaConfig& config() const noexcept;
  bool has_tokenizer() const noexcept;
  bool has_chat_template() const noexcept;
  int32_t mask_token_id() const noexcept;
  /// -1 when unknown.
  int32_t eot_token_id() const noexcept;
  /// Multi-line description: config, parameter count, dtype, memory need, backend.
  std::string info() const;
  /// Largest device (CPU: host) memory in use seen so far, in bytes: weights + K/V stores +
  /// workspaces, sampled from the backend's free memory at the end of each generate call (while
  /// the denoiser's buffers are still allocated), relative to the free memory before loading.
  size_t peak_memory_bytes() const noexcept;
  /// Seconds spent loading and bytes of weights read.
  double load_seconds() const noexcept;
  /// Per-op time of all generate calls so far, by descending total; empty unless profile_ops.
  std::vector<OpProfileEntry> op_profile() const;
  size_t weight_bytes() const noexcept;
  std::string backend_name() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashdllm
