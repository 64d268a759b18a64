// The graph cache of CudaBackend::run_recorded (Backend::run_recorded's contract): a key's first
// sighting runs its ops one by one, the second captures them into a CUDA graph on the stream and
// launches it, later sightings launch that graph. At most kMaxGraphs graphs, the least recently used
// dropped first; a key whose capture failed twice is never captured again. Reference: CUDA
// Programming Guide, "CUDA Graphs", stream capture. Private to src/backend/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace flashdllm::cuda_impl {

struct GraphExecDestroy {
  void operator()(cudaGraphExec_t g) const noexcept {
    if (g) cudaGraphExecDestroy(g);
  }
};
using GraphExecPtr = std::unique_ptr<CUgraphExec_st, GraphExecDestroy>;

class GraphCache {
 public:
  /// What run() did: ran the ops one by one, or launched a graph (just captured, or stored).
  enum class Ran { kDirect, kCaptured, kReplayed };

  /// Runs `ops` for `key` on `stream` as the file comment says. A failed capture runs nothing, so the
  /// ops then run directly (raising their errors). Throws Error(kDevice) when a launch fails.
  Ran run(const std::vector<int64_t>& key, const std::function<void()>& ops, cudaStream_t stream);

  /// Counts a call that ran op by op with graphs off.
  void count_direct() noexcept { ++stats_.direct; }

  /// Drops every graph and every sighting: graphs hold the device addresses of their launches, so
  /// when a buffer they read moves (the attention work list, cuDNN's arrays) every graph is stale.
  void clear();

  /// True while ops are being captured (host staging must not be captured: a graph would keep the
  /// staging address).
  bool capturing() const noexcept { return capturing_; }

  Backend::RecordingStats stats() const;

 private:
  // Captures `ops` from the stream into an instantiated graph (nothing runs). nullptr when the
  // capture failed: an op threw (a validation error, or a call that is illegal while capturing,
  // such as a synchronisation) or the capture was invalidated; the stream is left capturing nothing.
  GraphExecPtr capture(const std::function<void()>& ops, cudaStream_t stream);

  // Graphs by key, with their place in the use order (most recent first).
  static constexpr size_t kMaxGraphs = 64;
  struct GraphEntry {
    GraphExecPtr exec;
    std::list<std::vector<int64_t>>::iterator lru;
  };
  std::map<std::vector<int64_t>, GraphEntry> graphs_by_key_;
  std::list<std::vector<int64_t>> graph_lru_;
  std::list<std::vector<int64_t>> seen_keys_;        // keys run once, newest first (at most kMaxGraphs)
  std::map<std::vector<int64_t>, int> failed_keys_;  // failed captures per key
  Backend::RecordingStats stats_;
  bool capturing_ = false;
};

}  // namespace flashdllm::cuda_impl
