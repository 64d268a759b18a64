// GEMM pick tables (backend/cuda/gemm_picks.h): the file format's validation, and which table the
// CUDA backend applies for a GPU / cuBLASLt version / workspace / bucket rule. Host code, built in
// every configuration (no GPU needed), so the sanitizer builds run it too.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/gemm_picks.h"
#include "common/test_paths.h"
#include "flashdllm/status.h"

namespace flashdllm {
namespace {

using kernels::GemmBuckets;
using kernels::GemmOut;

const GemmPickTarget kTarget{"Test GPU", 132, 130100, 33554432, GemmBuckets::kQuarterOctave};

nlohmann::json valid_table() {
  return nlohmann::json::parse(R"({
    "device": "Test GPU", "sm_count": 132, "cublaslt_version": 130100, "workspace_bytes": 33554432,
    "buckets": "quarter",
    "picks": [
      {"rows": 640, "N": 12288, "K": 4096, "out": "BF16", "accumulate": false, "candidate": 3, "speedup": 1.06},
      {"rows": 4096, "N": 4096, "K": 12288, "out": "BF16", "accumulate": true, "candidate": 1},
      {"rows": 512, "N": 126464, "K": 4096, "out": "F32", "accumulate": false, "candidate": 15}
    ]})");
}

// The message of the Error(kInvalidArgument) `f` throws ("" when it throws nothing, else the code).
std::string invalid_argument_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code() == ErrorCode::kInvalidArgument ? std::string(e.what()) : "code " + std::to_string(int(e.code()));
  }
  return "";
}

// The row buckets sharing a cuBLASLt algorithm (kernels::gemm_bucket_rows, gemm_choice.h).
TEST(GemmBuckets, BucketRowsPerMode) {
  using kernels::gemm_bucket_rows;
  using kernels::GemmBuckets;
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> cases = {
      // T, power of two, quarter octave, exact
      {1, 16, 16, 16},        {16, 16, 16, 16},         {17, 32, 20, 17},         {20, 32, 20, 20},
      {21, 32, 24, 21},       {29, 32, 32, 29},         {128, 128, 128, 128},     {129, 256, 160, 129},
      {513, 1024, 640, 513},  {640, 1024, 640, 640},    {641, 1024, 768, 641},    {769, 1024, 896, 769},
      {897, 1024, 1024, 897}, {3072, 4096, 3072, 3072}, {3073, 4096, 3584, 3073}, {4096, 4096, 4096, 4096}};
  for (const auto& [T, pow2, quarter, exact] : cases) {
    SCOPED_TRACE("T=" + std::to_string(T));
    EXPECT_EQ(gemm_bucket_rows(T, GemmBuckets::kPowerOfTwo), pow2);
    EXPECT_EQ(gemm_bucket_rows(T, GemmBuckets::kQuarterOctave), quarter);
    EXPECT_EQ(gemm_bucket_rows(T, GemmBuckets::kExact), exact);
  }
  for (GemmBuckets b : {GemmBuckets::kQuarterOctave, GemmBuckets::kPowerOfTwo, GemmBuckets::kExact})
    EXPECT_EQ(kernels::gemm_buckets_from_name(kernels::gemm_buckets_name(b)), b);
  EXPECT_FALSE(kernels::gemm_buckets_from_name("octave").has_value());
  EXPECT_FALSE(kernels::gemm_buckets_from_name("").has_value());
  static_assert(kernels::gemm_bucket_rows(int64_t{1} << 62, GemmBuckets::kQuarterOctave) == int64_t{1} << 62);
  EXPECT_EQ(gemm_bucket_rows(INT64_MAX, GemmBuckets::kPowerOfTwo), int64_t{1} << 62);  // no overflow
}

TEST(GemmPickTable, ParsesEveryField) {
  const GemmPickTable t = parse_gemm_pick_table(valid_table(), "t.json");
  EXPECT_TRUE(t.target == kTarget);
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
      {[](nlohmann::json& j) { j.erase("sm_count"); }, "t.json: missing field 'sm_count'"},
      {[](nlohmann::json& j) { j["sm_count"] = 0; }, "'sm_count' must be an integer in [1, "},
      {[](nlohmann::json& j) { j["cublaslt_version"] = "13"; }, "'cublaslt_version' must be an integer in [1, "},
      {[](nlohmann::json& j) { j["workspace_bytes"] = 3.5; }, "'workspace_bytes' must be an integer in [1, "},
      {[](nlohmann::json& j) { j["buckets"] = "octave"; }, "'buckets' must be quarter, pow2 or exact"},
      {[](nlohmann::json& j) { j["picks"] = nlohmann::json::object(); }, "'picks' must be an array"},
      {[](nlohmann::json& j) { j["picks"][1].erase("K"); }, "t.json: picks[1]: missing field 'K'"},
      {[](nlohmann::json& j) { j["picks"][0]["N"] = -4; }, "picks[0]: 'N' must be an integer in [1, "},
      {[](nlohmann::json& j) { j["picks"][0]["rows"] = 1.5; }, "picks[0]: 'rows' must be an integer"},
      {[](nlohmann::json& j) { j["picks"][0]["rows"] = uint64_t{1} << 63; }, "picks[0]: 'rows' must be an integer"},
      {[](nlohmann::json& j) { j["picks"][2]["out"] = "F16"; }, "picks[2]: 'out' must be BF16 or F32"},
      {[](nlohmann::json& j) { j["picks"][2]["accumulate"] = 0; }, "picks[2]: 'accumulate' must be true or false"},
      {[](nlohmann::json& j) { j["picks"][0]["candidate"] = 16; },
       "picks[0]: 'candidate' must be an integer in [0, 16)"},
      {[](nlohmann::json& j) { j["picks"][0]["candidate"] = -1; }, "'candidate' must be an integer in [0, 16)"},
      {[](nlohmann::json& j) { j["picks"][0]["candidate"] = int64_t{1} << 32; }, "'candidate' must be an integer"},
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
  EXPECT_EQ(resolve_gemm_picks(GemmPicks::kFile, path, kTarget).size(), 3u);
  EXPECT_TRUE(resolve_gemm_picks(GemmPicks::kOff, "", kTarget).empty());
  // A named file must match: each field of the target is checked, and the first difference named.
  const std::vector<std::pair<std::function<void(GemmPickTarget&)>, std::string>> differ = {
      {[](GemmPickTarget& t) { t.device = "Other GPU"; }, "'device' is 'Test GPU' but this GPU is 'Other GPU'"},
      {[](GemmPickTarget& t) { t.sm_count = 114; }, "'sm_count' is 132 but this GPU has 114"},
      {[](GemmPickTarget& t) { t.cublaslt_version = 130200; },
       "'cublaslt_version' is 130100 but the loaded cuBLASLt is 130200"},
      {[](GemmPickTarget& t) { t.workspace_bytes = 4096; }, "'workspace_bytes' is 33554432 but the GEMMs use 4096"},
      {[](GemmPickTarget& t) { t.buckets = GemmBuckets::kPowerOfTwo; }, "'buckets' is quarter but the GEMMs use pow2"},
  };
  for (const auto& [edit, expect] : differ) {
    GemmPickTarget running = kTarget;
    edit(running);
    const std::string msg = invalid_argument_message([&] { resolve_gemm_picks(GemmPicks::kFile, path, running); });
    EXPECT_NE(msg.find("FLASHDLLM_GEMM_PICKS=" + path + ": " + expect), std::string::npos) << msg;
  }
  // Unreadable and malformed files name the file; a key given twice is refused.
  const std::string missing = (dir / "none.json").string();
  try {
    resolve_gemm_picks(GemmPicks::kFile, missing, kTarget);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  std::ofstream(path) << "{\"device\": ";
  EXPECT_NE(invalid_argument_message([&] { read_gemm_pick_table(path); }).find(path + ": invalid JSON"),
            std::string::npos);
  std::string twice = valid_table().dump();
  twice.insert(twice.find("\"candidate\":3"), "\"candidate\":1,");
  std::ofstream(path) << twice;
  EXPECT_NE(invalid_argument_message([&] { read_gemm_pick_table(path); }).find("duplicate key 'candidate'"),
            std::string::npos);
  // Without a matching built-in table there are no picks.
  EXPECT_TRUE(
      resolve_gemm_picks(GemmPicks::kBuiltin, "", {"No Such GPU", 1, 1, 1, GemmBuckets::kQuarterOctave}).empty());
  // A file source without a file is refused.
  EXPECT_NE(invalid_argument_message([&] { resolve_gemm_picks(GemmPicks::kFile, "", kTarget); }).find("gemm_picks"),
            std::string::npos);
}

// Every built-in table parses, has picks, and applies exactly to the target it names.
TEST(GemmPickTable, BuiltInTablesApplyToTheirTargetOnly) {
  const std::vector<GemmPickTable> tables = builtin_gemm_pick_tables();
  EXPECT_FALSE(tables.empty()) << "the H200 table (src/backend/cuda/gemm_picks/) is not built in";
  for (const GemmPickTable& t : tables) {
    SCOPED_TRACE(t.target.device);
    EXPECT_FALSE(t.picks.empty());
    const auto picks = resolve_gemm_picks(GemmPicks::kBuiltin, "", t.target);
    ASSERT_EQ(picks.size(), t.picks.size());
    for (size_t i = 0; i < picks.size(); ++i) {
      EXPECT_EQ(picks[i].rows, t.picks[i].rows);
      EXPECT_EQ(picks[i].candidate, t.picks[i].candidate);
    }
    GemmPickTarget other = t.target;
    other.cublaslt_version += 1;
    EXPECT_TRUE(resolve_gemm_picks(GemmPicks::kBuiltin, "", other).empty());
    other = t.target;
    other.sm_count -= 1;
    EXPECT_TRUE(resolve_gemm_picks(GemmPicks::kBuiltin, "", other).empty());
  }
}

}  // namespace
}  // namespace flashdllm
