// The golden fixture of the upstream-parity suites (tests/denoise/test_*golden*.cpp,
// test_flash_verify.cpp, tests/model/test_forward_golden.cpp, and the CLI tests on it): the checkpoint
// and the recordings in golden_dir() ($FLASHDLLM_GOLDEN_DIR, default tests/data/golden/g1), loaded
// once per test executable.
//
// The rule for tests using it: every expectation comes from the fixture (its config, prompts, runs,
// special ids, errors) or from numerics.h, never from what is true of G1 alone (d_model 256, 3
// layers, mask id 1000, run 9, twelve prompts, ...). The held-back G2 has other shapes and ids;
// tests/tools/make_golden_variant.py writes a variant of G1 with other shapes, ids and run order to
// check that (docs/robustness.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/check.h"
#include "flashdllm/params.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace flashdllm::test {

struct GoldenFixture {
  std::filesystem::path dir;
  std::unique_ptr<Backend> backend;  // CPU
  Model model;
  const nlohmann::json& llada;     // gen_llada.json
  const nlohmann::json& fastdllm;  // gen_fastdllm.json
  const nlohmann::json& flash;     // gen_flashdllm.json
  const ModelConfig& config() const noexcept { return model.config; }
};

/// The fixture, loaded on first use onto a CPU backend with `cpu_threads` threads (0 = OpenMP's
/// default). One per process: later calls return the same object whatever they pass.
GoldenFixture& golden_fixture(int cpu_threads = 0);

/// A recording of the fixture ("gen_llada.json", ...), parsed once; usable before the model loads
/// (test parameter generators).
const nlohmann::json& golden_json(const std::string& file);

/// forward.safetensors of the fixture, mapped once.
const SafetensorsFile& golden_forward();
/// The sequence keys of forward.safetensors ("L7", ...): every "input_ids.<key>" with "logits.<key>".
std::vector<std::string> golden_forward_keys();

/// The prompt a run used: file["prompts"][run.prompt_set][run.prompt_index].
std::vector<int32_t> golden_prompt(const nlohmann::json& file, const nlohmann::json& run);
/// All prompts of a run's prompt set (Flash-dLLM runs serve a whole set).
std::vector<std::vector<int32_t>> golden_prompt_set(const nlohmann::json& file, const nlohmann::json& run);

/// Indices into file["runs"] of the runs `keep` accepts, in file order.
std::vector<size_t> golden_runs(const nlohmann::json& file, const std::function<bool(const nlohmann::json&)>& keep);

/// A recorded decision margin: a number, or "inf" / null (every candidate committed) -> +inf.
double golden_margin(const nlohmann::json& m);

/// items[i % size]: the i-th entry of a recorded set, wrapping around in a smaller set, so that a
/// test written against G1's twelve prompts still picks valid ones elsewhere.
template <typename T>
const T& pick(const std::vector<T>& items, size_t i) {
  FDLLM_ASSERT_MSG(!items.empty(), "the golden fixture records an empty set");
  return items[i % items.size()];
}
/// items[size - 1 - i % size]: as pick, counted from the end.
template <typename T>
const T& pick_last(const std::vector<T>& items, size_t i) {
  FDLLM_ASSERT_MSG(!items.empty(), "the golden fixture records an empty set");
  return items[items.size() - 1 - i % items.size()];
}
/// The prompts ordered by length (stable), for tests that want the shortest or the longest.
std::vector<std::vector<int32_t>> by_length(std::vector<std::vector<int32_t>> prompts);

/// Flash-Cache settings with the scripts' canvas of 512 and block 16 written out (the tests read
/// them); params.h's other defaults are the paper's (track_num 4, mask_num 4, ε 0.9).
GenerateOptions flash_options();

/// The settings of a recorded Flash-dLLM run (gen_flashdllm.json: gen_length, block_length,
/// threshold, track_num, mask_num; verify stays off) on `slots` slots.
GenerateOptions flash_run_options(const nlohmann::json& run, int64_t slots, bool quirks);

}  // namespace flashdllm::test
