// Loading checkpoints and golden JSON for tests.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/comm.h"
#include "engine/tensor_parallel.h"
#include "flashdllm/params.h"
#include "flashdllm/request.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace flashdllm::test {

/// Loads config + weights + RoPE tables of a checkpoint directory onto `backend` (rank `tp`'s shard),
/// with the weight quantisation and K/V cache dtype of `precision`.
Model load_model(Backend& backend, const std::filesystem::path& dir, const TensorParallel& tp = {},
                 const ModelPrecision& precision = {});

/// A tensor-parallel group of a checkpoint on CPU backends of `threads` threads each, with
/// in-process communicators (the CPU twin of tensor parallelism). dummy: seeded dummy weights
/// (--load-format dummy) instead of the checkpoint's.
struct TpGroup {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<Model> models;
  std::unique_ptr<Lockstep> lockstep;
  int world() const noexcept { return static_cast<int>(models.size()); }
  /// fn(rank) on every rank at once (collectives need all ranks).
  void run(const std::function<void(int)>& fn) { lockstep->run(fn); }
};
TpGroup load_tp_group(const std::filesystem::path& dir, int world, int threads = 1, bool dummy = false,
                      uint64_t seed = 0);

/// A checkpoint directory (under temp_dir()) with `src`'s weights and tokenizer files (symlinked)
/// and its config with n_heads = n_kv_heads = `n_heads`: the same tensors split into other heads,
/// a different but valid LLaDA (e.g. g1 with 4 heads of 64 for a tensor-parallel size of 4).
std::filesystem::path checkpoint_with_heads(const std::filesystem::path& src, int64_t n_heads);

/// The values of an I64 fixture tensor (token ids, rows) as int32 (asserts the dtype).
std::vector<int32_t> i64_tensor_as_i32(const TensorInfo& t);
/// The values of an F32 fixture tensor (asserts the dtype).
std::vector<float> f32_tensor(const TensorInfo& t);

/// A named decoding setting for engine tests that run several modes: the engine's settings and a
/// request's sampling parameters.
struct DecodeMode {
  const char* name;
  DecodeSettings d;
  SamplingParams s;
};

/// `n` token-id requests of lengths first_length + i * step, ids drawn (std::mt19937(seed)) from the
/// model's plain vocabulary [5, min(mask, eos)): engine tests whose prompts only need to differ.
std::vector<GenerateRequest> random_id_requests(const ModelConfig& c, size_t n, uint32_t seed, int64_t first_length,
                                                int64_t step);

/// Parses a JSON file (throws on error).
nlohmann::json load_json(const std::filesystem::path& path);

/// The bf16 yardstick check of a bf16 backend's whole-forward logits `got` [rows, V] for the golden
/// fixture input `key` (numerics.h kBf16YardstickFactor / kBf16YardstickArgmaxSlack; `yard` is a
/// tools/diag/*bf16_reference_error JSON file): relative max error against the CPU's fp32 `cpu` and
/// against the upstream fp32 `upstream` logits at most the factor x yard["rel_max_err"][key], argmax
/// agreement with upstream, over the rows whose upstream top-2 gap is at least twice the yardstick's
/// max error (nearer ties flip under bf16 rounding either way), at least
/// yard["argmax_agreement"][key] minus the slack (gtest EXPECTs).
/// Prints the three numbers after `label`.
void expect_within_bf16_yardstick(const std::string& label, const std::string& key, const std::vector<float>& got,
                                  const std::vector<float>& cpu, const std::vector<float>& upstream, int64_t V,
                                  const nlohmann::json& yard);

/// A forward over whole sequences (full recompute, every row's logits), for parity tests.
/// Returns logits [sum L, embedding_size] row-major on the host. Under tensor parallelism every
/// rank calls it at once (TpGroup::run) and gets the gathered logits.
std::vector<float> full_logits(Backend& backend, const Model& model,
                               const std::vector<std::vector<int32_t>>& sequences);
/// model_forward over `fb` on a fresh K/V store (fb.n_tokens() rows) and workspace: the logits
/// [R, embedding_size] of fb.logit_rows on the host (R <= n_tokens); last_k, when given, receives
/// this rank's last-layer K store afterwards.
std::vector<float> forward_logits(Backend& backend, const Model& model, const ForwardBatch& fb,
                                  std::vector<float>* last_k = nullptr);
/// The batch full_logits runs: every position a query row, its own store row and a logits row,
/// one tile per sequence.
ForwardBatch full_recompute_batch(const std::vector<std::vector<int32_t>>& sequences);

/// A checkpoint on a CPU backend, loaded once per process and directory (the family golden suites).
struct CpuCheckpoint {
  std::unique_ptr<Backend> backend;
  Model model;
};
/// The checkpoint `dir` on a CPU backend of `threads` threads (0 = all), loaded on the first call
/// for `dir`; later calls return the same object whatever `threads` they pass.
CpuCheckpoint& cpu_checkpoint(const std::filesystem::path& dir, int threads = 0);

/// A config.json mutation and the parts the refusal's message must hold (config-refusal tables).
struct BadConfig {
  const char* name;
  std::function<void(nlohmann::json&)> mutate;
  std::vector<std::string> parts;
};
inline void PrintTo(const BadConfig& b, std::ostream* os) { *os << b.name; }
/// Mutations for BadConfig tables: set `key` to `v`; erase `key`.
std::function<void(nlohmann::json&)> set_key(const char* key, nlohmann::json v);
std::function<void(nlohmann::json&)> erase_key(const char* key);
/// Applies b.mutate to a copy of `config` and expects parse_model_config to refuse it with
/// Error(kInvalidCheckpoint) naming `source` and every one of b.parts (gtest failures otherwise).
void expect_config_refused(const nlohmann::json& config, const BadConfig& b, const std::string& source);

/// The verify pass (model_verify_forward) over the kept positions [a, b) of `x`, the others read
/// from a full forward's K/V cache, against that full forward's rows: the max relative error.
double verify_vs_full_forward(Backend& be, const Model& m, const std::vector<int32_t>& x, int32_t a, int32_t b);

}  // namespace flashdllm::test
