// Shared by the fuzz targets: the libFuzzer entry points, an in-memory file with a path (the
// readers take paths), a scratch directory, and the rule every target enforces.
//
// The rule: on any input the library either succeeds or throws flashdllm::Error. Every other
// outcome is a bug the fuzzer reports: a crash, a sanitizer report, a hang, unbounded memory, or any
// other exception escaping the library (a nlohmann::json or std:: exception means a check is
// missing), which reaches std::terminate because the targets catch Error only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace flashdllm::fuzz {

/// A memfd (a regular file in memory) reachable as /proc/self/fd/N; rewritten for every input.
class MemFile {
 public:
  explicit MemFile(const char* name);
  ~MemFile();
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  /// Replaces the content with `bytes`.
  void write(std::string_view bytes);
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  int fd_ = -1;
  std::filesystem::path path_;
};

/// The bytes as a file: a MemFile per `name`, rewritten with `data` on every call; returns its path.
const std::filesystem::path& as_file(const char* name, const uint8_t* data, size_t size);

/// A fresh directory unique to this process (on /dev/shm when it exists), removed at exit.
const std::filesystem::path& scratch_dir();

/// Writes `bytes` to `path` (truncating); aborts on failure (a harness error, not a finding).
void write_file(const std::filesystem::path& path, std::string_view bytes);

/// A traps-on-false check for properties a target asserts (a failure is a finding).
inline void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace flashdllm::fuzz
