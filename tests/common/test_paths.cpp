#include "common/test_paths.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <unistd.h>

namespace flashdllm::test {

std::filesystem::path test_data_dir() { return std::filesystem::path(FDLLM_SOURCE_DIR) / "tests" / "data"; }

std::filesystem::path repo_data_dir() { return std::filesystem::path(FDLLM_SOURCE_DIR) / "data"; }

std::filesystem::path golden_dir() {
  if (const char* env = std::getenv("FLASHDLLM_GOLDEN_DIR"); env && *env) return env;
  return test_data_dir() / "golden" / "g1";
}

std::filesystem::path default_model_dir() { return std::filesystem::path(FDLLM_SOURCE_DIR) / "models" / "llada-arith-12m"; }
std::filesystem::path dream_model_dir() {
  return std::filesystem::path(FDLLM_SOURCE_DIR) / "models" / "dream-arith-11m";
}
std::filesystem::path moe_model_dir() {
  return std::filesystem::path(FDLLM_SOURCE_DIR) / "models" / "llada-moe-arith-12m";
}

std::filesystem::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "fdllm";
  for (char& c : name)
    if (c == '/') c = '_';
  auto dir = std::filesystem::temp_directory_path() / ("fdllm-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::filesystem::path cli_binary() {
  if (const char* env = std::getenv("FLASHDLLM_BINARY_DIR"); env && *env) return std::filesystem::path(env) / "flashdllm";
  return std::filesystem::path(FDLLM_BINARY_DIR) / "flashdllm";
}

}  // namespace flashdllm::test
