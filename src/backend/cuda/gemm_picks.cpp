#include "backend/cuda/gemm_picks.h"

#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/log.h"
#include "io/file.h"

namespace flashdllm {
namespace {

// {file name, JSON text} of every built-in table (generated from gemm_picks/*.json by CMake).
const std::vector<std::pair<std::string, std::string>>& builtin_tables() {
  static const std::vector<std::pair<std::string, std::string>> tables = {
#include "gemm_picks_builtin.inc"
  };
  return tables;
}

const nlohmann::json& field(const nlohmann::json& j, const char* name, const std::string& where) {
  const auto it = j.find(name);
  FDLLM_CHECK_ARG(it != j.end(), "{}: missing field '{}'", where, name);
  return *it;
}

int64_t positive_int(const nlohmann::json& j, const char* name, const std::string& where, int64_t max) {
  const nlohmann::json& v = field(j, name, where);
  FDLLM_CHECK_ARG(v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() <= max,
                  "{}: '{}' must be an integer in [1, {}], got {}", where, name, max, v.dump());
  return v.get<int64_t>();
}

std::string string_field(const nlohmann::json& j, const char* name, const std::string& where) {
  const nlohmann::json& v = field(j, name, where);
  FDLLM_CHECK_ARG(v.is_string(), "{}: '{}' must be a string, got {}", where, name, v.dump());
  return v.get<std::string>();
}

kernels::GemmBuckets buckets_from_name(const std::string& s, const std::string& where) {
  for (kernels::GemmBuckets b :
       {kernels::GemmBuckets::kQuarterOctave, kernels::GemmBuckets::kPowerOfTwo, kernels::GemmBuckets::kExact})
    if (s == gemm_buckets_name(b)) return b;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: 'buckets' must be quarter, pow2 or exact, got '{}'", where, s);
}

}  // namespace

const char* gemm_buckets_name(kernels::GemmBuckets buckets) noexcept {
  switch (buckets) {
    case kernels::GemmBuckets::kPowerOfTwo: return "pow2";
    case kernels::GemmBuckets::kExact: return "exact";
    case kernels::GemmBuckets::kQuarterOctave: break;
  }
  return "quarter";
}

GemmPickTable parse_gemm_pick_table(const nlohmann::json& j, const std::string& what) {
  FDLLM_CHECK_ARG(j.is_object(), "{}: a GEMM pick table must be a JSON object", what);
  GemmPickTable t;
  t.device = string_field(j, "device", what);
  const nlohmann::json& ver = field(j, "cublaslt_version", what);
  FDLLM_CHECK_ARG(ver.is_number_integer() && ver.get<int64_t>() > 0,
                  "{}: 'cublaslt_version' must be a positive integer, got {}", what, ver.dump());
  t.cublaslt_version = ver.get<int64_t>();
  t.buckets = buckets_from_name(string_field(j, "buckets", what), what);
  const nlohmann::json& picks = field(j, "picks", what);
  FDLLM_CHECK_ARG(picks.is_array(), "{}: 'picks' must be an array", what);
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, size_t> seen;
  for (size_t i = 0; i < picks.size(); ++i) {
    const std::string where = fmt::format("{}: picks[{}]", what, i);
    const nlohmann::json& e = picks[i];
    FDLLM_CHECK_ARG(e.is_object(), "{}: must be an object", where);
    kernels::GemmPick p;
    p.rows = positive_int(e, "rows", where, int64_t{1} << 31);
    p.N = positive_int(e, "N", where, int64_t{1} << 31);
    p.K = positive_int(e, "K", where, int64_t{1} << 31);
    const std::string out = string_field(e, "out", where);
    FDLLM_CHECK_ARG(out == "BF16" || out == "F32", "{}: 'out' must be BF16 or F32, got '{}'", where, out);
    p.out = out == "F32" ? kernels::GemmOut::kF32 : kernels::GemmOut::kBF16;
    const nlohmann::json& acc = field(e, "accumulate", where);
    FDLLM_CHECK_ARG(acc.is_boolean(), "{}: 'accumulate' must be true or false, got {}", where, acc.dump());
    p.accumulate = acc.get<bool>();
    const nlohmann::json& c = field(e, "candidate", where);
    FDLLM_CHECK_ARG(c.is_number_integer() && c.get<int64_t>() >= 0 && c.get<int64_t>() < kernels::kMaxGemmCandidates,
                    "{}: 'candidate' must be an integer in [0, {}), got {}", where, kernels::kMaxGemmCandidates,
                    c.dump());
    p.candidate = c.get<int>();
    FDLLM_CHECK_ARG(kernels::gemm_bucket_rows(p.rows, t.buckets) == p.rows,
                    "{}: 'rows' {} is not a row count of the {} buckets (the next is {})", where, p.rows,
                    gemm_buckets_name(t.buckets), kernels::gemm_bucket_rows(p.rows, t.buckets));
    const auto [it, added] =
        seen.emplace(std::tuple{p.rows, p.N, p.K, p.out == kernels::GemmOut::kF32, p.accumulate}, i);
    FDLLM_CHECK_ARG(added, "{}: the same shape as picks[{}]", where, it->second);
    t.picks.push_back(p);
  }
  return t;
}

GemmPickTable read_gemm_pick_table(const std::string& path) {
  const std::string text = read_regular_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: invalid JSON: {}", path, e.what());
  }
  return parse_gemm_pick_table(j, path);
}

std::vector<GemmPickTable> builtin_gemm_pick_tables() {
  std::vector<GemmPickTable> tables;
  for (const auto& [name, text] : builtin_tables())
    tables.push_back(parse_gemm_pick_table(nlohmann::json::parse(text), "built-in " + name));
  return tables;
}

std::vector<kernels::GemmPick> resolve_gemm_picks(const char* env, const std::string& device, int64_t cublaslt_version,
                                                  kernels::GemmBuckets buckets) {
  const auto chosen = [&](const std::string& source, std::vector<kernels::GemmPick> picks) {
    logger().info("CUDA backend: cuBLASLt {} row buckets; algorithm picks: {} ({} shapes)", gemm_buckets_name(buckets),
                   source, picks.size());
    return picks;
  };
  if (env != nullptr && std::strcmp(env, "off") == 0) {
    return chosen("none (FLASHDLLM_GEMM_PICKS=off)", {});
  }
  if (env != nullptr && *env != '\0') {
    const GemmPickTable t = read_gemm_pick_table(env);
    const std::string what = fmt::format("FLASHDLLM_GEMM_PICKS={}", env);
    FDLLM_CHECK_ARG(t.device == device, "{}: 'device' is '{}' but this GPU is '{}'", what, t.device, device);
    FDLLM_CHECK_ARG(t.cublaslt_version == cublaslt_version,
                    "{}: 'cublaslt_version' is {} but the loaded cuBLASLt is {}", what, t.cublaslt_version,
                    cublaslt_version);
    FDLLM_CHECK_ARG(t.buckets == buckets, "{}: 'buckets' is {} but the GEMMs use {} (FLASHDLLM_GEMM_BUCKETS)", what,
                    gemm_buckets_name(t.buckets), gemm_buckets_name(buckets));
    return chosen(env, t.picks);
  }
  for (const auto& [name, text] : builtin_tables()) {
    const GemmPickTable t = parse_gemm_pick_table(nlohmann::json::parse(text), "built-in " + name);
    if (t.device == device && t.cublaslt_version == cublaslt_version && t.buckets == buckets) {
      return chosen("built-in " + name, t.picks);
    }
  }
  return chosen("none (no built-in table for this GPU, cuBLASLt version and buckets)", {});
}

}  // namespace flashdllm
