// safetensors reading (and writing, for tools and tests), single-file and sharded checkpoints.
//
// Format (https://huggingface.co/docs/safetensors): 8-byte little-endian header length N, N bytes
// of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data
// region; offsets are relative to the data region. Files are memory-mapped read-only; tensor data
// is never copied by the reader.
//
// Validation (every failure is one Error(kInvalidCheckpoint) naming the file and, where there is
// one, the tensor): file shorter than 8 bytes, header length past the end of file, header not a
// JSON object (it may be padded with trailing spaces), duplicate keys anywhere in the header,
// "__metadata__" not an object of strings, a tensor entry without dtype/shape/data_offsets,
// unknown dtype, negative/non-integer/overflowing shape, begin > end, offsets past the data
// region, overlapping tensors, dtype size x numel != end - begin, and any byte of the data
// region not covered by exactly one tensor (holes, trailing bytes) — the reference
// implementation (huggingface/safetensors) rejects those too.
// Alignment: nothing is guaranteed. The data region starts at 8 + header length (writers that
// pad make that a multiple of 8; not all do) and offsets are arbitrary, so TensorInfo::data may
// be unaligned for its dtype: copy or convert it, never dereference it as a typed pointer.
// Sharded checkpoints (model.safetensors.index.json): weight_map values must be plain file names
// inside the directory (no '/', '\', "." or ".."); each referenced shard is mapped once (shards
// the index does not name are ignored); every weight_map entry must name an existing shard
// holding that tensor; tensors found in a shard but not mapped to it (absent from the index, or
// stored in two shards) are errors; duplicate keys in the index JSON are errors;
// metadata.total_size, when present, must equal the sum of tensor sizes in bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace flashdllm {

/// One tensor of a checkpoint: metadata plus a pointer into the memory-mapped file.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the read-only mapping; valid while the owner lives; may be unaligned
  size_t nbytes = 0;
  std::string file;            // path of the file holding it (for messages)

  int64_t numel() const noexcept;
};

/// A memory-mapped, validated .safetensors file.
class SafetensorsFile {
 public:
  /// Maps `path` read-only (MAP_SHARED, PROT_READ) and validates it as listed above. Throws
  /// Error(kIo) if it cannot be opened/mapped or is not a regular file, Error(kInvalidCheckpoint)
  /// for malformed content. No tensor data is read or copied here.
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorInfo>& tensors() const noexcept { return tensors_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

/// A Hugging Face checkpoint directory: `model.safetensors`, or `model.safetensors.index.json`
/// plus its shards. All shards stay mapped for the lifetime of the object.
class Checkpoint {
 public:
  /// Opens `dir`. Prefers the index when both forms exist. Throws Error(kIo) naming the directory
  /// when it does not exist or holds neither form, Error(kIo) naming the index, shard and a tensor
  /// when a referenced shard is missing, Error(kInvalidCheckpoint) for a malformed index (naming
  /// the index and the tensor) or as SafetensorsFile::open for a malformed shard.
  static Checkpoint open(const std::filesystem::path& dir);

  /// nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  /// Throws Error(kInvalidCheckpoint) "<dir>: missing tensor '<name>'" when absent.
  const TensorInfo& get(std::string_view name) const;
  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  /// Sum of tensor sizes in bytes.
  size_t total_bytes() const noexcept;
  const std::filesystem::path& dir() const noexcept { return dir_; }
  bool sharded() const noexcept { return sharded_; }

 private:
  std::filesystem::path dir_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> index_;
};

/// A tensor to write: name, dtype, shape and raw little-endian bytes (size must match).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

/// Writes a .safetensors file: header keys "__metadata__" (only when `metadata` is non-empty) then
/// the tensors in the given order, data laid out back to back in that order, header padded with
/// spaces so the data region starts at a multiple of 8. Throws Error(kIo) naming the file on
/// create/write failure, Error(kInvalidArgument) naming the file and tensor when nbytes !=
/// dtype size x numel, a dimension is negative, a name is empty/"__metadata__"/repeated, or data
/// is null with nbytes > 0.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace flashdllm
