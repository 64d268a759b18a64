// safetensors reader (mmap, read-only), sharded checkpoints and the writer. See safetensors.h for
// the format and the full list of checks.
//
// Invariants kept here:
//  * every TensorInfo::data points inside the read-only mapping of its SafetensorsFile, and the
//    tensors of one file tile the data region exactly (no overlap, no hole, no trailing bytes),
//    as the reference implementation (huggingface/safetensors) requires;
//  * nothing is assumed about alignment: the data region starts at 8 + header length, which
//    writers usually (not always) pad to a multiple of 8, and tensor offsets are arbitrary, so a
//    data pointer may be unaligned for its dtype. Consumers copy or convert; they never
//    dereference it as a typed pointer.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/file.h"

namespace flashdllm {

namespace {

using nlohmann::json;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A shard name from an index must be a plain file name inside the checkpoint directory.
bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return name.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos;
}

int64_t checked_numel(const std::vector<int64_t>& shape, bool* overflow) {
  int64_t n = 1;
  *overflow = false;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      *overflow = true;
      return 0;
    }
  }
  return n;
}

}  // namespace

int64_t TensorInfo::numel() const noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

namespace {

/// A read-only mapping of a whole safetensors file (>= 8 bytes: the header length is there).
struct FileMapping {
  void* map;
  uint64_t size;
};

FileMapping map_safetensors_file(const std::filesystem::path& path, const std::string& fname) {
  const int fd = open_regular_file(path);  // refuses FIFOs, devices, directories without blocking
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    FDLLM_FAIL(ErrorCode::kIo, "{}: cannot stat: {}", fname, std::strerror(err));
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    FDLLM_FAIL(ErrorCode::kInvalidCheckpoint,
               "{}: truncated safetensors file ({} bytes; the 8-byte header length is missing)", fname,
               file_size);
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  FDLLM_CHECK(map != MAP_FAILED, ErrorCode::kIo, "{}: mmap of {} bytes failed: {}", fname, file_size,
              std::strerror(map_err));
  return {map, file_size};
}

/// The JSON header of a mapped file of file_size (>= 8) bytes; sets header_len (little-endian u64
/// at offset 0). Throws kInvalidCheckpoint if it runs past the file or is not a JSON object.
json parse_header(const uint8_t* base, uint64_t file_size, const std::string& fname, uint64_t& header_len) {
  header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian
  FDLLM_CHECK_CKPT(header_len <= file_size - 8,
                   "{}: header length {} runs past the end of the file ({} bytes; truncated or not a "
                   "safetensors file)",
                   fname, header_len, file_size);
  FDLLM_CHECK_CKPT(header_len >= 2 && base[8] == '{', "{}: header is not a JSON object (must start with '{{')",
                   fname);
  const std::string_view header(reinterpret_cast<const char*>(base + 8), header_len);
  json j = parse_json_text(header, fname + " (safetensors header)", /*reject_duplicate_keys=*/true);
  FDLLM_CHECK_CKPT(j.is_object(), "{}: header is not a JSON object", fname);
  return j;
}

void parse_metadata(const json& entry, const std::string& fname, std::map<std::string, std::string>& metadata) {
  FDLLM_CHECK_CKPT(entry.is_object(), "{}: '__metadata__' must be an object of strings", fname);
  for (const auto& [k, v] : entry.items()) {
    FDLLM_CHECK_CKPT(v.is_string(), "{}: '__metadata__' value of '{}' must be a string (got {})", fname, k,
                     v.type_name());
    metadata[k] = v.get<std::string>();
  }
}

/// The dtype and shape of tensor entry `name` (every dimension a non-negative int64).
void parse_dtype_and_shape(const json& entry, const std::string& fname, const std::string& name, TensorInfo& t) {
  auto it = entry.find("dtype");
  FDLLM_CHECK_CKPT(it != entry.end(), "{}: tensor '{}': missing 'dtype'", fname, name);
  FDLLM_CHECK_CKPT(it->is_string(), "{}: tensor '{}': 'dtype' must be a string", fname, name);
  const auto dt = parse_dtype(it->get_ref<const std::string&>());
  FDLLM_CHECK_CKPT(dt.has_value(),
                   "{}: tensor '{}': unknown or unsupported dtype '{}' (supported: F32, F16, BF16, F64, I64, "
                   "I32, I8, U8, BOOL)",
                   fname, name, it->get<std::string>());
  t.dtype = *dt;

  it = entry.find("shape");
  FDLLM_CHECK_CKPT(it != entry.end(), "{}: tensor '{}': missing 'shape'", fname, name);
  FDLLM_CHECK_CKPT(it->is_array(), "{}: tensor '{}': 'shape' must be an array of integers", fname, name);
  for (const auto& d : *it) {
    FDLLM_CHECK_CKPT(d.is_number_integer(), "{}: tensor '{}': shape entry {} is not an integer", fname, name, d.dump());
    FDLLM_CHECK_CKPT(d.is_number_unsigned() || d.get<int64_t>() >= 0, "{}: tensor '{}': negative dimension {} in shape",
                     fname, name, d.dump());
    FDLLM_CHECK_CKPT(d.is_number_integer() && d.get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()},
                     "{}: tensor '{}': dimension {} too large", fname, name, d.dump());
    t.shape.push_back(d.get<int64_t>());
  }
}

/// Tensor entry `name` of a header whose data region (data_size bytes) starts at `data`; sets
/// [begin, end), its byte range in that region, after checking it holds exactly dtype x shape.
TensorInfo parse_tensor_entry(const json& entry, const std::string& fname, const std::string& name, const uint8_t* data,
                              uint64_t data_size, uint64_t& begin, uint64_t& end) {
  FDLLM_CHECK_CKPT(!name.empty(), "{}: tensor with an empty name", fname);
  FDLLM_CHECK_CKPT(entry.is_object(), "{}: tensor '{}': entry must be an object with dtype, shape, data_offsets", fname,
                   name);
  TensorInfo t;
  t.name = name;
  t.file = fname;
  parse_dtype_and_shape(entry, fname, name, t);

  auto it = entry.find("data_offsets");
  FDLLM_CHECK_CKPT(it != entry.end(), "{}: tensor '{}': missing 'data_offsets'", fname, name);
  FDLLM_CHECK_CKPT(it->is_array() && it->size() == 2 && (*it)[0].is_number_unsigned() && (*it)[1].is_number_unsigned(),
                   "{}: tensor '{}': 'data_offsets' must be [begin, end] with non-negative integers (got {})", fname,
                   name, it->dump());
  begin = (*it)[0].get<uint64_t>();
  end = (*it)[1].get<uint64_t>();
  FDLLM_CHECK_CKPT(begin <= end, "{}: tensor '{}': data_offsets begin {} > end {}", fname, name, begin, end);
  FDLLM_CHECK_CKPT(end <= data_size,
                   "{}: tensor '{}': data_offsets [{}, {}] run past the data region ({} bytes; file truncated?)", fname,
                   name, begin, end, data_size);

  bool overflow = false;
  const int64_t numel = checked_numel(t.shape, &overflow);
  uint64_t expect = 0;
  FDLLM_CHECK_CKPT(!overflow && !__builtin_mul_overflow(static_cast<uint64_t>(numel),
                                                        static_cast<uint64_t>(dtype_size(t.dtype)), &expect),
                   "{}: tensor '{}': shape {} is too large", fname, name, shape_str(t.shape));
  FDLLM_CHECK_CKPT(expect == end - begin,
                   "{}: tensor '{}': {} x {} elements = {} bytes, but data_offsets [{}, {}] hold {} bytes", fname, name,
                   dtype_name(t.dtype), numel, expect, begin, end, end - begin);

  t.data = data + begin;
  t.nbytes = static_cast<size_t>(end - begin);
  return t;
}

/// A tensor's byte range in the data region.
struct Span {
  uint64_t begin, end;
  const std::string* name;
};

/// The tensors must tile the data region exactly: sort by (begin, end) and walk.
void check_tiling(std::vector<Span>& spans, const std::string& fname, uint64_t data_size) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const std::string* prev = nullptr;
  for (const Span& s : spans) {
    FDLLM_CHECK_CKPT(s.begin >= cursor, "{}: tensors '{}' and '{}' overlap (data_offsets begin {} < previous end {})",
                     fname, *prev, *s.name, s.begin, cursor);
    FDLLM_CHECK_CKPT(s.begin == cursor, "{}: tensor '{}': {} unused bytes before it in the data region (offset {})",
                     fname, *s.name, s.begin - cursor, cursor);
    cursor = s.end;
    prev = s.name;
  }
  FDLLM_CHECK_CKPT(cursor == data_size, "{}: {} trailing bytes after the last tensor (data region {} bytes)", fname,
                   data_size - cursor, data_size);
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string fname = path.string();
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;

  const FileMapping mapping = map_safetensors_file(path, fname);
  f->map_ = mapping.map;  // from here on the destructor unmaps on any error
  f->map_size_ = mapping.size;
  const auto* base = static_cast<const uint8_t*>(mapping.map);
  const uint64_t file_size = mapping.size;

  uint64_t header_len = 0;
  const json j = parse_header(base, file_size, fname, header_len);
  const uint64_t data_begin = 8 + header_len;
  const uint64_t data_size = file_size - data_begin;

  std::vector<Span> spans;
  spans.reserve(j.size());
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry, fname, f->metadata_);
      continue;
    }
    uint64_t begin = 0, end = 0;
    TensorInfo t = parse_tensor_entry(entry, fname, name, base + data_begin, data_size, begin, end);
    auto [pos, inserted] = f->tensors_.emplace(name, std::move(t));
    FDLLM_ASSERT(inserted);  // duplicate keys were rejected by the parser
    spans.push_back({begin, end, &pos->first});
  }
  check_tiling(spans, fname, data_size);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const std::string dname = dir.string();
  std::error_code ec;
  FDLLM_CHECK(fs::is_directory(dir, ec), ErrorCode::kIo, "{}: checkpoint directory does not exist", dname);

  Checkpoint ck;
  ck.dir_ = dir;
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";

  if (fs::exists(index_path, ec)) {
    ck.sharded_ = true;
    const std::string iname = index_path.string();
    const json j = read_json_file(index_path, /*reject_duplicate_keys=*/true);
    FDLLM_CHECK_CKPT(j.is_object(), "{}: index must be a JSON object", iname);
    auto wm = j.find("weight_map");
    FDLLM_CHECK_CKPT(wm != j.end(), "{}: missing 'weight_map'", iname);
    FDLLM_CHECK_CKPT(wm->is_object(), "{}: 'weight_map' must be an object {{tensor name: shard file}}", iname);
    FDLLM_CHECK_CKPT(!wm->empty(), "{}: 'weight_map' is empty", iname);

    // Shard name -> tensors it must hold; each shard is opened once.
    std::map<std::string, std::set<std::string>> shards;
    for (const auto& [name, shard] : wm->items()) {
      FDLLM_CHECK_CKPT(shard.is_string(), "{}: weight_map entry of tensor '{}' must be a string", iname, name);
      const auto& s = shard.get_ref<const std::string&>();
      FDLLM_CHECK_CKPT(is_plain_file_name(s),
                       "{}: tensor '{}': shard name '{}' must be a plain file name inside the checkpoint "
                       "directory (no path separators, '.' or '..')",
                       iname, name, s);
      shards[s].insert(name);
    }

    for (const auto& [shard, names] : shards) {
      const fs::path shard_path = dir / shard;
      FDLLM_CHECK(fs::exists(shard_path, ec), ErrorCode::kIo, "{}: shard '{}' (holding tensor '{}') does not exist",
                  iname, shard_path.string(), *names.begin());
      auto file = SafetensorsFile::open(shard_path);
      for (const std::string& name : names) {
        auto it = file->tensors().find(name);
        FDLLM_CHECK_CKPT(it != file->tensors().end(), "{}: tensor '{}' listed in the index is missing from shard {}",
                         iname, name, shard_path.string());
        ck.index_.emplace(name, &it->second);
      }
      for (const auto& [name, info] : file->tensors()) {
        if (names.count(name) != 0) continue;
        auto mapped = wm->find(name);
        if (mapped == wm->end())
          FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "{}: tensor '{}' is in shard {} but not in the index", iname,
                     name, shard_path.string());
        FDLLM_FAIL(ErrorCode::kInvalidCheckpoint,
                   "{}: tensor '{}' is in shard {}, but the index maps it to '{}' (stored twice or misplaced)", iname,
                   name, shard_path.string(), mapped->get<std::string>());
      }
      ck.files_.push_back(std::move(file));
    }

    auto meta = j.find("metadata");
    if (meta != j.end() && !meta->is_null()) {
      FDLLM_CHECK_CKPT(meta->is_object(), "{}: 'metadata' must be an object", iname);
      auto ts = meta->find("total_size");
      if (ts != meta->end() && !ts->is_null()) {
        FDLLM_CHECK_CKPT(ts->is_number_unsigned(), "{}: metadata.total_size must be a non-negative integer (got {})",
                         iname, ts->dump());
        const uint64_t want = ts->get<uint64_t>();
        FDLLM_CHECK_CKPT(want == ck.total_bytes(),
                         "{}: metadata.total_size is {} but the shards' tensors hold {} bytes", iname, want,
                         ck.total_bytes());
      }
    }
    return ck;
  }

  FDLLM_CHECK(fs::exists(single_path, ec), ErrorCode::kIo,
              "{}: no checkpoint found (neither model.safetensors.index.json nor model.safetensors)", dname);
  ck.files_.push_back(SafetensorsFile::open(single_path));
  for (const auto& [name, info] : ck.files_.back()->tensors()) ck.index_.emplace(name, &info);
  return ck;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  FDLLM_CHECK_CKPT(t != nullptr, "{}: missing tensor '{}'", dir_.string(), name);
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, info] : index_) out.push_back(name);
  return out;
}

size_t Checkpoint::total_bytes() const noexcept {
  size_t n = 0;
  for (const auto& [name, info] : index_) n += info->nbytes;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Writer

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string fname = path.string();
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    FDLLM_CHECK_ARG(!t.name.empty() && t.name != "__metadata__", "{}: invalid tensor name '{}'", fname, t.name);
    FDLLM_CHECK_ARG(seen.insert(t.name).second, "{}: tensor '{}' given twice", fname, t.name);
    bool overflow = false;
    for (int64_t d : t.shape)
      FDLLM_CHECK_ARG(d >= 0, "{}: tensor '{}': negative dimension in shape {}", fname, t.name, shape_str(t.shape));
    const int64_t numel = checked_numel(t.shape, &overflow);
    FDLLM_CHECK_ARG(!overflow, "{}: tensor '{}': shape {} overflows", fname, t.name, shape_str(t.shape));
    const uint64_t expect = static_cast<uint64_t>(numel) * dtype_size(t.dtype);
    FDLLM_CHECK_ARG(expect == t.nbytes, "{}: tensor '{}': {} x shape {} needs {} bytes, got {}", fname, t.name,
                    dtype_name(t.dtype), shape_str(t.shape), expect, t.nbytes);
    FDLLM_CHECK_ARG(t.nbytes == 0 || t.data != nullptr, "{}: tensor '{}': null data", fname, t.name);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + expect}}};
    offset += expect;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad so the data region starts 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));

  std::FILE* fp = std::fopen(fname.c_str(), "wb");
  FDLLM_CHECK(fp != nullptr, ErrorCode::kIo, "{}: cannot create: {}", fname, std::strerror(errno));
  bool ok = std::fwrite(len, 1, 8, fp) == 8 && std::fwrite(h.data(), 1, h.size(), fp) == h.size();
  for (const TensorToWrite& t : tensors) {
    if (!ok) break;
    if (t.nbytes > 0) ok = std::fwrite(t.data, 1, t.nbytes, fp) == t.nbytes;
  }
  const int err = errno;
  ok = (std::fclose(fp) == 0) && ok;
  FDLLM_CHECK(ok, ErrorCode::kIo, "{}: write failed: {}", fname, std::strerror(err));
}

}  // namespace flashdllm
