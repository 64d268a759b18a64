// Loading checkpoints and golden JSON for tests.
#pragma once

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/llada.h"

namespace flashdllm::test {

/// Loads config + weights + RoPE tables of a checkpoint directory onto `backend`.
LladaModel load_model(Backend& backend, const std::filesystem::path& dir);

/// The values of an I64 fixture tensor (token ids, rows) as int32 (asserts the dtype).
std::vector<int32_t> i64_tensor_as_i32(const TensorInfo& t);
/// The values of an F32 fixture tensor (asserts the dtype).
std::vector<float> f32_tensor(const TensorInfo& t);

/// Parses a JSON file (throws on error).
nlohmann::json load_json(const std::filesystem::path& path);

/// A forward over whole sequences (full recompute, every row's logits), for parity tests.
/// Returns logits [sum L, embedding_size] row-major on the host.
std::vector<float> full_logits(Backend& backend, const LladaModel& model,
                               const std::vector<std::vector<int32_t>>& sequences);

}  // namespace flashdllm::test
