// Regular-file reading and JSON parsing for checkpoint files (see file.h).
#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace flashdllm {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a plain file";
}

}  // namespace

int open_regular_file(const std::filesystem::path& path) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO without a writer would otherwise block forever. It has no effect on
  // reads of regular files, the only kind accepted below.
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FDLLM_CHECK(fd >= 0, ErrorCode::kIo, "{}: cannot open: {}", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    FDLLM_FAIL(ErrorCode::kIo, "{}: cannot stat: {}", name, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    FDLLM_FAIL(ErrorCode::kIo, "{}: not a regular file ({})", name, file_kind(st.st_mode));
  }
  return fd;
}

std::string read_regular_file(const std::filesystem::path& path) {
  const int fd = open_regular_file(path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      FDLLM_FAIL(ErrorCode::kIo, "{}: read failed: {}", path.string(), std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

nlohmann::json try_parse_json(std::string_view text, bool reject_duplicate_keys, std::string* error,
                              std::string* duplicate_key) {
  using nlohmann::json;
  std::vector<std::set<std::string>> stack;  // keys seen in each open object
  std::string duplicate;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
    switch (ev) {
      case json::parse_event_t::object_start: stack.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case json::parse_event_t::key:
        if (!stack.empty() && parsed.is_string()) {
          const auto& k = parsed.get_ref<const std::string&>();
          if (!stack.back().insert(k).second && duplicate.empty()) duplicate = k;
        }
        break;
      default: break;
    }
    return true;
  };
  json j;
  try {
    j = reject_duplicate_keys ? json::parse(text.begin(), text.end(), cb) : json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    *error = e.what();
    return json(json::value_t::discarded);
  }
  if (!duplicate.empty()) {
    *duplicate_key = duplicate;
    return json(json::value_t::discarded);
  }
  return j;
}

nlohmann::json parse_json_text(std::string_view text, const std::string& what, bool reject_duplicate_keys) {
  std::string error, duplicate;
  nlohmann::json j = try_parse_json(text, reject_duplicate_keys, &error, &duplicate);
  FDLLM_CHECK_CKPT(duplicate.empty(), "{}: duplicate key '{}' in JSON", what, duplicate);
  FDLLM_CHECK_CKPT(!j.is_discarded(), "{}: invalid JSON: {}", what, error);
  return j;
}

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
      continue;
    }
    switch (ch) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) deepest = depth;
        if (deepest > limit) return limit + 1;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return deepest;
}

nlohmann::json read_json_file(const std::filesystem::path& path, bool reject_duplicate_keys) {
  return parse_json_text(read_regular_file(path), path.string(), reject_duplicate_keys);
}

}  // namespace flashdllm
