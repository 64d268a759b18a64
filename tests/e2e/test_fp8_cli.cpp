// The precision flags of the flashdllm command (apps/cli/options.cpp, flashdllm/precision.h):
// `info` reports what --quantization / --kv-cache-dtype make of the embedded small model (and the
// smaller weights), `generate` runs with both, an unknown value is refused naming the flag.
#include <gtest/gtest.h>

#include <string>

#include "common/cli_runner.h"

namespace flashdllm {
namespace {

using test::run_flashdllm;

TEST(Fp8Cli, InfoReportsThePrecision) {
  const test::CommandResult plain = run_flashdllm("info", 30);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("precision         weights as stored (no quantisation)"), std::string::npos)
      << plain.output;
  EXPECT_NE(plain.output.find("K/V cache auto"), std::string::npos) << plain.output;
  const test::CommandResult fp8 = run_flashdllm("info --quantization fp8 --kv-cache-dtype fp8", 30);
  ASSERT_EQ(fp8.exit_code, 0) << fp8.output;
  EXPECT_NE(fp8.output.find("weights block FP8, quantised at load"), std::string::npos) << fp8.output;
  EXPECT_NE(fp8.output.find("K/V cache fp8 (e4m3"), std::string::npos) << fp8.output;
  // F32 on the CPU: 0.046 GiB unquantised, 0.015 with the linear layers in one byte.
  auto gib = [](const std::string& out) {
    const size_t at = out.find("weights in memory ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 18));
  };
  EXPECT_LT(gib(fp8.output), 0.5 * gib(plain.output)) << fp8.output;
}

TEST(Fp8Cli, GenerateRunsWithBothAndRefusesUnknownValues) {
  const test::CommandResult r = run_flashdllm(
      "generate --prompt-ids 5,6,7 --gen-length 32 --block-length 32 --quantization fp8 --kv-cache-dtype fp8 --threads "
      "1",
      120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const test::CommandResult bad = run_flashdllm("generate --prompt-ids 5 --quantization int4", 30);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--quantization"), std::string::npos) << bad.output;
  const test::CommandResult bad_kv = run_flashdllm("info --kv-cache-dtype fp16", 30);
  EXPECT_NE(bad_kv.exit_code, 0);
  EXPECT_NE(bad_kv.output.find("--kv-cache-dtype"), std::string::npos) << bad_kv.output;
}

}  // namespace
}  // namespace flashdllm
