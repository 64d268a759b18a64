// Where tests find their data. The golden directory can be redirected with FLASHDLLM_GOLDEN_DIR
// (to run the same tests on another upstream-recorded checkpoint, e.g. the held-back G2).
#pragma once

#include <filesystem>

namespace flashdllm::test {

/// <repo>/tests/data
std::filesystem::path test_data_dir();
/// <repo>/data (benchmark data and the real LLaDA-8B config/index, copied from shared/data)
std::filesystem::path repo_data_dir();
/// $FLASHDLLM_GOLDEN_DIR or <repo>/tests/data/golden/g1
std::filesystem::path golden_dir();
/// <repo>/models/<default small model> (may not exist yet)
std::filesystem::path default_model_dir();
/// <repo>/models/dream-arith-11m (the small Dream-layout model)
std::filesystem::path dream_model_dir();
/// <repo>/models/llada-moe-arith-12m (the small LLaDA-MoE-layout model)
std::filesystem::path moe_model_dir();
/// A fresh empty temporary directory unique to the calling test.
std::filesystem::path temp_dir();
/// <build>/flashdllm (the CLI binary)
std::filesystem::path cli_binary();

}  // namespace flashdllm::test
