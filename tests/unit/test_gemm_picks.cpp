// GEMM pick tables (backend/cuda/gemm_picks.h): the file format's validation, and which table the
// CUDA backend applies for a device / cuBLASLt version / bucket rule. Host code of the CUDA backend:
// CUDA builds only (no GPU needed).
#include <gtest/gtest.h>

#if FLASHDLLM_HAVE_CUDA
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cuda/gemm_picks.h"
#include "common/test_paths.h"
#include "flashdllm/status.h"

namespace flashdllm {
namespace {

using kernels::GemmBuckets;
using kernels::GemmOut;

nlohmann::json valid_table() {
  return nlohmann::json::parse(R"({
    "device": "Test GPU", "cublaslt_version": 130100, "buckets": "quarter",
    "picks": [
      {"rows": 640, "N": 12288, "K": 4096, "out": "BF16", "accumulate": false, "candidate": 3, "speedup": 1.06},
      {"rows": 4096, "N": 4096, "K": 12288, "out": "BF16", "accumulate": true, "candidate": 1},
      {"rows": 512, "N": 126464, "K": 4096, "out": "F32", "accumulate": false, "candidate": 15}
    ]})");
}

// The message of the Error(kInvalidArgument) `f` throws ("" when it throws nothing or another code).
std::string invalid_argument_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code() == ErrorCode::kInvalidArgument ? std::string(e.what()) : "code " + std::to_string(int(e.code()));
  }
  return "";
}

TEST(GemmPickTable, ParsesEveryField) {
  const GemmPickTable t = parse_gemm_pick_table(valid_table(), "t.json");
  EXPECT_EQ(t.device, "Test GPU");
  EXPECT_EQ(t.cublaslt_version, 130100);
  EXPECT_EQ(t.buckets, GemmBuckets::kQuarterOctave);
  ASSERT_EQ(t.picks.size(), 3u);
  EXPECT_EQ(t.picks[0].rows, 640);
  EXPECT_EQ(t.picks[0].N, 12288);
  EXPECT_EQ(t.picks[0].K, 4096);
  EXPECT_EQ(t.picks[0].out, GemmOut::kBF16);
  EXPECT_FALSE(t.picks[0].accumulate);
  EXPECT_EQ(t.picks[0].candidate, 3);
  EXPECT_TRUE(t.picks[1].accumulate);
  EXPECT_EQ(t.picks[2].out, GemmOut::kF32);
  EXPECT_EQ(t.picks[2].candidate, 15);
}

TEST(GemmPickTable, NamesTheBadFieldAndEntry) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expect;  // a part of the message
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j.erase("device"); }, "t.json: missing field 'device'"},
      {[](nlohmann::json& j) { j["cublaslt_version"] = "13"; }, "'cublaslt_version' must be a positive integer"},
      {[](nlohmann::json& j) { j["buckets"] = "octave"; }, "'buckets' must be quarter, pow2 or exact"},
      {[](nlohmann::json& j) { j["picks"] = nlohmann::json::object(); }, "'picks' must be an array"},
      {[](nlohmann::json& j) { j["picks"][1].erase("K"); }, "t.json: picks[1]: missing field 'K'"},
      {[](nlohmann::json& j) { j["picks"][0]["N"] = -4; }, "picks[0]: 'N' must be an integer in [1, "},
      {[](nlohmann::json& j) { j["picks"][0]["rows"] = 1.5; }, "picks[0]: 'rows' must be an integer"},
      {[](nlohmann::json& j) { j["picks"][2]["out"] = "F16"; }, "picks[2]: 'out' must be BF16 or F32"},
      {[](nlohmann::json& j) { j["picks"][2]["accumulate"] = 0; }, "picks[2]: 'accumulate' must be true or false"},
      {[](nlohmann::json& j) { j["picks"][0]["candidate"] = 16; },
       "picks[0]: 'candidate' must be an integer in [0, 16)"},
      {[](nlohmann::json& j) { j["picks"][0]["candidate"] = -1; }, "'candidate' must be an integer in [0, 16)"},
      // 600 rows are not a quarter octave (640 is the next); under pow2, 640 is not a bucket either.
      {[](nlohmann::json& j) { j["picks"][0]["rows"] = 600; },
       "picks[0]: 'rows' 600 is not a row count of the quarter"},
      {[](nlohmann::json& j) { j["buckets"] = "pow2"; },
       "'rows' 640 is not a row count of the pow2 buckets (the next is 1024)"},
      {[](nlohmann::json& j) { j["picks"].push_back(j["picks"][0]); }, "picks[3]: the same shape as picks[0]"},
      {[](nlohmann::json& j) { j["picks"][1] = 7; }, "picks[1]: must be an object"},
      {[](nlohmann::json& j) { j = nlohmann::json::array(); }, "must be a JSON object"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = valid_table();
    c.edit(j);
    const std::string msg = invalid_argument_message([&] { parse_gemm_pick_table(j, "t.json"); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: '" << msg << "'";
  }
  // Shapes differing only in output type or beta are different shapes.
  nlohmann::json j = valid_table();
  j["picks"].push_back(j["picks"][0]);
  j["picks"][3]["accumulate"] = true;
  EXPECT_EQ(parse_gemm_pick_table(j, "t.json").picks.size(), 4u);
}

TEST(GemmPickTable, ResolvesFileBuiltInAndOff) {
  const auto dir = test::temp_dir();
  const std::string path = (dir / "picks.json").string();
  std::ofstream(path) << valid_table().dump();
  const auto picks = resolve_gemm_picks(path.c_str(), "Test GPU", 130100, GemmBuckets::kQuarterOctave);
  EXPECT_EQ(picks.size(), 3u);
  EXPECT_TRUE(resolve_gemm_picks("off", "Test GPU", 130100, GemmBuckets::kQuarterOctave).empty());
  // A named file must match: device, version and bucket rule are each checked.
  EXPECT_NE(invalid_argument_message([&] {
              resolve_gemm_picks(path.c_str(), "Other GPU", 130100, GemmBuckets::kQuarterOctave);
            }).find("'device' is 'Test GPU' but this GPU is 'Other GPU'"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              resolve_gemm_picks(path.c_str(), "Test GPU", 130200, GemmBuckets::kQuarterOctave);
            }).find("'cublaslt_version' is 130100 but the loaded cuBLASLt is 130200"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              resolve_gemm_picks(path.c_str(), "Test GPU", 130100, GemmBuckets::kPowerOfTwo);
            }).find("'buckets' is quarter but the GEMMs use pow2"),
            std::string::npos);
  // Unreadable and malformed files name the file.
  const std::string missing = (dir / "none.json").string();
  try {
    resolve_gemm_picks(missing.c_str(), "Test GPU", 130100, GemmBuckets::kQuarterOctave);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  std::ofstream(path) << "{\"device\": ";
  EXPECT_NE(invalid_argument_message([&] { read_gemm_pick_table(path); }).find(path + ": invalid JSON"),
            std::string::npos);
  // Without a matching built-in table there are no picks; every built-in table is valid and applies
  // to the device, version and rule it names.
  EXPECT_TRUE(resolve_gemm_picks(nullptr, "No Such GPU", 1, GemmBuckets::kQuarterOctave).empty());
  EXPECT_TRUE(resolve_gemm_picks("", "No Such GPU", 1, GemmBuckets::kQuarterOctave).empty());
  for (const GemmPickTable& t : builtin_gemm_pick_tables()) {
    SCOPED_TRACE(t.device);
    EXPECT_FALSE(t.picks.empty());
    EXPECT_EQ(resolve_gemm_picks(nullptr, t.device, t.cublaslt_version, t.buckets).size(), t.picks.size());
    EXPECT_TRUE(resolve_gemm_picks(nullptr, t.device, t.cublaslt_version + 1, t.buckets).empty());
  }
}

}  // namespace
}  // namespace flashdllm
#endif
