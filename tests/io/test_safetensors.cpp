// safetensors reader/writer and sharded checkpoints: round trips, the golden checkpoint, and one
// test per malformation (each checks the error code and that the message names the file and,
// where there is one, the tensor). Malformed files are built byte by byte in a temp directory.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_paths.h"
#include "core/check.h"
#include "io/safetensors.h"

namespace flashdllm {
namespace {

namespace fs = std::filesystem;
using test::temp_dir;

// Writes <8-byte LE header length><header><data> to `path`. `header_len` overrides the length
// field (to fake a length past the end of file).
void write_raw(const fs::path& path, const std::string& header, const std::string& data,
               std::optional<uint64_t> header_len = std::nullopt) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = header_len.value_or(header.size());
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header << data;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// Runs `fn`, expects Error(code) whose message contains every string in `parts`.
void expect_error(const std::function<void()>& fn, ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::printf("  error: %s\n", e.what());
    EXPECT_EQ(e.code(), code) << "message: " << e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message lacks '" << p << "': " << e.what();
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return;
  }
  ADD_FAILURE() << "no error thrown";
}

void expect_bad_file(const fs::path& path, const std::vector<std::string>& parts) {
  std::vector<std::string> all = parts;
  all.push_back(path.string());
  expect_error([&] { SafetensorsFile::open(path); }, ErrorCode::kInvalidCheckpoint, all);
}

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

// A valid two-tensor file used as the base of the malformations.
const std::string kHeaderAB =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";

// ---------------------------------------------------------------------------------------------
// Writer <-> reader round trip

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  const fs::path p = temp_dir() / "rt.safetensors";
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x4000};
  std::vector<uint16_t> f16 = {0x3c00, 0xc000};
  std::vector<int64_t> i64 = {-1, 126336};
  float scalar = 42.0f;
  std::vector<TensorToWrite> ts = {
      {"w.f32", DType::kF32, {2, 3}, f32.data(), f32.size() * 4},
      {"w.bf16", DType::kBF16, {3}, bf16.data(), bf16.size() * 2},
      {"w.f16", DType::kF16, {1, 2}, f16.data(), f16.size() * 2},
      {"ids", DType::kI64, {2}, i64.data(), i64.size() * 8},
      {"scalar", DType::kF32, {}, &scalar, 4},
      {"empty", DType::kBF16, {0, 5}, nullptr, 0},
  };
  write_safetensors(p, ts, {{"format", "pt"}, {"note", "x"}});

  // Header padded so the data region starts 8-byte aligned.
  std::ifstream in(p, std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ((8 + n) % 8, 0u);

  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->path(), p);
  ASSERT_EQ(f->tensors().size(), ts.size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "x");
  for (const TensorToWrite& w : ts) {
    const TensorInfo& t = f->tensors().at(w.name);
    EXPECT_EQ(t.name, w.name);
    EXPECT_EQ(t.dtype, w.dtype) << w.name;
    EXPECT_EQ(t.shape, w.shape) << w.name;
    EXPECT_EQ(t.nbytes, w.nbytes) << w.name;
    EXPECT_EQ(t.file, p.string());
    if (w.nbytes) {
      EXPECT_EQ(std::memcmp(t.data, w.data, w.nbytes), 0) << w.name;
    }
  }
  EXPECT_EQ(f->tensors().at("scalar").numel(), 1);
  EXPECT_EQ(f->tensors().at("empty").numel(), 0);
  EXPECT_EQ(f->tensors().at("w.f32").numel(), 6);
}

TEST(Safetensors, WriterRejectsSizeMismatchAndDuplicates) {
  const fs::path p = temp_dir() / "bad.safetensors";
  std::vector<float> v(4);
  expect_error([&] { write_safetensors(p, {{"t", DType::kF32, {5}, v.data(), 16}}); }, ErrorCode::kInvalidArgument,
               {"'t'", p.string()});
  expect_error([&] {
    write_safetensors(p, {{"t", DType::kF32, {4}, v.data(), 16}, {"t", DType::kF32, {4}, v.data(), 16}});
  }, ErrorCode::kInvalidArgument, {"'t'", "twice"});
  expect_error([&] { write_safetensors(temp_dir() / "no" / "such" / "dir.safetensors", {}); }, ErrorCode::kIo,
               {"cannot create"});
}

// Data pointers are not aligned by the format: a header without padding puts an F32 tensor at an
// odd address, and the reader must still hand out the right bytes.
TEST(Safetensors, UnalignedDataIsReadCorrectly) {
  const fs::path p = temp_dir() / "unaligned.safetensors";
  const std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";  // 57 bytes
  ASSERT_NE((8 + header.size()) % 4, 0u);
  write_raw(p, header, f32_bytes({1.0f, -2.5f, 3.0f}));
  auto f = SafetensorsFile::open(p);
  const TensorInfo& t = f->tensors().at("x");
  EXPECT_NE(reinterpret_cast<uintptr_t>(t.data) % 4, 0u);
  float v[3];
  std::memcpy(v, t.data, 12);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 3.0f);
}

TEST(Safetensors, HeaderWithTrailingSpacesAndNoTensors) {
  const fs::path p = temp_dir() / "empty.safetensors";
  write_raw(p, R"({"__metadata__":{"k":"v"}}    )", "");
  auto f = SafetensorsFile::open(p);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata().at("k"), "v");
}

TEST(Safetensors, GoldenCheckpointOpens) {
  const fs::path p = test::golden_dir() / "model.safetensors";
  auto f = SafetensorsFile::open(p);
  // Sizes from the fixture's config (G1: 3 layers -> 30 tensors, wte [1024, 256]).
  const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(test::golden_dir() / "config.json"));
  const int64_t layers = cfg["n_layers"], d = cfg["d_model"], rows = cfg["embedding_size"];
  EXPECT_EQ(f->tensors().size(), static_cast<size_t>(9 * layers + 3));
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const TensorInfo& wte = f->tensors().at("model.transformer.wte.weight");
  EXPECT_EQ(wte.dtype, DType::kF32);
  EXPECT_EQ(wte.shape, (std::vector<int64_t>{rows, d}));
  EXPECT_EQ(wte.nbytes, static_cast<size_t>(rows * d * 4));
}

// ---------------------------------------------------------------------------------------------
// Malformed single files: one test per malformation

TEST(SafetensorsMalformed, NonexistentFileIsIoError) {
  const fs::path p = temp_dir() / "missing.safetensors";
  expect_error([&] { SafetensorsFile::open(p); }, ErrorCode::kIo, {p.string()});
}

TEST(SafetensorsMalformed, EmptyFile) {
  const fs::path p = temp_dir() / "zero.safetensors";
  write_bytes(p, "");
  expect_bad_file(p, {"truncated"});
}

TEST(SafetensorsMalformed, ShorterThanHeaderLength) {
  const fs::path p = temp_dir() / "short.safetensors";
  write_bytes(p, std::string("\x05\x00\x00", 3));
  expect_bad_file(p, {"truncated"});
}

TEST(SafetensorsMalformed, HeaderLengthPastEndOfFile) {
  const fs::path p = temp_dir() / "hlen.safetensors";
  write_raw(p, kHeaderAB, std::string(12, '\0'), kHeaderAB.size() + 100);
  expect_bad_file(p, {"header length", "past the end"});
}

TEST(SafetensorsMalformed, HugeHeaderLength) {
  const fs::path p = temp_dir() / "hlen2.safetensors";
  write_raw(p, kHeaderAB, "", ~uint64_t{0});  // would overflow 8 + N
  expect_bad_file(p, {"header length"});
}

TEST(SafetensorsMalformed, HeaderNotJson) {
  const fs::path p = temp_dir() / "notjson.safetensors";
  write_raw(p, R"({"a":{"dtype":"F32",)", "");
  expect_bad_file(p, {"invalid JSON"});
}

TEST(SafetensorsMalformed, HeaderNotAnObject) {
  const fs::path p = temp_dir() / "array.safetensors";
  write_raw(p, "[1, 2, 3]", "");
  expect_bad_file(p, {"not a JSON object"});
}

TEST(SafetensorsMalformed, TruncatedData) {
  const fs::path p = temp_dir() / "trunc.safetensors";
  write_raw(p, kHeaderAB, std::string(10, '\0'));  // b needs bytes [8, 12)
  expect_bad_file(p, {"'b'", "past the data region"});
}

TEST(SafetensorsMalformed, UnknownDtype) {
  const fs::path p = temp_dir() / "dtype.safetensors";
  write_raw(p, R"({"w":{"dtype":"C64","shape":[4],"data_offsets":[0,4]}})", std::string(4, '\0'));
  expect_bad_file(p, {"'w'", "C64"});
}

TEST(SafetensorsMalformed, NegativeDimension) {
  const fs::path p = temp_dir() / "neg.safetensors";
  write_raw(p, R"({"w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})", std::string(16, '\0'));
  expect_bad_file(p, {"'w'", "negative dimension"});
}

TEST(SafetensorsMalformed, NonIntegerDimension) {
  const fs::path p = temp_dir() / "float.safetensors";
  write_raw(p, R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", std::string(8, '\0'));
  expect_bad_file(p, {"'w'", "not an integer"});
}

TEST(SafetensorsMalformed, ShapeOverflow) {
  const fs::path p = temp_dir() / "overflow.safetensors";
  write_raw(p, R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", std::string(8, '\0'));
  expect_bad_file(p, {"'w'", "too large"});
}

TEST(SafetensorsMalformed, BeginAfterEnd) {
  const fs::path p = temp_dir() / "order.safetensors";
  write_raw(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, '\0'));
  expect_bad_file(p, {"'w'", "begin 8 > end 4"});
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  const fs::path p = temp_dir() / "range.safetensors";
  write_raw(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[1000,1004]}})", std::string(4, '\0'));
  expect_bad_file(p, {"'w'", "past the data region"});
}

TEST(SafetensorsMalformed, BadDataOffsetsType) {
  const fs::path p = temp_dir() / "offtype.safetensors";
  write_raw(p, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(4, '\0'));
  expect_bad_file(p, {"'w'", "data_offsets"});
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  const fs::path p = temp_dir() / "overlap.safetensors";
  write_raw(p,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            std::string(12, '\0'));
  expect_bad_file(p, {"'a'", "'b'", "overlap"});
}

TEST(SafetensorsMalformed, HoleBetweenTensors) {
  const fs::path p = temp_dir() / "hole.safetensors";
  write_raw(p,
            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            std::string(12, '\0'));
  expect_bad_file(p, {"'b'", "unused bytes"});
}

TEST(SafetensorsMalformed, TrailingBytes) {
  const fs::path p = temp_dir() / "trailing.safetensors";
  write_raw(p, kHeaderAB, std::string(16, '\0'));
  expect_bad_file(p, {"4 trailing bytes"});
}

TEST(SafetensorsMalformed, DtypeTimesShapeNotBytes) {
  const fs::path p = temp_dir() / "size.safetensors";
  write_raw(p, R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  expect_bad_file(p, {"'w'", "6 bytes", "hold 8 bytes"});
}

TEST(SafetensorsMalformed, DuplicateTensorName) {
  const fs::path p = temp_dir() / "dup.safetensors";
  write_raw(p,
            R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            std::string(8, '\0'));
  expect_bad_file(p, {"duplicate key 'w'"});
}

TEST(SafetensorsMalformed, MissingField) {
  const fs::path p = temp_dir() / "nofield.safetensors";
  write_raw(p, R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", std::string(4, '\0'));
  expect_bad_file(p, {"'w'", "missing 'shape'"});
}

TEST(SafetensorsMalformed, MetadataNotAnObject) {
  const fs::path p = temp_dir() / "meta1.safetensors";
  write_raw(p, R"({"__metadata__":["pt"]})", "");
  expect_bad_file(p, {"__metadata__"});
}

TEST(SafetensorsMalformed, MetadataValueNotAString) {
  const fs::path p = temp_dir() / "meta2.safetensors";
  write_raw(p, R"({"__metadata__":{"format":"pt","version":2}})", "");
  expect_bad_file(p, {"__metadata__", "'version'"});
}

// ---------------------------------------------------------------------------------------------
// Checkpoint directories

struct Shard {
  std::string file;
  std::vector<std::string> names;
};

// Writes a sharded checkpoint: each tensor "t<k>" is F32 [k+1] filled with k, placed as listed;
// `index_map` overrides the weight_map written (default: the real placement).
void write_sharded(const fs::path& dir, const std::vector<Shard>& shards, std::optional<nlohmann::json> weight_map = {},
                   std::optional<uint64_t> total_size = {}) {
  nlohmann::json wm = nlohmann::json::object();
  uint64_t total = 0;
  for (const Shard& s : shards) {
    std::vector<std::vector<float>> data;
    std::vector<TensorToWrite> ts;
    data.reserve(s.names.size());
    for (const std::string& n : s.names) {
      const int k = std::stoi(n.substr(1));
      data.emplace_back(static_cast<size_t>(k + 1), static_cast<float>(k));
      ts.push_back({n, DType::kF32, {k + 1}, data.back().data(), data.back().size() * 4});
      wm[n] = s.file;
      total += data.back().size() * 4;
    }
    write_safetensors(dir / s.file, ts);
  }
  nlohmann::json idx;
  idx["metadata"]["total_size"] = total_size.value_or(total);
  idx["weight_map"] = weight_map.value_or(wm);
  std::ofstream(dir / "model.safetensors.index.json") << idx.dump(2);
}

const std::vector<Shard> kShards = {{"s-1.safetensors", {"t0", "t3"}},
                                    {"s-2.safetensors", {"t1"}},
                                    {"s-3.safetensors", {"t2", "t4", "t5"}}};

TEST(Checkpoint, SingleFile) {
  const fs::path dir = temp_dir();
  std::vector<float> a = {1, 2, 3}, b = {4};
  write_safetensors(dir / "model.safetensors",
                    {{"b", DType::kF32, {1}, b.data(), 4}, {"a", DType::kF32, {3}, a.data(), 12}});
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_FALSE(ck.sharded());
  EXPECT_EQ(ck.dir(), dir);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ck.total_bytes(), 16u);
  ASSERT_NE(ck.find("a"), nullptr);
  EXPECT_EQ(ck.find("zz"), nullptr);
  EXPECT_EQ(ck.get("a").shape, (std::vector<int64_t>{3}));
  expect_error([&] { ck.get("zz"); }, ErrorCode::kInvalidCheckpoint, {dir.string(), "missing tensor 'zz'"});
}

TEST(Checkpoint, Sharded) {
  const fs::path dir = temp_dir();
  write_sharded(dir, kShards);
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.sharded());
  EXPECT_EQ(ck.names().size(), 6u);
  EXPECT_EQ(ck.total_bytes(), (1u + 2 + 3 + 4 + 5 + 6) * 4);
  for (const Shard& s : kShards) {
    for (const std::string& n : s.names) {
      const TensorInfo& t = ck.get(n);
      EXPECT_EQ(fs::path(t.file).filename(), s.file) << n;
      const int k = std::stoi(n.substr(1));
      ASSERT_EQ(t.shape, (std::vector<int64_t>{k + 1}));
      std::vector<float> v(static_cast<size_t>(k + 1));
      std::memcpy(v.data(), t.data, t.nbytes);
      for (float x : v) EXPECT_EQ(x, static_cast<float>(k)) << n;
    }
  }
  // Tensors of one shard share one mapping: t2, t4, t5 are laid out back to back in s-3.
  const auto* t2 = static_cast<const uint8_t*>(ck.get("t2").data);
  EXPECT_EQ(static_cast<const uint8_t*>(ck.get("t4").data), t2 + 3 * 4);
  EXPECT_EQ(static_cast<const uint8_t*>(ck.get("t5").data), t2 + 3 * 4 + 5 * 4);
}

TEST(Checkpoint, PrefersIndexOverSingleFile) {
  const fs::path dir = temp_dir();
  write_sharded(dir, kShards);
  std::vector<float> x = {9};
  write_safetensors(dir / "model.safetensors", {{"only_single", DType::kF32, {1}, x.data(), 4}});
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_TRUE(ck.sharded());
  EXPECT_EQ(ck.find("only_single"), nullptr);
}

TEST(CheckpointMalformed, NoCheckpointInDirectory) {
  const fs::path dir = temp_dir();
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kIo, {dir.string(), "no checkpoint"});
  expect_error([&] { Checkpoint::open(dir / "absent"); }, ErrorCode::kIo, {(dir / "absent").string()});
}

TEST(CheckpointMalformed, MissingShardFile) {
  const fs::path dir = temp_dir();
  write_sharded(dir, kShards);
  fs::remove(dir / "s-2.safetensors");
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kIo,
               {"model.safetensors.index.json", "s-2.safetensors", "'t1'", "does not exist"});
}

TEST(CheckpointMalformed, IndexNamesTensorMissingFromShard) {
  const fs::path dir = temp_dir();
  write_sharded(dir, kShards);
  nlohmann::json wm = {{"t0", "s-1.safetensors"}, {"t3", "s-1.safetensors"}, {"t1", "s-2.safetensors"},
                       {"t2", "s-3.safetensors"}, {"t4", "s-3.safetensors"}, {"t5", "s-3.safetensors"},
                       {"t9", "s-2.safetensors"}};
  write_sharded(dir, kShards, wm);
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors.index.json", "'t9'", "s-2.safetensors", "missing"});
}

TEST(CheckpointMalformed, ShardHoldsTensorNotInIndex) {
  const fs::path dir = temp_dir();
  nlohmann::json wm = {{"t0", "s-1.safetensors"}, {"t3", "s-1.safetensors"}, {"t1", "s-2.safetensors"},
                       {"t2", "s-3.safetensors"}, {"t4", "s-3.safetensors"}};  // t5 not listed
  write_sharded(dir, kShards, wm, (1u + 2 + 3 + 4 + 5) * 4);
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors.index.json", "'t5'", "s-3.safetensors", "not in the index"});
}

TEST(CheckpointMalformed, TensorStoredInTwoShards) {
  const fs::path dir = temp_dir();
  // t1 is written into both s-1 and s-2; the index maps it to s-2.
  std::vector<Shard> shards = {{"s-1.safetensors", {"t0", "t1"}}, {"s-2.safetensors", {"t1"}}};
  nlohmann::json wm = {{"t0", "s-1.safetensors"}, {"t1", "s-2.safetensors"}};
  write_sharded(dir, shards, wm, (1u + 2) * 4);
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors.index.json", "'t1'", "s-1.safetensors", "s-2.safetensors"});
}

TEST(CheckpointMalformed, TotalSizeMismatch) {
  const fs::path dir = temp_dir();
  write_sharded(dir, kShards, std::nullopt, 12345);
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors.index.json", "total_size", "12345", "84"});
}

TEST(CheckpointMalformed, ShardNameWithPathSeparator) {
  for (const std::string bad : {"../s-1.safetensors", "sub/s-1.safetensors", "..", "/etc/passwd"}) {
    const fs::path dir = temp_dir();
    write_sharded(dir, kShards);
    nlohmann::json wm = {{"t0", bad}};
    write_sharded(dir, kShards, wm);
    expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
                 {"model.safetensors.index.json", "'t0'", bad, "plain file name"});
  }
}

TEST(CheckpointMalformed, DuplicateKeyInWeightMap) {
  const fs::path dir = temp_dir();
  write_sharded(dir, kShards);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"t0": "s-1.safetensors", "t0": "s-2.safetensors"}})";
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors.index.json", "duplicate key 't0'"});
}

TEST(CheckpointMalformed, IndexNotJson) {
  const fs::path dir = temp_dir();
  std::ofstream(dir / "model.safetensors.index.json") << "{\"weight_map\": ";
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors.index.json", "invalid JSON"});
}

TEST(CheckpointMalformed, IndexWithoutWeightMap) {
  const fs::path dir = temp_dir();
  std::ofstream(dir / "model.safetensors.index.json") << R"({"metadata": {"total_size": 0}})";
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {"model.safetensors.index.json", "weight_map"});
}

TEST(CheckpointMalformed, CorruptShardNamesShardAndTensor) {
  const fs::path dir = temp_dir();
  write_sharded(dir, kShards);
  // Cut the last 4 bytes of s-3: t5 (the last tensor) now runs past the data region.
  const fs::path s3 = dir / "s-3.safetensors";
  fs::resize_file(s3, fs::file_size(s3) - 4);
  expect_error([&] { Checkpoint::open(dir); }, ErrorCode::kInvalidCheckpoint,
               {s3.string(), "'t5'", "past the data region"});
}

}  // namespace
}  // namespace flashdllm
