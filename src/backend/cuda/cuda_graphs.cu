// The graph cache (cuda_graph_cache.h) and CudaBackend::run_recorded, which keys it.
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

GraphCache::Ran GraphCache::run(const std::vector<int64_t>& key, const std::function<void()>& ops,
                                cudaStream_t stream) {
  if (auto it = graphs_by_key_.find(key); it != graphs_by_key_.end()) {
    graph_lru_.splice(graph_lru_.begin(), graph_lru_, it->second.lru);  // most recent first
    CUDA_CHECK(cudaGraphLaunch(it->second.exec.get(), stream));
    ++stats_.replays;
    return Ran::kReplayed;
  }
  auto seen = std::find(seen_keys_.begin(), seen_keys_.end(), key);
  const int failures = failed_keys_.count(key) ? failed_keys_[key] : 0;
  if (seen == seen_keys_.end() || failures >= 2) {  // first sighting (or never capturable): op by op
    if (seen == seen_keys_.end() && failures < 2) {
      seen_keys_.push_front(key);
      if (seen_keys_.size() > kMaxGraphs) seen_keys_.pop_back();
    }
    ++stats_.direct;
    ops();
    return Ran::kDirect;
  }
  seen_keys_.erase(seen);
  GraphExecPtr exec = capture(ops, stream);
  if (!exec) {  // the capture failed: nothing ran, so run the ops directly (raising their errors)
    ++stats_.failed;
    if (failed_keys_.size() > 4 * kMaxGraphs) failed_keys_.clear();
    ++failed_keys_[key];
    ++stats_.direct;
    ops();
    return Ran::kDirect;
  }
  if (graphs_by_key_.size() >= kMaxGraphs) {  // drop the least recently used graph
    graphs_by_key_.erase(graph_lru_.back());
    graph_lru_.pop_back();
  }
  graph_lru_.push_front(key);
  CUDA_CHECK(cudaGraphLaunch(exec.get(), stream));
  graphs_by_key_.emplace(key, GraphEntry{std::move(exec), graph_lru_.begin()});
  ++stats_.captures;
  return Ran::kCaptured;
}

Backend::RecordingStats GraphCache::stats() const {
  Backend::RecordingStats s = stats_;
  s.cached = static_cast<int64_t>(graphs_by_key_.size());
  return s;
}

GraphExecPtr GraphCache::capture(const std::function<void()>& ops, cudaStream_t stream) {
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  bool threw = false;
  capturing_ = true;
  try {
    ops();
  } catch (...) {
    threw = true;
  }
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  cudaError_t inst = cudaErrorUnknown;
  if (!threw && end == cudaSuccess && graph != nullptr) inst = cudaGraphInstantiate(&exec, graph, 0);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (threw || end != cudaSuccess || inst != cudaSuccess) {
    (void)cudaGetLastError();  // a capture error is not sticky; clear the last-error slot
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    return nullptr;
  }
  return GraphExecPtr(exec);
}

void GraphCache::clear() {
  graphs_by_key_.clear();
  graph_lru_.clear();
  seen_keys_.clear();
}

void CudaBackend::run_recorded(const std::vector<int64_t>& caller_key, const std::function<void()>& ops) {
  if (!graphs_) {
    graphs_cache_.count_direct();
    ops();
    return;
  }
  CUDA_CHECK(cudaSetDevice(device_));
  // A cuDNN route's graph is built for its shape bucket: sequences of the same caller key with
  // another bucket are another recording.
  std::vector<int64_t> key = caller_key;
  if (plan_) key.push_back(plan_->small_tiles ? -3 : -2);  // whether the loop launches the small-tile kernel
  if (plan_ && route_)
    key.insert(key.end(), {-1, route_->shape.batch, route_->shape.max_q, route_->shape.max_kv, route_->min_rows,
                           route_->n_scored});  // n_scored: the importance launch of run_cudnn
  if (graphs_cache_.run(key, ops, stream_) != GraphCache::Ran::kDirect) after_op("graph launch");
}

}  // namespace flashdllm::cuda_impl
