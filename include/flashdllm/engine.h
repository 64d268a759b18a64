// flashdllm public API: load a LLaDA checkpoint, then generate — a batch to completion, or request
// by request on a running engine (continuous batching, streaming, cancellation).
//
// Worked example (error handling: every failure throws flashdllm::Error, see status.h):
//
//   #include <flashdllm/engine.h>
//   flashdllm::EngineOptions eo;
//   eo.model_dir = "/models/LLaDA-8B-Instruct";   // HF layout: config.json, *.safetensors, tokenizer.json
//   eo.device = "cuda";                           // or "cpu"
//   auto engine = flashdllm::Engine::load(eo);
//
//   // A batch, run to completion (Flash-Cache with the paper's defaults, ε 0.9):
//   flashdllm::GenerateOptions go;                 // go.decode: method settings; go.sampling: per request
//   go.sampling.gen_length = 256;
//   flashdllm::GenerateRequest rq;
//   rq.prompt = "What is 12 * 7?";                 // chat template applied (rq.chat = true)
//   auto results = engine->generate({rq}, go);
//   std::cout << results[0].text << "\n";
//
//   // Request by request (what `flashdllm serve` does): size the slot pool once, submit from any
//   // thread, read each request's events as it denoises.
//   flashdllm::ServeOptions so;                    // so.decode: the method; so.n_slots, so.max_model_len
//   engine->start(so);
//   flashdllm::SamplingParams sp;
//   sp.gen_length = 128;                           // max_tokens
//   auto stream = engine->submit(rq, sp);
//   while (auto ev = stream->next(std::chrono::seconds(1)))
//     std::cout << ev->text_delta << std::flush;   // the stable prefix as it grows
//   engine->stop(/*drain=*/true);
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashdllm/backend_options.h"
#include "flashdllm/op_profile.h"
#include "flashdllm/params.h"
#include "flashdllm/precision.h"
#include "flashdllm/request.h"
#include "flashdllm/status.h"

namespace flashdllm {

class Tokenizer;
struct ModelConfig;

struct EngineOptions {
  std::filesystem::path model_dir;     ///< HF checkpoint directory
  std::string device = "cpu";          ///< "cpu" | "cuda" | "cuda:N"
  int threads = 0;                     ///< CPU worker threads (0 = all)
  std::string load_format = "auto";    ///< "auto" (safetensors) | "dummy" (seeded random weights, config only)
  uint64_t dummy_seed = 0;             ///< seed of dummy weights
  /// Weight quantisation and K/V cache dtype (flashdllm/precision.h); a backend without the route
  /// refuses it at load (Error(kUnsupported) naming the option).
  ModelPrecision precision;
  /// Time every backend op (a synchronisation before and after each; slower runs) into op_profile().
  bool profile_ops = false;
  /// Tensor parallelism (Megatron-LM layout): the model's heads, MLP columns and LM-head vocabulary
  /// split over this many ranks, each with its own backend, shard and K/V stores, in lockstep.
  /// "cpu": rank threads in this process (threads / N CPU threads each) with an in-process
  /// all-reduce; "cuda" / "cuda:K": GPUs K..K+N-1 of this host with NCCL. Must divide n_heads,
  /// mlp_hidden_size and embedding_size (Engine::load throws Error(kInvalidArgument) naming the
  /// size); not with profile_ops. 1 = off.
  int tensor_parallel = 1;
  /// Data parallelism: this many whole copies of the model (each a tensor_parallel group), each
  /// with its own slot pool, behind one shared request queue (the scheduler deals requests to the
  /// least loaded copy with a free slot). "cpu": threads / (N x tensor_parallel) CPU threads per
  /// rank, at least 1 (the weights are not shared between copies); "cuda:K": replica k on GPUs K + k x tensor_parallel
  /// ... Engine::generate deals a batch over the replicas (results identical to 1: every request's tokens are
  /// batch-invariant); Engine::start gives every replica decode.n_slots slots. Not with profile_ops. 1 = off.
  int data_parallel = 1;
  /// How every rank's backend runs (kernel routes, GEMM picks, CUDA graphs, row padding, ...; see
  /// flashdllm/backend_options.h): handed unchanged to each backend the engine makes. The defaults
  /// let the backend's policies choose; `flashdllm` fills it from FLASHDLLM_* variables (`flashdllm env`).
  BackendOptions backend;
};

/// Progress of a running generate call: request index, its current canvas (gen_length ids,
/// mask id where undecoded) and whether it is finished.
struct StepProgress {
  size_t request = 0;
  const std::vector<int32_t>* canvas = nullptr;
  bool done = false;
};
using ProgressCallback = std::function<void(const StepProgress&)>;

/// One iteration of a submitted request, or its end.
struct RequestEvent {
  int64_t iteration = 0;           ///< iterations the request has taken part in, this one included
  int64_t canvas_length = 0;       ///< the request's canvas (max_tokens, rounded up to the block for the block samplers)
  /// Canvas positions committed by this iteration (0 = the first generated position), ascending,
  /// and their tokens: what a live view needs to turn masks into text. Positions at or past
  /// max_tokens are included (the canvas is rounded up to the block); the answer is cut there.
  std::vector<int32_t> positions;
  std::vector<int32_t> tokens;
  /// The stable prefix: the answer's leading run of decoded tokens (no mask left in it), cut at the
  /// first EOS / EOT and at max_tokens; its length in tokens.
  int64_t stable_tokens = 0;
  /// Stable text added since the previous event: complete UTF-8, with stop strings applied (a
  /// possible start of a stop string is held back until it is decided).
  std::string text_delta;
  /// SamplingParams::logprobs >= 0: the TokenLogprobs of the answer tokens that became stable with
  /// this event (answer positions [previous stable_tokens, stable_tokens)), in order. With stop
  /// strings they wait until the answer is decided (a stop string can still cut stable tokens), so
  /// they only ever cover the final answer.
  std::vector<TokenLogprob> logprobs;
  bool finished = false;           ///< the last event of the request
  FinishReason finish_reason = FinishReason::kLength;  ///< when finished
  std::string error;               ///< when finish_reason is kError: the message
  ErrorCode error_code = ErrorCode::kInternal;          ///< when finish_reason is kError
  std::shared_ptr<const GenerateResult> result;        ///< when finished (not for kError)
};

/// The events of one submitted request. Thread-safe; the engine never waits on its reader (events
/// queue up, at most one per iteration of the request).
class RequestStream {
 public:
  virtual ~RequestStream() = default;
  virtual uint64_t id() const noexcept = 0;
  /// The next event, waiting at most `timeout`; nullopt when none came in time or when the final
  /// event was already returned (then finished() is true). A timeout of zero (or less) does not wait
  /// at all: an event already queued, else nullopt.
  virtual std::optional<RequestEvent> next(std::chrono::milliseconds timeout) = 0;
  /// Asks the engine to stop the request: a queued one is dropped, a running one frees its slot at
  /// the next iteration; a final event with FinishReason::kCancelled follows. Idempotent.
  virtual void cancel() noexcept = 0;
  /// True once the final event was returned by next().
  virtual bool finished() const noexcept = 0;
};

/// A running engine's slot pool and queue (Engine::start).
struct ServeOptions {
  DecodeSettings decode;           ///< the method (cache mode, block, β_t / β_m, verify, ...); decode.n_slots = the pool (0 = as many as fit)
  /// Longest prompt + max_tokens (canvas, rounded up to the block for the block samplers) a request
  /// may have; 0 = the model's max_sequence_length. Sizes the K/V slots.
  int64_t max_model_len = 0;
  int64_t max_queue = 256;         ///< requests waiting for a slot before submit() refuses (ErrorCode::kUnavailable)
  double memory_fraction = 0.9;    ///< of the free device memory the automatic slot count may use
};

/// Counters and gauges of a running engine (Engine::metrics), for /metrics.
struct EngineMetrics {
  int64_t n_slots = 0, slots_busy = 0, queue_depth = 0, max_model_len = 0;  ///< n_slots: over all replicas
  int64_t replicas = 1;                     ///< data-parallel engine replicas sharing the queue
  std::vector<int64_t> replica_slots_busy;  ///< per replica: slots holding a request
  std::vector<int64_t> replica_iterations;  ///< per replica: iterations run
  int64_t requests_finished_stop = 0, requests_finished_length = 0, requests_cancelled = 0, requests_failed = 0;
  int64_t iterations = 0;          ///< engine iterations (steps) run
  int64_t forward_passes = 0;      ///< model passes (Flash-Verify passes and slot-group splits included)
  int64_t committed_tokens = 0;    ///< canvas positions committed, over all requests
  int64_t generated_tokens = 0;    ///< answer tokens of finished requests (GenerateResult::generated_tokens)
  double busy_seconds = 0.0;       ///< time spent inside iterations
  double tokens_per_second = 0.0;  ///< committed tokens per second over the last 10 s
  /// Iteration wall time histogram: counts per upper bound (seconds; the last bound is +inf).
  std::vector<double> iteration_seconds_bounds;
  std::vector<int64_t> iteration_seconds_counts;
  double iteration_seconds_sum = 0.0;
  /// Committed tokens per iteration (summed over the iteration's slots) histogram, bounds as above.
  std::vector<double> tokens_per_iteration_bounds;
  std::vector<int64_t> tokens_per_iteration_counts;
  double tokens_per_iteration_sum = 0.0;
  /// Host wall time of one phase of the iterations (seconds, summed over iterations and replicas).
  struct HostPhase {
    std::string name;
    double seconds = 0.0;
  };
  /// Wall-time summary of a kind of iteration (seconds), over the newest kIterationWindow of them.
  struct IterationTimes {
    int64_t count = 0;  ///< iterations of this kind run in all (the statistics below cover the newest ones)
    double sum = 0.0;   ///< their wall time in all, seconds
    double mean = 0.0, median = 0.0, p10 = 0.0, p90 = 0.0, min = 0.0, max = 0.0;
    /// Where the host time of all `count` iterations went, in step order: "scheduler" (admission,
    /// cancellation, events and answers around each step; outside `sum`), then the denoiser's own
    /// phases where it times them (inside `sum`; Flash-Cache: the main pass's forward call and the
    /// wait for its results, decisions, the verify pass's batch, call and wait, acceptance,
    /// continue; src/denoise/flash_cache.h FlashPhase). A "... wait" phase is device time the host
    /// did not hide.
    std::vector<HostPhase> host_phases;
  };
  static constexpr int64_t kIterationWindow = 8192;
  /// Iterations that admitted no request: the steady state, every slot denoising (its window and
  /// tracked rows under Flash-Cache). The per-iteration figure of benchmarks (bench/ab_flash_8b.sh).
  IterationTimes decode_iterations;
  /// Iterations that admitted at least one request: they hold its prefill rows (Flash-Cache's
  /// [0, seqlen_k) per admitted slot) and, the very first one, the device's warm-up (library
  /// plans, module loading).
  IterationTimes admission_iterations;
};

class Engine {
 public:
  /// Loads config, tokenizer (if present), chat template (if present) and weights.
  /// Throws Error(kIo / kInvalidCheckpoint / kUnsupported / kOutOfMemory / kDevice).
  static std::unique_ptr<Engine> load(const EngineOptions& options);
  ~Engine();

  /// Runs a batch of requests to completion with one setting, on a slot pool sized for the batch
  /// (flash: min(slots, requests); the other modes: every request at once). Throws
  /// Error(kInvalidArgument) for impossible settings or prompts (empty, too long for
  /// max_sequence_length, ...). A request whose logits are not finite (NaN / Inf weights, or its
  /// input overflows them) fails alone: its result has finish_reason kError and the message in
  /// GenerateResult::error, the other requests complete. Not while the engine is started
  /// (Error(kInvalidArgument)). Stop strings are not applied.
  std::vector<GenerateResult> generate(const std::vector<GenerateRequest>& requests, const GenerateOptions& options,
                                       const ProgressCallback& progress = {});

  // ---- request by request ---------------------------------------------------------------------
  /// Sizes the slot pool and its workspaces once (from measured free memory when decode.n_slots is
  /// 0) and starts the engine's loop thread. Throws Error(kInvalidArgument) for bad settings or when
  /// already started, Error(kOutOfMemory) when not even one slot fits.
  void start(const ServeOptions& options);
  /// Queues a request (thread-safe). params.gen_length is the answer's max_tokens (the canvas is
  /// rounded up to the block for the block samplers). Throws Error(kInvalidArgument) naming the
  /// parameter or the limit (prompt + max_tokens beyond max_model_len, ...), Error(kUnavailable)
  /// when the queue is full or the engine is stopping (or not started).
  std::shared_ptr<RequestStream> submit(const GenerateRequest& request, const SamplingParams& params);
  /// The canvas a request with `params` decodes on the started engine: max_tokens, rounded up to the
  /// block length for the block samplers (cache none / prefix / dual).
  int64_t canvas_length(const SamplingParams& params) const;
  /// Cancels a submitted request by id (thread-safe); false if it is unknown or already ended.
  bool cancel(uint64_t id);
  /// Stops the loop thread. drain: refuse new requests, finish the queued and running ones first;
  /// otherwise cancel them. Idempotent.
  void stop(bool drain);
  bool started() const noexcept;
  /// The running pool's settings (valid once started): slots (decode.n_slots: per replica),
  /// max_model_len, the decode settings.
  const ServeOptions& serve_options() const;
  /// Data-parallel replicas (EngineOptions::data_parallel).
  int replicas() const noexcept;
  /// Slots of the running pool over all replicas (decode.n_slots x replicas(); 0 before start).
  int64_t total_slots() const;
  /// The running pool's metrics (after stop(): the last pool's; after generate(): that call's, its
  /// iteration times included).
  EngineMetrics metrics() const;

  // ---- text -------------------------------------------------------------------------------------
  /// Tokenizes a prompt (with the chat template when `chat`). Throws Error(kInvalidArgument)
  /// when the checkpoint has no tokenizer, or no chat template and `chat` is set.
  std::vector<int32_t> encode_prompt(const std::string& text, bool chat) const;
  /// Tokenizes chat messages through the checkpoint's chat template (assistant header appended).
  /// Throws Error(kInvalidArgument) without a tokenizer or a chat template.
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages) const;
  /// Decodes ids (special tokens skipped); "" when there is no tokenizer.
  std::string decode(std::span<const int32_t> ids) const;
  /// Lower bounds of encode_prompt(text, chat).size() and encode_chat(messages).size() without
  /// tokenising, in time linear in the text: the (template-rendered) text's bytes over the
  /// tokenizer's max_bytes_per_token() (Tokenizer, io/tokenizer.h), rounded up; 0 when there is no
  /// bound (no tokenizer or template, or a tokenizer that can drop text). A caller refuses a prompt
  /// too long for its context with it before paying for its tokens.
  int64_t min_prompt_tokens(const std::string& text, bool chat) const;
  int64_t min_chat_tokens(const std::vector<ChatMessage>& messages) const;
  /// The tokenizer's max_bytes_per_token() (read once at load; 0: no bound or no tokenizer).
  size_t max_bytes_per_token() const noexcept;

  const ModelConfig& config() const noexcept;
  const std::filesystem::path& model_dir() const noexcept;
  bool has_tokenizer() const noexcept;
  bool has_chat_template() const noexcept;
  /// Whether text prompts take the chat template when neither chat nor raw is asked for: true when
  /// the checkpoint has one, false when it has none (no tokenizer_config.json, or no chat_template
  /// field: a base model). A tokenizer_config.json that asks for a template this build cannot use,
  /// or is not valid JSON, throws Error(kInvalidCheckpoint) naming the file: skipping it silently
  /// would send a chat model raw prompts, which it answers with an immediate end of text.
  bool chat_by_default() const;
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
  /// How the forwards' layer loops ran so far, summed over the replicas (CUDA graphs; all zero on
  /// the CPU backend and under tensor parallelism, whose loops run op by op): `direct` op by op (a
  /// row-count key's first sighting, graphs off), `captures` recorded into a graph (also ran once),
  /// `replays` served by a recorded graph. Read it while no generate call runs (generate, or a
  /// stopped engine): the counters are the engine thread's.
  struct GraphStats {
    int64_t direct = 0, captures = 0, replays = 0, failed = 0, cached = 0;
  };
  GraphStats graph_stats() const;
  size_t weight_bytes() const noexcept;
  std::string backend_name() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashdllm
