// flashdllm public API: the per-op timing of EngineOptions::profile_ops (Engine::op_profile), also
// the accumulator entry of the profiling backend (src/backend/profiling_backend.h).
#pragma once

#include <cstdint>
#include <string>

namespace flashdllm {

/// Accumulated launch-to-completion time of one backend op kind over the engine's generate calls
/// (EngineOptions::profile_ops). `op` is the backend method ("attention", "select_tokens", ...);
/// matmuls are split by weight shape ("matmul 12288x4096"; " ->f32": F32 logits of a BF16 backend).
struct OpProfileEntry {
  std::string op;
  int64_t calls = 0;
  double seconds = 0.0;
};

}  // namespace flashdllm
