// Library logging: one named spdlog logger ("flashdllm") writing to stderr.
// Library code logs sparingly (load summaries, warnings); apps decide the level.
#pragma once

#include <spdlog/spdlog.h>

namespace flashdllm {

/// The library logger. Thread-safe; created on first use.
spdlog::logger& logger();

}  // namespace flashdllm
