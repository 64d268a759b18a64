// An op-timing decorator over any Backend: where does an iteration's time go?
//
// Every call is forwarded to the wrapped backend between two synchronize() calls and timed with a
// steady host clock, so one entry's time is "launch to completion" of that op alone (queueing overlap
// between ops and host work is removed: profiled runs are slower than plain ones, by roughly one
// stream synchronisation per op, ~5-20 µs on CUDA). Time outside every op (host planning, decisions,
// allocation) is what the caller's wall clock shows beyond the sum. The device has no profiler on
// our GPU machine (no nsys), so this is the engine's own breakdown (`flashdllm generate --profile-ops`).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "flashdllm/op_profile.h"

namespace flashdllm {


/// Shared accumulator of a ProfilingBackend (outlives nothing: read it while the backend lives).
class OpProfile {
 public:
  void add(const std::string& op, double seconds);
  /// Entries sorted by descending total time.
  std::vector<OpProfileEntry> entries() const;
  double total_seconds() const;
  void clear() { by_op_.clear(); }

 private:
  std::map<std::string, OpProfileEntry> by_op_;
};

/// Wraps `inner`; every op is timed into `profile` (not owned; must outlive the returned backend).
/// device(), name() (suffixed " [op profiling]"), dtypes and free_memory() are passed through untimed.
std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> inner, OpProfile& profile);

}  // namespace flashdllm
