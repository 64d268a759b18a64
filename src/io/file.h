// Reading the files of a checkpoint directory: config.json, tokenizer.json, tokenizer_config.json,
// model.safetensors(.index.json) and its shards.
//
// Every file is opened without blocking (O_NONBLOCK) and refused unless it is a regular file, so a
// FIFO, socket, device (/dev/zero) or directory named like a checkpoint file fails at once with
// Error(kIo) "<path>: not a regular file (...)" instead of blocking forever in open() or reading
// without end. The check is made on the opened descriptor (fstat), not on the name, so nothing can
// swap the file in between.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace flashdllm {

/// Opens `path` read-only (O_CLOEXEC) and returns the descriptor; the caller closes it. Throws
/// Error(kIo) naming the path when it cannot be opened or stat'ed, or is not a regular file.
int open_regular_file(const std::filesystem::path& path);

/// The whole content of the regular file `path`. Throws as open_regular_file, or Error(kIo) when a
/// read fails.
std::string read_regular_file(const std::filesystem::path& path);

/// The content of an input file the user names (a prompt file): a regular file, or a stream (a
/// pipe, a FIFO, /dev/stdin, a character device), read with a bound and without blocking forever.
/// Opened with O_NONBLOCK (a FIFO without a writer blocks in open() otherwise); a FIFO or pipe then
/// waits at most `wait_s` seconds for its first byte or its writer's close. Throws Error(kIo) naming
/// the path and `what` (e.g. "--prompt-file") for a directory, an unreadable file, more than
/// `max_bytes` bytes (a regular file from its size, a stream once past it: /dev/zero stops there),
/// or a FIFO nobody writes to within wait_s.
std::string read_input_file(const std::filesystem::path& path, size_t max_bytes, int wait_s, const std::string& what);

/// Reads and parses the JSON file `path`. With `reject_duplicate_keys`, an object holding a key
/// twice anywhere in the document is an error (nlohmann keeps the last one silently, which would
/// let two entries of one name hide each other). Throws as read_regular_file, or
/// Error(kInvalidCheckpoint) "<path>: invalid JSON: ..." / "<path>: duplicate key '<k>' in JSON".
nlohmann::json read_json_file(const std::filesystem::path& path, bool reject_duplicate_keys = false);

/// Parses `text` as JSON (as read_json_file); `what` names its source in messages.
nlohmann::json parse_json_text(std::string_view text, const std::string& what, bool reject_duplicate_keys = false);

/// parse_json_text without throwing: the value, or a discarded one (is_discarded()) with either
/// *error set to the parser's message or (with reject_duplicate_keys) *duplicate_key to the key
/// found twice.
nlohmann::json try_parse_json(std::string_view text, bool reject_duplicate_keys, std::string* error,
                              std::string* duplicate_key);

/// Bounds of parse_json_bounded for untrusted text; 0 = unbounded.
struct JsonLimits {
  bool reject_duplicate_keys = false;  ///< a key twice in one object is an error
  int max_depth = 0;                   ///< nesting of arrays and objects (the document's own = 1)
  int64_t max_values = 0;              ///< values of every kind, arrays and objects included (keys not)
};

/// Why parse_json_bounded failed.
enum class JsonFailure { kNone, kSyntax, kDuplicateKey, kTooDeep, kTooManyValues };

struct JsonParse {
  nlohmann::json value;  ///< a discarded value (is_discarded()) unless failure == kNone
  JsonFailure failure = JsonFailure::kNone;
  std::string detail;  ///< kSyntax: the parser's message; kDuplicateKey: the key
};

/// Parses `text` in one pass through nlohmann's SAX interface into a tree, in time and memory
/// linear in the text: duplicate keys are looked up in the object being built only (nlohmann's
/// callback parser, used before, rescans the enclosing array at every end of an object: 200k `{}`
/// cost 12.9 s), and the depth and value limits stop the parse at the first value past them, before
/// any tree for the rest is built (the SAX parser itself keeps no recursion).
JsonParse parse_json_bounded(std::string_view text, const JsonLimits& limits);

/// The deepest nesting of arrays and objects in `text` read as JSON text (brackets inside strings,
/// escapes included, do not count), stopping once it exceeds `limit` (the result is then limit + 1).
/// One pass, no allocation: a guard before parsing untrusted text, whose tree costs ~60 bytes per
/// level (8 MB of "[[[[..." held ~250 MB). Text that is not JSON gives some count; the parser then
/// refuses it.
int json_nesting_depth(std::string_view text, int limit);

}  // namespace flashdllm
