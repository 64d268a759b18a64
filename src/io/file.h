// Reading the files of a checkpoint directory: config.json, tokenizer.json, tokenizer_config.json,
// model.safetensors(.index.json) and its shards.
//
// Every file is opened without blocking (O_NONBLOCK) and refused unless it is a regular file, so a
// FIFO, socket, device (/dev/zero) or directory named like a checkpoint file fails at once with
// Error(kIo) "<path>: not a regular file (...)" instead of blocking forever in open() or reading
// without end. The check is made on the opened descriptor (fstat), not on the name, so nothing can
// swap the file in between.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace flashdllm {

/// Opens `path` read-only (O_CLOEXEC) and returns the descriptor; the caller closes it. Throws
/// Error(kIo) naming the path when it cannot be opened or stat'ed, or is not a regular file.
int open_regular_file(const std::filesystem::path& path);

/// The whole content of the regular file `path`. Throws as open_regular_file, or Error(kIo) when a
/// read fails.
std::string read_regular_file(const std::filesystem::path& path);

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

/// The deepest nesting of arrays and objects in `text` read as JSON text (brackets inside strings,
/// escapes included, do not count), stopping once it exceeds `limit` (the result is then limit + 1).
/// One pass, no allocation: a guard before parsing untrusted text, whose tree costs ~60 bytes per
/// level (8 MB of "[[[[..." held ~250 MB). Text that is not JSON gives some count; the parser then
/// refuses it.
int json_nesting_depth(std::string_view text, int limit);

}  // namespace flashdllm
