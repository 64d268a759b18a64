// flashdllm-make-checkpoint: writes a LLaDA checkpoint directory with seeded random weights.
//
//   flashdllm-make-checkpoint --config CONFIG.json --out DIR [--index INDEX.json]
//                             [--dtype bf16|f16|f32] [--seed N] [--std S] [--threads N] [--force] [--sparse]
//
// With --index the output has exactly the tensor names and shard split of that
// model.safetensors.index.json (each tensor in the shard the index names; shapes from the config,
// which must agree with the index: validate_model_index), plus a new index whose
// metadata.total_size matches the written dtype. Without --index it writes one model.safetensors.
// config.json is copied byte for byte from CONFIG.json. Purpose: load/throughput tests of the
// full-size model where the real weights are not available (16 GB for LLaDA-8B).
//
// Values: rank-1 tensors (the RMSNorm weights) are exactly 1; every other tensor is N(0, S^2)
// (S = 0.02 by default), rounded to the output dtype (RNE). Element e of tensor `name` is a pure
// function of (seed, FNV-1a-64(name), e): Philox-4x32-10 (src/core/philox.h) with counter
// (e / 4, name hash) and key seed gives four 32-bit words, turned into four normals by two
// Box-Muller transforms (lane e % 4) evaluated with our own branch-free log/sincos polynomials
// (no libm, so the loop vectorizes and the bytes do not depend on the C library). Output bytes
// therefore depend only on the seed, the std and the dtype — not on the thread count, the
// chunking or the shard split (a tensor has the same values sharded and single-file).
//
// --sparse writes the headers only and leaves every data region a hole (the files are extended with
// ftruncate and read as zeros): an 8B-shaped checkpoint in milliseconds and a few KB of disk, for
// tests of what reads metadata only (`flashdllm info`, validation).
//
// Speed: the data regions are filled in 16 MiB chunks by N threads with pwrite() into
// preallocated files, so generation runs in parallel with the kernel's write-back.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "model/model_checkpoint.h"
#include "model/model_config.h"

namespace fs = std::filesystem;
using namespace flashdllm;

namespace {

struct Options {
  std::string config;
  std::string index;
  std::string out;
  std::string dtype = "bf16";
  uint64_t seed = 0;
  double std_dev = 0.02;
  unsigned threads = 0;
  bool force = false;
  bool sparse = false;  // headers only; data regions left as holes (zeros)
};

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

struct PlannedTensor {
  const ExpectedTensor* spec;
  uint64_t key;       // FNV-1a-64 of the name: the RNG stream of this tensor
  int64_t numel;
  uint64_t offset;    // absolute file offset of its first byte
};

struct PlannedShard {
  std::string name;
  std::vector<PlannedTensor> tensors;
  std::string header;  // padded JSON header
  uint64_t file_size = 0;
  int fd = -1;
};

struct Chunk {
  size_t shard, tensor;
  int64_t begin, count;  // element range; begin is a multiple of 4
};

// ln(x) for x in (0, 1], branch-free so the batch loop below vectorizes; |abs error| < 1e-6.
// x = 2^e * m with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.172.
inline float log_unit(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const int32_t e = static_cast<int32_t>(u - 0x3f3504f3u) >> 23;  // 0x3f3504f3 = sqrt(1/2)
  const uint32_t mu = u - static_cast<uint32_t>(e) * (1u << 23);
  float m;
  std::memcpy(&m, &mu, 4);
  const float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  const float p = 1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9))));
  return static_cast<float>(e) * 0.693147180559945f + 2.0f * t * p;
}

// sin and cos of 2*pi*j/2^24 for a 24-bit integer j (|abs error| < 2e-7): exact reduction to the
// nearest quarter turn k, Taylor polynomials on [-pi/4, pi/4], then a quadrant swap.
inline void sincos_turn24(uint32_t j, float* s, float* c) {
  const uint32_t k = (j + (1u << 21)) >> 22;  // 0..4
  const float f = static_cast<float>(static_cast<int32_t>(j - (k << 22))) * (1.57079632679489662f / 4194304.0f);
  const float f2 = f * f;
  const float sp = f * (1.0f + f2 * (-1.0f / 6 + f2 * (1.0f / 120 + f2 * (-1.0f / 5040 + f2 * (1.0f / 362880)))));
  const float cp =
      1.0f + f2 * (-0.5f + f2 * (1.0f / 24 + f2 * (-1.0f / 720 + f2 * (1.0f / 40320 + f2 * (-1.0f / 3628800)))));
  const uint32_t q = k & 3u;
  const float ss = (q & 1u) ? cp : sp, cc = (q & 1u) ? sp : cp;
  *s = (q & 2u) ? -ss : ss;
  *c = ((q + 1u) & 2u) ? -cc : cc;
}

// Fills dst[0..round_up(count, 4)) with elements [begin, ...) of the tensor's value stream, as
// floats; begin is a multiple of 4. Element 4m+i comes from Philox word i of counter m: pair
// (words 0, 1) -> elements 4m, 4m+1 and pair (2, 3) -> 4m+2, 4m+3 via Box-Muller
// (r = std * sqrt(-2 ln u1), cos and sin of 2 pi u2).
void generate(const PlannedTensor& t, uint64_t seed, float std_dev, int64_t begin, int64_t count, float* dst) {
  const int64_t padded = (count + 3) / 4 * 4;
  if (t.spec->shape.size() == 1) {
    for (int64_t i = 0; i < padded; ++i) dst[i] = 1.0f;
    return;
  }
  constexpr float kInv24 = 1.0f / 16777216.0f;
  const auto k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const auto c2 = static_cast<uint32_t>(t.key), c3 = static_cast<uint32_t>(t.key >> 32);
  constexpr int64_t kBatch = 256;  // quartets per batch
  uint32_t w[4 * kBatch];
  const int64_t m0 = begin / 4, quartets = padded / 4;
  for (int64_t b = 0; b < quartets; b += kBatch) {
    const int64_t nq = std::min(kBatch, quartets - b);
    for (int64_t i = 0; i < nq; ++i) {
      const auto m = static_cast<uint64_t>(m0 + b + i);
      const Philox4 r = philox4x32(static_cast<uint32_t>(m), static_cast<uint32_t>(m >> 32), c2, c3, k0, k1);
      w[4 * i] = r.v[0];
      w[4 * i + 1] = r.v[1];
      w[4 * i + 2] = r.v[2];
      w[4 * i + 3] = r.v[3];
    }
    float* d = dst + 4 * b;
    for (int64_t q = 0; q < 2 * nq; ++q) {
      const float u1 = (static_cast<float>(w[2 * q] >> 8) + 0.5f) * kInv24;  // (0, 1)
      const float r = std_dev * std::sqrt(-2.0f * log_unit(u1));
      float s, c;
      sincos_turn24(w[2 * q + 1] >> 8, &s, &c);
      d[2 * q] = r * c;
      d[2 * q + 1] = r * s;
    }
  }
}

void convert(DType dt, const float* src, void* dst, int64_t n) {
  switch (dt) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kBF16: convert_f32_to_bf16(src, static_cast<uint16_t*>(dst), static_cast<size_t>(n)); return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    default: FDLLM_ASSERT(false);
  }
}

void pwrite_all(int fd, const void* buf, size_t n, uint64_t off, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    FDLLM_CHECK(w > 0, ErrorCode::kIo, "{}: write failed: {}", what, w < 0 ? std::strerror(errno) : "no progress");
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  FDLLM_CHECK(in.good(), ErrorCode::kIo, "{}: cannot open", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

DType parse_output_dtype(const std::string& name) {
  if (name == "bf16" || name == "BF16") return DType::kBF16;
  if (name == "f16" || name == "F16") return DType::kF16;
  if (name == "f32" || name == "F32") return DType::kF32;
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "--dtype '{}' (supported: bf16, f16, f32)", name);
}

using ShardPlan = std::map<std::string, std::vector<const ExpectedTensor*>>;

/// Shard plan: shard name -> tensors (in expected order); the index's split, else one file.
ShardPlan plan_shards(const Options& o, const ModelConfig& cfg, const std::vector<ExpectedTensor>& expected) {
  ShardPlan by_shard;
  if (!o.index.empty()) {
    validate_model_index(o.index, cfg);  // exactly the expected names; total_size plausible
    const nlohmann::json idx = nlohmann::json::parse(read_file(o.index));
    const auto& wm = idx.at("weight_map");
    for (const ExpectedTensor& e : expected) {
      const std::string shard = wm.at(e.name).get<std::string>();
      FDLLM_CHECK_CKPT(shard.find_first_of("/\\") == std::string::npos && shard != "." && shard != "..",
                       "{}: tensor '{}': shard name '{}' is not a plain file name", o.index, e.name, shard);
      by_shard[shard].push_back(&e);
    }
  } else {
    for (const ExpectedTensor& e : expected) by_shard["model.safetensors"].push_back(&e);
  }
  return by_shard;
}

/// Creates the output directory and copies config.json into it; refuses to overwrite without
/// --force, and with it removes the forms Checkpoint::open would prefer over the new one.
void prepare_output_dir(const Options& o, const fs::path& out, const ShardPlan& by_shard) {
  fs::create_directories(out);
  if (!o.force) {
    for (const char* f : {"config.json", "model.safetensors", "model.safetensors.index.json"})
      FDLLM_CHECK_ARG(!fs::exists(out / f), "{}: already exists (use --force to overwrite)", (out / f).string());
    for (const auto& [shard, list] : by_shard)
      FDLLM_CHECK_ARG(!fs::exists(out / shard), "{}: already exists (use --force to overwrite)", (out / shard).string());
  }
  if (o.force) {  // never leave a stale form behind that Checkpoint::open would prefer
    fs::remove(out / "model.safetensors.index.json");
    fs::remove(out / "model.safetensors");
  }
  fs::copy_file(o.config, out / "config.json", fs::copy_options::overwrite_existing);
}

/// Headers (padded to a multiple of 8 bytes) and absolute tensor offsets of every shard; adds the
/// data bytes of all shards to total_bytes.
std::vector<PlannedShard> plan_headers(const ShardPlan& by_shard, DType dtype, uint64_t& total_bytes) {
  std::vector<PlannedShard> shards;
  const size_t esize = dtype_size(dtype);
  for (const auto& [shard_name, list] : by_shard) {
    PlannedShard s;
    s.name = shard_name;
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    h["__metadata__"] = {{"format", "pt"}};
    uint64_t off = 0;
    for (const ExpectedTensor* e : list) {
      int64_t n = 1;
      for (int64_t d : e->shape) n *= d;
      const uint64_t nb = static_cast<uint64_t>(n) * esize;
      h[e->name] = {{"dtype", dtype_name(dtype)}, {"shape", e->shape}, {"data_offsets", {off, off + nb}}};
      s.tensors.push_back({e, fnv1a64(e->name), n, off});
      off += nb;
    }
    s.header = h.dump();
    s.header.append((8 - s.header.size() % 8) % 8, ' ');
    const uint64_t data_begin = 8 + s.header.size();
    for (auto& t : s.tensors) t.offset += data_begin;
    s.file_size = data_begin + off;
    total_bytes += off;
    shards.push_back(std::move(s));
  }
  return shards;
}

/// Creates every shard file, writes its header and preallocates it to its full size.
void create_shard_files(std::vector<PlannedShard>& shards, const fs::path& out) {
  for (PlannedShard& s : shards) {
    const std::string path = (out / s.name).string();
    s.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FDLLM_CHECK(s.fd >= 0, ErrorCode::kIo, "{}: cannot create: {}", path, std::strerror(errno));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(s.header.size()) >> (8 * i));
    pwrite_all(s.fd, len, 8, 0, path);
    pwrite_all(s.fd, s.header.data(), s.header.size(), 8, path);
    FDLLM_CHECK(::ftruncate(s.fd, static_cast<off_t>(s.file_size)) == 0, ErrorCode::kIo, "{}: cannot size to {} bytes: {}",
                path, s.file_size, std::strerror(errno));
  }
}

/// Fills the data regions (none with --sparse) with n_threads workers, then closes every shard;
/// throws kIo with the first error of any worker or close.
void write_tensor_data(const Options& o, std::vector<PlannedShard>& shards, const fs::path& out, DType dtype,
                       unsigned n_threads) {
  const size_t esize = dtype_size(dtype);
  // Work list: chunks of at most kChunk elements, never crossing a tensor (none with --sparse).
  constexpr int64_t kChunk = int64_t{1} << 22;  // 4 Mi elements = 8 MiB of bf16
  std::vector<Chunk> chunks;
  for (size_t si = 0; si < shards.size() && !o.sparse; ++si)
    for (size_t ti = 0; ti < shards[si].tensors.size(); ++ti)
      for (int64_t b = 0; b < shards[si].tensors[ti].numel; b += kChunk)
        chunks.push_back({si, ti, b, std::min(kChunk, shards[si].tensors[ti].numel - b)});

  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::string first_error;
  std::mutex error_mu;
  auto worker = [&]() {
    std::vector<float> f(kChunk);
    std::vector<uint8_t> bytes(static_cast<size_t>(kChunk) * esize);
    try {
      for (size_t i = next++; i < chunks.size() && !failed; i = next++) {
        const Chunk& c = chunks[i];
        const PlannedShard& s = shards[c.shard];
        const PlannedTensor& t = s.tensors[c.tensor];
        generate(t, o.seed, static_cast<float>(o.std_dev), c.begin, c.count, f.data());
        convert(dtype, f.data(), bytes.data(), c.count);
        pwrite_all(s.fd, bytes.data(), static_cast<size_t>(c.count) * esize,
                   t.offset + static_cast<uint64_t>(c.begin) * esize, (out / s.name).string());
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!failed.exchange(true)) first_error = e.what();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < n_threads; ++i) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  for (PlannedShard& s : shards) {
    const int rc = ::close(s.fd);
    if (rc != 0 && !failed) {
      failed = true;
      first_error = fmt::format("{}: close failed: {}", (out / s.name).string(), std::strerror(errno));
    }
  }
  FDLLM_CHECK(!failed, ErrorCode::kIo, "{}", first_error);
}

/// The new model.safetensors.index.json: every tensor's shard and the written total_size.
void write_index(const std::vector<PlannedShard>& shards, const fs::path& out, uint64_t total_bytes) {
  nlohmann::json idx;
  idx["metadata"]["total_size"] = total_bytes;
  idx["weight_map"] = nlohmann::json::object();
  for (const PlannedShard& s : shards)
    for (const PlannedTensor& t : s.tensors) idx["weight_map"][t.spec->name] = s.name;
  std::ofstream f(out / "model.safetensors.index.json", std::ios::binary | std::ios::trunc);
  f << idx.dump(2) << "\n";
  f.close();
  FDLLM_CHECK(f.good(), ErrorCode::kIo, "{}: write failed", (out / "model.safetensors.index.json").string());
}

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const DType dtype = parse_output_dtype(o.dtype);
  FDLLM_CHECK_ARG(o.std_dev > 0 && std::isfinite(o.std_dev), "--std {} must be positive", o.std_dev);
  const unsigned n_threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());

  const ModelConfig cfg = load_model_config(o.config);
  const std::vector<ExpectedTensor> expected = model_expected_tensors(cfg);
  const ShardPlan by_shard = plan_shards(o, cfg, expected);
  const fs::path out(o.out);
  prepare_output_dir(o, out, by_shard);

  uint64_t total_bytes = 0;
  std::vector<PlannedShard> shards = plan_headers(by_shard, dtype, total_bytes);
  create_shard_files(shards, out);
  write_tensor_data(o, shards, out, dtype, n_threads);
  if (!o.index.empty()) write_index(shards, out, total_bytes);

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %zu tensors, %zu file(s), %s, %llu bytes of weights in %.2f s (%.2f GB/s, %u threads)\n",
              out.string().c_str(), expected.size(), shards.size(), dtype_name(dtype),
              static_cast<unsigned long long>(total_bytes), secs, secs > 0 ? total_bytes / secs / 1e9 : 0.0, n_threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Write a LLaDA checkpoint with seeded random weights (N(0, std^2) matrices, unit norm weights)"};
  app.add_option("--config", o.config, "LLaDA config.json (copied into the output)")->required()->check(CLI::ExistingFile);
  app.add_option("--out", o.out, "output directory")->required();
  app.add_option("--index", o.index,
                 "model.safetensors.index.json whose tensor names and shard split to reproduce "
                 "(default: one model.safetensors)")
      ->check(CLI::ExistingFile);
  app.add_option("--dtype", o.dtype, "bf16 (default), f16 or f32");
  app.add_option("--seed", o.seed, "RNG seed (default 0)");
  app.add_option("--std", o.std_dev, "standard deviation of matrix entries (default 0.02)");
  app.add_option("--threads", o.threads, "worker threads (default: all cores)");
  app.add_flag("--force", o.force, "overwrite existing checkpoint files in --out");
  app.add_flag("--sparse", o.sparse, "headers only: data regions are holes that read as zeros (metadata tests)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const Error& e) {
    std::fprintf(stderr, "flashdllm-make-checkpoint: error (%s): %s\n", error_code_name(e.code()), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashdllm-make-checkpoint: error: %s\n", e.what());
  }
  return 1;
}
