// The FLASHDLLM_* variables (env_registry.h). Adding one: a row in the table below, a field in
// BackendOptions (or TensorParallelLaunch) for it, and its case in tests/unit/test_env_registry.cpp.
#include "env_registry.h"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/check.h"
#include "core/log.h"

namespace flashdllm::cli {
namespace {

// The accepted spellings of a switch: "1"/"0" (the historical values), on/off, true/false, yes/no.
bool parse_bool(const char* name, const std::string& v) {
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}='{}' is not a switch (1, 0, on, off, true, false, yes, no)", name, v);
}

int parse_int(const char* name, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  FDLLM_CHECK_ARG(end != v.c_str() && *end == '\0' && x >= lo && x <= hi, "{}='{}' is not an integer in [{}, {}]", name,
                  v, lo, hi);
  return static_cast<int>(x);
}

// An enum value by name, or an error naming the variable and listing the names.
template <class E>
E parse_choice(const char* name, const std::string& v, std::optional<E> (*from_name)(std::string_view) noexcept,
               const char* choices) {
  if (const auto e = from_name(v)) return *e;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}='{}' is not one of {}", name, v, choices);
}

constexpr const char* kAttentionChoices = "auto, reference, m64n64, wgmma128, wgmma64";
constexpr const char* kCudnnChoices = "auto, prefill, all, off";

std::vector<EnvVar> make_registry() {
  std::vector<EnvVar> r;
  r.push_back({"FLASHDLLM_ATTENTION", kAttentionChoices, "auto",
               "CUDA attention kernel. auto: wgmma128 for tiles of > 64 rows (wgmma64 in calls of few rows) and "
               "m64n64 for the others on sm_90 builds with the Hopper kernel, m64n64 elsewhere; reference also runs "
               "the verify pass on its scalar kernel; the others force one flash kernel for every tile",
               [](const std::string& v, EnvSettings& s) {
                 s.backend.attention = parse_choice<AttentionKernel>("FLASHDLLM_ATTENTION", v,
                                                                     &attention_kernel_from_name, kAttentionChoices);
               }});
  r.push_back({"FLASHDLLM_CUDNN_ATTENTION", kCudnnChoices, "auto",
               "attention tiles run in cuDNN's fused attention. auto: tiles of >= 256 query rows (prefills) where "
               "cuDNN is available; prefill: the same, an error without cuDNN; all: every tile of a planned call; "
               "off: none",
               [](const std::string& v, EnvSettings& s) {
                 s.backend.cudnn_attention = parse_choice<CudnnAttention>("FLASHDLLM_CUDNN_ATTENTION", v,
                                                                          &cudnn_attention_from_name, kCudnnChoices);
               }});
  r.push_back(
      {"FLASHDLLM_GEMM_TUNE", "int in [0, 16]", "0",
       "time cuBLASLt's first K heuristic algorithms per GEMM shape at run time and keep the fastest (K > 1 "
       "replaces row buckets and picks)",
       [](const std::string& v, EnvSettings& s) { s.backend.gemm_tune = parse_int("FLASHDLLM_GEMM_TUNE", v, 0, 16); }});
  r.push_back({"FLASHDLLM_GEMM_BUCKETS", "quarter|pow2|exact", "quarter",
               "row counts that share one cuBLASLt algorithm (kernels/cuda/gemm.h)",
               [](const std::string& v, EnvSettings& s) {
                 const auto b = gemm_buckets_from_name(v);
                 FDLLM_CHECK_ARG(b.has_value(), "FLASHDLLM_GEMM_BUCKETS='{}' is not one of quarter, pow2, exact", v);
                 s.backend.gemm_buckets = *b;
               }});
  r.push_back({"FLASHDLLM_GEMM_PICKS", "off|<file>", "(built-in table)",
               "cuBLASLt algorithm picks: unset, the built-in table of this GPU, cuBLASLt version and bucket rule; "
               "off: none; else a table file (bench/gemm_bench --write-picks)",
               [](const std::string& v, EnvSettings& s) {
                 s.backend.gemm_picks = v == "off" ? GemmPicks::kOff : GemmPicks::kFile;
                 s.backend.gemm_picks_file = v == "off" ? "" : v;
               }});
  r.push_back(
      {"FLASHDLLM_CUDA_GRAPHS", "bool", "1",
       "record the forwards' layer loops as CUDA graphs and replay them (0: op by op)",
       [](const std::string& v, EnvSettings& s) { s.backend.cuda_graphs = parse_bool("FLASHDLLM_CUDA_GRAPHS", v); }});
  r.push_back({"FLASHDLLM_CUDA_SYNC", "bool", "0",
               "synchronise and check after every CUDA op (debugging: pins asynchronous faults to their op; turns "
               "graphs off)",
               [](const std::string& v, EnvSettings& s) {
                 s.backend.sync = parse_bool("FLASHDLLM_CUDA_SYNC", v) ? SyncMode::kEveryOp : SyncMode::kAsync;
               }});
  r.push_back({"FLASHDLLM_PINNED_STAGING", "bool", "1",
               "host copies of up to 4 MiB go through pinned staging buffers (0: pageable copies)",
               [](const std::string& v, EnvSettings& s) {
                 s.backend.pinned_staging = parse_bool("FLASHDLLM_PINNED_STAGING", v);
               }});
  r.push_back({"FLASHDLLM_FP8_DEQUANTIZE", "bool", "0",
               "0: block-FP8 weights use cuBLASLt's block-scaled FP8 GEMM on sm_90 and the dequantising route "
               "(bf16 GEMM on dequantised operands) on other GPUs; 1: the dequantising route on sm_90 too "
               "(docs/decisions.md)",
               [](const std::string& v, EnvSettings& s) {
                 s.backend.fp8_dequantize = parse_bool("FLASHDLLM_FP8_DEQUANTIZE", v);
               }});
  r.push_back(
      {"FLASHDLLM_ROW_PADDING", "bool", "(backend: cuda 1, cpu 0)",
       "pad forwards' query rows to multiples of 64 and logit rows to 16, so that CUDA graphs replay while "
       "row counts change (0: exact row counts)",
       [](const std::string& v, EnvSettings& s) { s.backend.row_padding = parse_bool("FLASHDLLM_ROW_PADDING", v); }});
  r.push_back(
      {"FLASHDLLM_TP_WORLD", "int", "1", "one-rank-per-process tensor parallelism: the number of ranks",
       [](const std::string& v, EnvSettings& s) { s.launch.world = parse_int("FLASHDLLM_TP_WORLD", v, 1, 1 << 20); }});
  r.push_back(
      {"FLASHDLLM_TP_RANK", "int", "0", "one-rank-per-process tensor parallelism: this process's rank",
       [](const std::string& v, EnvSettings& s) { s.launch.rank = parse_int("FLASHDLLM_TP_RANK", v, 0, 1 << 20); }});
  r.push_back({"FLASHDLLM_TP_ID_FILE", "path", "(none)",
               "one-rank-per-process tensor parallelism: where rank 0 publishes the NCCL unique id (a file every "
               "rank sees)",
               [](const std::string& v, EnvSettings& s) { s.launch.id_file = v; }});
  r.push_back({"FLASHDLLM_COMMIT", "text", "(git rev-parse --short HEAD)",
               "the commit that `flashdllm bench` summaries and bench/forward_bench report, for a copy of the tree "
               "without .git (the device scripts set it after checking the tree)",
               [](const std::string& v, EnvSettings& s) { s.commit = v; }});
  r.push_back({"NCCL_NVLS_ENABLE", "bool", "0",
               "NCCL's NVLink SHARP (multicast) switch: flashdllm always sets it to 0 before its first "
               "communicator; another value is overridden (with a warning)",
               [](const std::string& v, EnvSettings&) {
                 if (parse_bool("NCCL_NVLS_ENABLE", v))
                   logger().warn("NCCL_NVLS_ENABLE={} overridden with 0: flashdllm keeps NVLink multicast off", v);
               }});
  return r;
}

}  // namespace

const std::vector<EnvVar>& env_registry() {
  static const std::vector<EnvVar> registry = make_registry();
  return registry;
}

EnvSettings env_settings() {
  EnvSettings s;
  for (const EnvVar& var : env_registry()) {
    const char* v = std::getenv(var.name);  // the one reader of the environment's FLASHDLLM_* variables
    if (v != nullptr && *v != '\0') var.apply(v, s);
  }
  validate_backend_options(s.backend);
  validate_tensor_parallel_launch(s.launch);
  return s;
}

std::string env_listing() {
  std::string out =
      "Environment variables read by flashdllm (they override the defaults of EngineOptions::backend; an empty "
      "value counts as unset):\n";
  for (const EnvVar& var : env_registry()) {
    const char* v = std::getenv(var.name);
    out += fmt::format("\n{}\n  type     {}\n  default  {}\n  current  {}\n  {}\n", var.name, var.type,
                       var.default_value, v != nullptr && *v != '\0' ? fmt::format("'{}'", v) : "(unset)", var.help);
  }
  return out;
}

}  // namespace flashdllm::cli
