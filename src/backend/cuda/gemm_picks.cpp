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
const std::vector<std::pair<std::string, std::string>>& builtin_texts() {
  static const std::vector<std::pair<std::string, std::string>> tables = {
#include "gemm_picks_builtin.inc"
  };
  return tables;
}

// Parses `text` as JSON, refusing duplicate keys; errors are Error(kInvalidArgument) naming `what`.
nlohmann::json parse_text(const std::string& text, const std::string& what) {
  try {
    return parse_json_text(text, what, /*reject_duplicate_keys=*/true);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidCheckpoint) throw;
    FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}", e.what());
  }
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
  if (const auto b = kernels::gemm_buckets_from_name(s)) return *b;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: 'buckets' must be quarter, pow2 or exact, got '{}'", where, s);
}

// The first field in which `table` differs from `running`, as "'<field>' is <table's> but <running's>".
std::string first_difference(const GemmPickTarget& table, const GemmPickTarget& running) {
  if (table.device != running.device)
    return fmt::format("'device' is '{}' but this GPU is '{}'", table.device, running.device);
  if (table.sm_count != running.sm_count)
    return fmt::format("'sm_count' is {} but this GPU has {}", table.sm_count, running.sm_count);
  if (table.cublaslt_version != running.cublaslt_version)
    return fmt::format("'cublaslt_version' is {} but the loaded cuBLASLt is {}", table.cublaslt_version,
                       running.cublaslt_version);
  if (table.workspace_bytes != running.workspace_bytes)
    return fmt::format("'workspace_bytes' is {} but the GEMMs use {}", table.workspace_bytes, running.workspace_bytes);
  return fmt::format("'buckets' is {} but the GEMMs use {} (FLASHDLLM_GEMM_BUCKETS)",
                     kernels::gemm_buckets_name(table.buckets), kernels::gemm_buckets_name(running.buckets));
}

}  // namespace

GemmPickTable parse_gemm_pick_table(const nlohmann::json& j, const std::string& what) {
  FDLLM_CHECK_ARG(j.is_object(), "{}: a GEMM pick table must be a JSON object", what);
  GemmPickTable t;
  t.target.device = string_field(j, "device", what);
  t.target.sm_count = positive_int(j, "sm_count", what, int64_t{1} << 20);
  t.target.cublaslt_version = positive_int(j, "cublaslt_version", what, int64_t{1} << 40);
  t.target.workspace_bytes = positive_int(j, "workspace_bytes", what, int64_t{1} << 40);
  t.target.buckets = buckets_from_name(string_field(j, "buckets", what), what);
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
    p.candidate = static_cast<int>(c.get<int64_t>());
    FDLLM_CHECK_ARG(kernels::gemm_bucket_rows(p.rows, t.target.buckets) == p.rows,
                    "{}: 'rows' {} is not a row count of the {} buckets (the next is {})", where, p.rows,
                    kernels::gemm_buckets_name(t.target.buckets), kernels::gemm_bucket_rows(p.rows, t.target.buckets));
    const auto [it, added] =
        seen.emplace(std::tuple{p.rows, p.N, p.K, p.out == kernels::GemmOut::kF32, p.accumulate}, i);
    FDLLM_CHECK_ARG(added, "{}: the same shape as picks[{}]", where, it->second);
    t.picks.push_back(p);
  }
  return t;
}

GemmPickTable read_gemm_pick_table(const std::string& path) {
  return parse_gemm_pick_table(parse_text(read_regular_file(path), path), path);
}

std::vector<GemmPickTable> builtin_gemm_pick_tables() {
  std::vector<GemmPickTable> tables;
  std::vector<std::string> names;
  for (const auto& [name, text] : builtin_texts()) {
    const std::string what = "built-in GEMM pick table " + name;
    GemmPickTable t = parse_gemm_pick_table(parse_text(text, what), what);
    for (size_t i = 0; i < tables.size(); ++i)
      FDLLM_CHECK_ARG(!(tables[i].target == t.target),
                      "{}: the same device, sm_count, version, workspace and buckets as {}", what, names[i]);
    tables.push_back(std::move(t));
    names.push_back(name);
  }
  return tables;
}

std::vector<kernels::GemmPick> resolve_gemm_picks(GemmPicks source, const std::string& file,
                                                  const GemmPickTarget& running) {
  const auto chosen = [&](const std::string& source, std::vector<kernels::GemmPick> picks) {
    logger().info("CUDA backend: cuBLASLt {} row buckets; algorithm picks: {} ({} shapes)",
                  kernels::gemm_buckets_name(running.buckets), source, picks.size());
    return picks;
  };
  if (source == GemmPicks::kOff) return chosen("none (FLASHDLLM_GEMM_PICKS=off)", {});
  if (source == GemmPicks::kFile) {
    FDLLM_CHECK_ARG(!file.empty(), "gemm_picks: a table file is needed (BackendOptions::gemm_picks_file)");
    GemmPickTable t = read_gemm_pick_table(file);
    FDLLM_CHECK_ARG(t.target == running, "FLASHDLLM_GEMM_PICKS={}: {}", file, first_difference(t.target, running));
    return chosen(file, std::move(t.picks));
  }
  for (GemmPickTable& t : builtin_gemm_pick_tables())
    if (t.target == running) return chosen("built-in table for " + t.target.device, std::move(t.picks));
  return chosen("none (no built-in table for this GPU, cuBLASLt version, workspace and buckets)", {});
}

}  // namespace flashdllm
