// Loading checkpoints and golden JSON for tests.
#pragma once

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/llada.h"

namespace flashdllm::test {

/// Loads config + weights + RoPE tables of a checkpoint directory onto `backend`.
LladaModel load_model(Backend& backend, const std::filesystem::path& dir);

/// Parses a JSON file (throws on error).
nlohmann::json load_json(const std::filesystem::path& path);

/// A forward over whole sequences (full recompute, every row's logits), for parity tests.
/// Returns logits [sum L, embedding_size] row-major on the host.
std::vector<float> full_logits(Backend& backend, const LladaModel& model,
                               const std::vector<std::vector<int32_t>>& sequences);

}  // namespace flashdllm::test
