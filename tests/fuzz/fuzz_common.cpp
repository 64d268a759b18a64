#include "fuzz/fuzz_common.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <system_error>

#include "core/log.h"

namespace flashdllm::fuzz {

namespace {
// Library warnings (e.g. a tokenizer's declared ids) would flood the fuzzer's output.
const bool kQuiet = [] {
  logger().set_level(spdlog::level::off);
  return true;
}();
}  // namespace

MemFile::MemFile(const char* name) {
  fd_ = ::memfd_create(name, MFD_CLOEXEC);
  if (fd_ < 0) {
    std::perror("memfd_create");
    std::abort();
  }
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

MemFile::~MemFile() { ::close(fd_); }

void MemFile::write(std::string_view bytes) {
  if (::ftruncate(fd_, 0) != 0) std::abort();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
}

const std::filesystem::path& as_file(const char* name, const uint8_t* data, size_t size) {
  static std::map<std::string, std::unique_ptr<MemFile>> files;
  auto& f = files[name];
  if (!f) f = std::make_unique<MemFile>(name);
  f->write({reinterpret_cast<const char*>(data), size});
  return f->path();
}

const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("fdllm-fuzz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d, ec);
    std::filesystem::create_directories(d);
    static const std::string to_remove = d.string();
    std::atexit([] {
      std::error_code e;
      std::filesystem::remove_all(to_remove, e);
    });
    return d;
  }();
  return dir;
}

void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

}  // namespace flashdllm::fuzz
