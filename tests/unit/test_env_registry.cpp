// The FLASHDLLM_* registry (apps/cli/env_registry.h): every variable's values reach the typed options,
// invalid values are refused naming the variable, and the listing shows every variable. Setting the
// process environment is this test's job (the one reader of it is under test).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/scoped_env.h"
#include "env_registry.h"
#include "flashdllm/status.h"

namespace flashdllm::cli {
namespace {

using test::ScopedEnv;

// The message of the Error(kInvalidArgument) that env_settings() throws with `name` = `value`.
std::string refusal(const char* name, const char* value) {
  const ScopedEnv env(name, value);
  try {
    env_settings();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << name << "='" << value << "' was accepted";
  return "";
}

EnvSettings with(const char* name, const char* value) {
  const ScopedEnv env(name, value);
  return env_settings();
}

TEST(EnvRegistry, EveryVariableIsListedOnceWithTypeDefaultAndHelp) {
  std::set<std::string> names;
  for (const EnvVar& v : env_registry()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
    EXPECT_NE(std::string(v.type), "") << v.name;
    EXPECT_NE(std::string(v.default_value), "") << v.name;
    EXPECT_NE(std::string(v.help), "") << v.name;
  }
  for (const char* n :
       {"FLASHDLLM_ATTENTION", "FLASHDLLM_CUDNN_ATTENTION", "FLASHDLLM_GEMM_TUNE", "FLASHDLLM_GEMM_BUCKETS",
        "FLASHDLLM_GEMM_PICKS", "FLASHDLLM_CUDA_GRAPHS", "FLASHDLLM_CUDA_SYNC", "FLASHDLLM_PINNED_STAGING",
        "FLASHDLLM_ROW_PADDING", "FLASHDLLM_TP_WORLD", "FLASHDLLM_TP_RANK", "FLASHDLLM_TP_ID_FILE", "FLASHDLLM_COMMIT",
        "NCCL_NVLS_ENABLE"})
    EXPECT_TRUE(names.count(n)) << n << " is not in the registry";
  const ScopedEnv env("FLASHDLLM_GEMM_TUNE", "4");
  const std::string listing = env_listing();
  for (const std::string& n : names) EXPECT_NE(listing.find(n), std::string::npos) << n;
  EXPECT_NE(listing.find("'4'"), std::string::npos) << "the current value is shown";
}

TEST(EnvRegistry, UnsetOrEmptyKeepsTheDefaults) {
  for (const EnvVar& v : env_registry())
    for (const char* value : {static_cast<const char*>(nullptr), ""}) {
      const EnvSettings s = with(v.name, value);
      EXPECT_EQ(s.backend.attention, AttentionKernel::kAuto) << v.name;
      EXPECT_EQ(s.backend.gemm_picks, GemmPicks::kBuiltin) << v.name;
      EXPECT_FALSE(s.backend.row_padding.has_value()) << v.name;
      EXPECT_TRUE(s.backend.cuda_graphs) << v.name;
      EXPECT_EQ(s.launch.world, 1) << v.name;
      EXPECT_EQ(s.commit, "") << v.name;
    }
}

// FLASHDLLM_COMMIT: the commit a report names, as given (the device scripts set it for a copied tree).
TEST(EnvRegistry, CommitLabel) {
  EXPECT_EQ(with("FLASHDLLM_COMMIT", "3cca3fd").commit, "3cca3fd");
  EXPECT_EQ(with("FLASHDLLM_COMMIT", nullptr).commit, "");
}

TEST(EnvRegistry, ChoicesReachTheOptions) {
  for (const auto& [name, k] : {std::pair<const char*, AttentionKernel>{"auto", AttentionKernel::kAuto},
                                {"reference", AttentionKernel::kReference},
                                {"m64n64", AttentionKernel::kM64N64},
                                {"wgmma128", AttentionKernel::kWgmma128},
                                {"wgmma64", AttentionKernel::kWgmma64}})
    EXPECT_EQ(with("FLASHDLLM_ATTENTION", name).backend.attention, k) << name;
  for (const auto& [name, c] : {std::pair<const char*, CudnnAttention>{"auto", CudnnAttention::kAuto},
                                {"prefill", CudnnAttention::kPrefill},
                                {"all", CudnnAttention::kAll},
                                {"off", CudnnAttention::kOff}})
    EXPECT_EQ(with("FLASHDLLM_CUDNN_ATTENTION", name).backend.cudnn_attention, c) << name;
  for (const auto& [name, b] : {std::pair<const char*, GemmBuckets>{"quarter", GemmBuckets::kQuarterOctave},
                                {"pow2", GemmBuckets::kPowerOfTwo},
                                {"exact", GemmBuckets::kExact}})
    EXPECT_EQ(with("FLASHDLLM_GEMM_BUCKETS", name).backend.gemm_buckets, b) << name;
  EXPECT_EQ(with("FLASHDLLM_GEMM_TUNE", "8").backend.gemm_tune, 8);
  EXPECT_EQ(with("FLASHDLLM_GEMM_PICKS", "off").backend.gemm_picks, GemmPicks::kOff);
  const EnvSettings file = with("FLASHDLLM_GEMM_PICKS", "/tmp/picks.json");
  EXPECT_EQ(file.backend.gemm_picks, GemmPicks::kFile);
  EXPECT_EQ(file.backend.gemm_picks_file, "/tmp/picks.json");
}

// Switches: 1/0 (and on/off, true/false, yes/no) override the default either way; FLASHDLLM_ROW_PADDING
// unset keeps the backend's own default (nullopt: CUDA on, CPU off, backend_policy.h).
TEST(EnvRegistry, SwitchesOverrideTheDefaults) {
  EXPECT_FALSE(with("FLASHDLLM_CUDA_GRAPHS", "0").backend.cuda_graphs);
  EXPECT_TRUE(with("FLASHDLLM_CUDA_GRAPHS", "1").backend.cuda_graphs);
  EXPECT_EQ(with("FLASHDLLM_CUDA_SYNC", "1").backend.sync, SyncMode::kEveryOp);
  EXPECT_EQ(with("FLASHDLLM_CUDA_SYNC", "0").backend.sync, SyncMode::kAsync);
  EXPECT_FALSE(with("FLASHDLLM_PINNED_STAGING", "0").backend.pinned_staging);
  EXPECT_TRUE(with("FLASHDLLM_FP8_DEQUANTIZE", "1").backend.fp8_dequantize);
  EXPECT_FALSE(with("FLASHDLLM_FP8_DEQUANTIZE", nullptr).backend.fp8_dequantize);
  EXPECT_FALSE(with("FLASHDLLM_FP8_DEQUANTIZE", "0").backend.fp8_dequantize);
  EXPECT_EQ(with("FLASHDLLM_ROW_PADDING", "0").backend.row_padding, std::optional<bool>(false));
  EXPECT_EQ(with("FLASHDLLM_ROW_PADDING", "1").backend.row_padding, std::optional<bool>(true));
  EXPECT_EQ(with("FLASHDLLM_ROW_PADDING", "yes").backend.row_padding, std::optional<bool>(true));
  EXPECT_EQ(with("FLASHDLLM_ROW_PADDING", "off").backend.row_padding, std::optional<bool>(false));
  EXPECT_FALSE(with("FLASHDLLM_ROW_PADDING", nullptr).backend.row_padding.has_value());
  EXPECT_FALSE(with("FLASHDLLM_ROW_PADDING", "").backend.row_padding.has_value());
  EXPECT_NO_THROW(with("NCCL_NVLS_ENABLE", "1"));  // overridden by the communicator, with a warning
}

TEST(EnvRegistry, InvalidValuesNameTheVariable) {
  const std::pair<const char*, const char*> bad[] = {
      {"FLASHDLLM_ATTENTION", "m256n64"},   {"FLASHDLLM_CUDNN_ATTENTION", "sometimes"},
      {"FLASHDLLM_GEMM_TUNE", "17"},        {"FLASHDLLM_GEMM_TUNE", "x"},
      {"FLASHDLLM_GEMM_TUNE", "-1"},        {"FLASHDLLM_GEMM_BUCKETS", "octave"},
      {"FLASHDLLM_CUDA_GRAPHS", "maybe"},   {"FLASHDLLM_CUDA_SYNC", "2"},
      {"FLASHDLLM_PINNED_STAGING", "nope"}, {"FLASHDLLM_ROW_PADDING", "64"},
      {"FLASHDLLM_TP_WORLD", "0"},          {"FLASHDLLM_TP_RANK", "x"},
      {"NCCL_NVLS_ENABLE", "sure"},         {"FLASHDLLM_ATTENTION", "wgmma"},  // no longer shipped (bench/kernels/)
  };
  for (const auto& [name, value] : bad) {
    const std::string msg = refusal(name, value);
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_NE(msg.find(value), std::string::npos) << msg;
  }
  // The accepted values are listed.
  EXPECT_NE(refusal("FLASHDLLM_CUDNN_ATTENTION", "x").find("prefill"), std::string::npos);
  EXPECT_NE(refusal("FLASHDLLM_ATTENTION", "x").find("wgmma64"), std::string::npos);
}

// FLASHDLLM_TP_*: world 1 without them; a world > 1 needs an id file; the rank must be inside the world.
TEST(EnvRegistry, TensorParallelLaunch) {
  const ScopedEnv w0("FLASHDLLM_TP_WORLD", nullptr), r0("FLASHDLLM_TP_RANK", nullptr),
      f0("FLASHDLLM_TP_ID_FILE", nullptr);
  TensorParallelLaunch l = env_settings().launch;
  EXPECT_EQ(l.world, 1);
  EXPECT_EQ(l.rank, 0);
  {
    const ScopedEnv w("FLASHDLLM_TP_WORLD", "4"), r("FLASHDLLM_TP_RANK", "3");
    EXPECT_THROW(env_settings(), Error);  // world 4 without an id file
    const ScopedEnv f("FLASHDLLM_TP_ID_FILE", "/tmp/fdllm-nccl-id");
    l = env_settings().launch;
    EXPECT_EQ(l.world, 4);
    EXPECT_EQ(l.rank, 3);
    EXPECT_EQ(l.id_file, "/tmp/fdllm-nccl-id");
    const ScopedEnv r4("FLASHDLLM_TP_RANK", "4");
    EXPECT_NE(refusal("FLASHDLLM_TP_RANK", "4").find("FLASHDLLM_TP_RANK"), std::string::npos);
    EXPECT_NE(refusal("FLASHDLLM_TP_RANK", "x").find("FLASHDLLM_TP_RANK"), std::string::npos);
  }
}

}  // namespace
}  // namespace flashdllm::cli
