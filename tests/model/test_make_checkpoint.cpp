// flashdllm-make-checkpoint (apps/make_checkpoint): runs the built tool on the golden g1 config
// and round-trips its output through Checkpoint::open + validate_model_checkpoint: names, shapes,
// dtypes, the shard split of a given index, determinism, the documented value construction
// (Philox + Box-Muller, checked against an independent double-precision evaluation) and the
// N(0, 0.02^2) / unit-norm statistics.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/numerics.h"
#include "common/test_paths.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "model/model_checkpoint.h"

namespace flashdllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path tool() {
  const char* env = std::getenv("FLASHDLLM_BINARY_DIR");
  const fs::path dir = (env && *env) ? fs::path(env) : test::cli_binary().parent_path();
  return dir / "flashdllm-make-checkpoint";
}

fs::path g1_config() { return test::golden_dir() / "config.json"; }

struct RunResult {
  int status;
  std::string out, err;
};

RunResult run_tool(const std::string& args, const fs::path& scratch) {
  EXPECT_TRUE(fs::exists(tool())) << tool() << " not built (target flashdllm-make-checkpoint)";
  const fs::path out = scratch / "stdout.txt", err = scratch / "stderr.txt";
  std::ostringstream cmd_ss;  // (not operator+: GCC 12 -Wrestrict false positive, PR105329)
  cmd_ss << "'" << tool().string() << "' " << args << " > '" << out.string() << "' 2> '" << err.string() << "'";
  const std::string cmd = cmd_ss.str();
  const int rc = std::system(cmd.c_str());
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> to_f32(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, v.data(), v.size());
  return v;
}

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Element e of a matrix tensor, as documented in make_checkpoint.cpp, evaluated in double.
double reference_value(uint64_t seed, const std::string& name, int64_t e, double std_dev) {
  const uint64_t key = fnv1a64(name);
  const auto m = static_cast<uint64_t>(e / 4);
  const Philox4 w = philox4x32(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32), static_cast<uint32_t>(key),
                               static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(seed),
                               static_cast<uint32_t>(seed >> 32));
  const int lane = static_cast<int>(e % 4), p = lane / 2;
  const double u1 = ((w.v[2 * p] >> 8) + 0.5) / 16777216.0;
  const double u2 = (w.v[2 * p + 1] >> 8) / 16777216.0;
  const double r = std_dev * std::sqrt(-2.0 * std::log(u1));
  return lane % 2 == 0 ? r * std::cos(2 * M_PI * u2) : r * std::sin(2 * M_PI * u2);
}

TEST(MakeCheckpoint, ConfigModeRoundTrip) {
  const fs::path dir = test::temp_dir();
  const RunResult r = run_tool("--config '" + g1_config().string() + "' --out '" + (dir / "ck").string() + "' --seed 7",
                               dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const ModelConfig cfg = load_model_config(dir / "ck" / "config.json");
  EXPECT_EQ(file_bytes(dir / "ck" / "config.json"), file_bytes(g1_config()));  // copied byte for byte
  EXPECT_FALSE(fs::exists(dir / "ck" / "model.safetensors.index.json"));
  const Checkpoint ck = Checkpoint::open(dir / "ck");
  EXPECT_FALSE(ck.sharded());
  validate_model_checkpoint(ck, cfg);
  EXPECT_EQ(ck.total_bytes(), static_cast<size_t>(cfg.parameter_count()) * 2);

  // Norm weights are exactly 1; matrices are N(0, 0.02^2) (bf16-rounded).
  double sum = 0, sum2 = 0, n = 0, within1 = 0, within2 = 0, maxabs = 0;
  for (const std::string& name : ck.names()) {
    const TensorInfo& t = ck.get(name);
    EXPECT_EQ(t.dtype, DType::kBF16) << name;
    const std::vector<float> v = to_f32(t);
    if (t.shape.size() == 1) {
      for (float x : v) ASSERT_EQ(x, 1.0f) << name;
      continue;
    }
    double ts = 0, ts2 = 0;
    for (float x : v) {
      ts += x;
      ts2 += double(x) * x;
      within1 += std::fabs(x) <= 0.02;
      within2 += std::fabs(x) <= 0.04;
      maxabs = std::max(maxabs, double(std::fabs(x)));
    }
    const double tstd = std::sqrt(ts2 / v.size() - (ts / v.size()) * (ts / v.size()));
    EXPECT_NEAR(tstd, 0.02, 0.02 * 0.03) << name;  // >= 65536 samples per matrix: ~8 sigma
    sum += ts;
    sum2 += ts2;
    n += v.size();
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  EXPECT_LT(std::fabs(mean), 5 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(sd, 0.02, 0.02 * 0.005);
  EXPECT_NEAR(within1 / n, 0.682689, 0.003);
  EXPECT_NEAR(within2 / n, 0.954500, 0.002);
  EXPECT_LT(maxabs, 0.02 * 6.0);  // Box-Muller with 24-bit u1 cannot exceed ~5.9 sigma
  fs::remove_all(dir);
}

TEST(MakeCheckpoint, ValuesFollowTheDocumentedConstruction) {
  const fs::path dir = test::temp_dir();
  const uint64_t seed = 0x123456789abcdefull;
  const RunResult r = run_tool("--config '" + g1_config().string() + "' --out '" + (dir / "ck").string() +
                                   "' --dtype f32 --std 0.5 --seed " + std::to_string(seed),
                               dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const Checkpoint ck = Checkpoint::open(dir / "ck");
  // The embedding and the last block's ff_out (blocks.2 on G1; the fixture may have fewer layers).
  const int64_t last = load_model_config(g1_config()).n_layers - 1;
  for (const std::string& name : {std::string("model.transformer.wte.weight"),
                                  "model.transformer.blocks." + std::to_string(last) + ".ff_out.weight"}) {
    const TensorInfo& t = ck.get(name);
    ASSERT_EQ(t.dtype, DType::kF32);
    const std::vector<float> v = to_f32(t);
    for (int64_t e : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{4097}, t.numel() - 1}) {
      const double ref = reference_value(seed, name, e, 0.5);
      EXPECT_NEAR(v[static_cast<size_t>(e)], ref,
                  test::kMakeCheckpointValueAbsTol + test::kMakeCheckpointValueRelTol * std::fabs(ref))
          << name << "[" << e << "]";
    }
  }
  fs::remove_all(dir);
}

TEST(MakeCheckpoint, DeterministicAcrossThreadCounts) {
  const fs::path dir = test::temp_dir();
  const std::string base = "--config '" + g1_config().string() + "' --seed 11 --out '" + dir.string();
  ASSERT_EQ(run_tool(base + "/t1' --threads 1", dir).status, 0);
  ASSERT_EQ(run_tool(base + "/t3' --threads 3", dir).status, 0);
  ASSERT_EQ(run_tool("--config '" + g1_config().string() + "' --seed 12 --out '" + dir.string() + "/s12'", dir).status,
            0);
  EXPECT_EQ(file_bytes(dir / "t1" / "model.safetensors"), file_bytes(dir / "t3" / "model.safetensors"));
  const Checkpoint a = Checkpoint::open(dir / "t1"), b = Checkpoint::open(dir / "s12");
  for (const std::string& name : a.names()) {
    const TensorInfo &ta = a.get(name), &tb = b.get(name);
    const bool same = std::memcmp(ta.data, tb.data, ta.nbytes) == 0;
    if (ta.shape.size() == 1) EXPECT_TRUE(same) << name;  // unit norms do not depend on the seed
    else EXPECT_FALSE(same) << name;
  }
  fs::remove_all(dir);
}

TEST(MakeCheckpoint, DtypesRoundTheSameValues) {
  const fs::path dir = test::temp_dir();
  const std::string base = "--config '" + g1_config().string() + "' --seed 5 --out '" + dir.string();
  ASSERT_EQ(run_tool(base + "/f32' --dtype f32", dir).status, 0);
  ASSERT_EQ(run_tool(base + "/bf16'", dir).status, 0);  // default dtype
  ASSERT_EQ(run_tool(base + "/f16' --dtype f16", dir).status, 0);
  const Checkpoint f32 = Checkpoint::open(dir / "f32"), bf16 = Checkpoint::open(dir / "bf16"),
                   f16 = Checkpoint::open(dir / "f16");
  for (const std::string& name : f32.names()) {
    const TensorInfo &a = f32.get(name), &b = bf16.get(name), &c = f16.get(name);
    ASSERT_EQ(b.dtype, DType::kBF16);
    ASSERT_EQ(c.dtype, DType::kF16);
    const auto* fa = static_cast<const uint8_t*>(a.data);
    const auto* fb = static_cast<const uint8_t*>(b.data);
    const auto* fc = static_cast<const uint8_t*>(c.data);
    for (int64_t i = 0; i < a.numel(); ++i) {
      float x;
      uint16_t y, z;
      std::memcpy(&x, fa + 4 * i, 4);
      std::memcpy(&y, fb + 2 * i, 2);
      std::memcpy(&z, fc + 2 * i, 2);
      ASSERT_EQ(y, f32_to_bf16(x)) << name << "[" << i << "]";
      ASSERT_EQ(z, f32_to_f16(x)) << name << "[" << i << "]";
    }
  }
  fs::remove_all(dir);
}

TEST(MakeCheckpoint, IndexModeReproducesTheShardSplit) {
  const fs::path dir = test::temp_dir();
  const ModelConfig cfg = load_model_config(g1_config());
  // An irregular 3-shard placement, like the real index (e.g. ff_out of some blocks elsewhere).
  json idx;
  int k = 0;
  for (const auto& t : model_expected_tensors(cfg))
    idx["weight_map"][t.name] = "model-0000" + std::to_string(1 + (k++ * 5) % 3) + "-of-00003.safetensors";
  idx["metadata"]["total_size"] = 2 * cfg.parameter_count();
  std::ofstream(dir / "index.json") << idx.dump(2);

  const std::string common = "--config '" + g1_config().string() + "' --seed 3 --out '" + dir.string();
  const RunResult r = run_tool(common + "/sharded' --index '" + (dir / "index.json").string() + "'", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(run_tool(common + "/single'", dir).status, 0);

  const Checkpoint ck = Checkpoint::open(dir / "sharded");
  ASSERT_TRUE(ck.sharded());
  validate_model_checkpoint(ck, cfg);
  EXPECT_EQ(validate_model_index(dir / "sharded" / "model.safetensors.index.json", cfg), 2);
  const json written = json::parse(std::ifstream(dir / "sharded" / "model.safetensors.index.json"));
  EXPECT_EQ(written["weight_map"], idx["weight_map"]);
  EXPECT_EQ(written["metadata"]["total_size"].get<uint64_t>(), ck.total_bytes());
  std::set<std::string> files;
  for (const std::string& name : ck.names()) {
    const TensorInfo& t = ck.get(name);
    EXPECT_EQ(fs::path(t.file).filename().string(), idx["weight_map"][name].get<std::string>()) << name;
    files.insert(t.file);
  }
  EXPECT_EQ(files.size(), 3u);

  // A tensor's values do not depend on the layout: sharded == single file.
  const Checkpoint single = Checkpoint::open(dir / "single");
  for (const std::string& name : ck.names())
    EXPECT_EQ(std::memcmp(ck.get(name).data, single.get(name).data, ck.get(name).nbytes), 0) << name;

  // F32 output from the same BF16 index: total_size follows the written dtype.
  ASSERT_EQ(run_tool(common + "/f32' --dtype f32 --index '" + (dir / "index.json").string() + "'", dir).status, 0);
  EXPECT_EQ(validate_model_index(dir / "f32" / "model.safetensors.index.json", cfg), 4);
  fs::remove_all(dir);
}

TEST(MakeCheckpoint, Errors) {
  const fs::path dir = test::temp_dir();
  const ModelConfig cfg = load_model_config(g1_config());
  json idx;
  for (const auto& t : model_expected_tensors(cfg)) idx["weight_map"][t.name] = "model-1.safetensors";
  idx["weight_map"]["model.transformer.blocks.0.q_proj.bias"] = "model-1.safetensors";
  idx["metadata"]["total_size"] = 2 * cfg.parameter_count();
  std::ofstream(dir / "index.json") << idx.dump(2);
  const std::string cfg_arg = "--config '" + g1_config().string() + "'";

  RunResult r = run_tool(cfg_arg + " --out '" + (dir / "a").string() + "' --index '" + (dir / "index.json").string() + "'",
                         dir);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("model.transformer.blocks.0.q_proj.bias"), std::string::npos) << r.err;

  r = run_tool(cfg_arg + " --out '" + (dir / "b").string() + "' --dtype f8", dir);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("f8"), std::string::npos) << r.err;

  ASSERT_EQ(run_tool(cfg_arg + " --out '" + (dir / "c").string() + "'", dir).status, 0);
  r = run_tool(cfg_arg + " --out '" + (dir / "c").string() + "'", dir);  // would overwrite
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(run_tool(cfg_arg + " --out '" + (dir / "c").string() + "' --force", dir).status, 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flashdllm
