// Regular-file reading and JSON parsing for checkpoint files (see file.h).
#include "io/file.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
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

std::string read_input_file(const std::filesystem::path& path, size_t max_bytes, int wait_s, const std::string& what) {
  const std::string name = path.string();
  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FDLLM_CHECK(fd >= 0, ErrorCode::kIo, "cannot read {} '{}': {}", what, name, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  FDLLM_CHECK(::fstat(fd, &st) == 0, ErrorCode::kIo, "cannot read {} '{}': {}", what, name, std::strerror(errno));
  FDLLM_CHECK(!S_ISDIR(st.st_mode), ErrorCode::kIo, "cannot read {} '{}': it is a directory", what, name);
  FDLLM_CHECK(!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) <= max_bytes, ErrorCode::kIo,
              "{} '{}' is {} bytes, more than the limit of {} bytes", what, name, st.st_size, max_bytes);
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
    // A FIFO opened without a writer reports nothing until one writes or closes: wait, bounded.
    pollfd p{fd, POLLIN, 0};
    int r = 0;
    do {
      r = ::poll(&p, 1, wait_s * 1000);
    } while (r < 0 && errno == EINTR);
    FDLLM_CHECK(r > 0, ErrorCode::kIo, "{} '{}': {} (a FIFO or pipe nobody wrote to within {} s)", what, name,
                r == 0 ? "nothing to read" : std::strerror(errno), wait_s);
  }
  // Blocking reads from here on (a terminal waits for its end of input, as any reader of stdin).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    FDLLM_CHECK(n >= 0, ErrorCode::kIo, "{} '{}': read failed: {}", what, name, std::strerror(errno));
    if (n == 0) break;
    FDLLM_CHECK(out.size() + static_cast<size_t>(n) <= max_bytes, ErrorCode::kIo,
                "{} '{}' holds more than the limit of {} bytes (read stopped there)", what, name, max_bytes);
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

namespace {

/// nlohmann's SAX events into a tree (as its json_sax_dom_parser), with the checks of JsonLimits.
class BoundedDomBuilder {
 public:
  using json = nlohmann::json;
  BoundedDomBuilder(json& root, const JsonLimits& limits) : root_(root), limits_(limits) {}

  bool null() { return add(nullptr) != nullptr; }
  bool boolean(bool v) { return add(v) != nullptr; }
  bool number_integer(json::number_integer_t v) { return add(v) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return add(v) != nullptr; }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) { return add(v) != nullptr; }
  bool string(json::string_t& v) { return add(std::move(v)) != nullptr; }
  bool binary(json::binary_t& v) { return add(json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t /*size*/) { return open(json::value_t::object); }
  bool start_array(std::size_t /*size*/) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    json& object = *stack_.back();
    // One lookup in this object's own map: O(log keys), nothing above it is visited.
    if (limits_.reject_duplicate_keys && object.contains(k)) return fail(JsonFailure::kDuplicateKey, k);
    slot_ = &object[k];  // a std::map node: stays put while later keys are inserted
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const json::exception& e) {
    return fail(JsonFailure::kSyntax, e.what());
  }

  JsonFailure failure = JsonFailure::kNone;
  std::string detail;

 private:
  bool fail(JsonFailure f, std::string what) {
    if (failure == JsonFailure::kNone) {
      failure = f;
      detail = std::move(what);
    }
    return false;
  }
  /// Places a value where the parser is (the root, the open array's end, or the last key's slot);
  /// nullptr past max_values.
  template <class V>
  json* add(V&& v) {
    if (limits_.max_values > 0 && ++values_ > limits_.max_values) {
      fail(JsonFailure::kTooManyValues, "");
      return nullptr;
    }
    if (stack_.empty()) {
      root_ = json(std::forward<V>(v));
      return &root_;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.emplace_back(std::forward<V>(v));
      return &parent.back();  // the array grows no further while this value is open
    }
    *slot_ = json(std::forward<V>(v));
    return slot_;
  }
  bool open(json::value_t kind) {
    if (limits_.max_depth > 0 && static_cast<int>(stack_.size()) >= limits_.max_depth)
      return fail(JsonFailure::kTooDeep, "");
    json* v = add(kind);
    if (!v) return false;
    stack_.push_back(v);
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  json& root_;
  const JsonLimits& limits_;
  std::vector<json*> stack_;  // the open arrays and objects, innermost last
  json* slot_ = nullptr;      // the value slot of the last key read
  int64_t values_ = 0;
};

}  // namespace

JsonParse parse_json_bounded(std::string_view text, const JsonLimits& limits) {
  JsonParse out;
  nlohmann::json root;
  BoundedDomBuilder builder(root, limits);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const nlohmann::json::exception& e) {  // the SAX parser reports through parse_error; be safe
    builder.parse_error(0, "", e);
  }
  if (ok && builder.failure == JsonFailure::kNone) {
    out.value = std::move(root);
    return out;
  }
  out.value = nlohmann::json(nlohmann::json::value_t::discarded);
  out.failure = builder.failure == JsonFailure::kNone ? JsonFailure::kSyntax : builder.failure;
  out.detail = std::move(builder.detail);
  return out;
}

nlohmann::json try_parse_json(std::string_view text, bool reject_duplicate_keys, std::string* error,
                              std::string* duplicate_key) {
  JsonLimits limits;
  limits.reject_duplicate_keys = reject_duplicate_keys;
  JsonParse p = parse_json_bounded(text, limits);
  if (p.failure == JsonFailure::kDuplicateKey) *duplicate_key = p.detail;
  if (p.failure == JsonFailure::kSyntax) *error = p.detail;
  return std::move(p.value);
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
