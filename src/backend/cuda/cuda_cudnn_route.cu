// The cuDNN route: which tiles of a plan run in cuDNN's fused attention (backend_policy.h: cudnn_choice),
// their batch arrays and graph buckets.
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

// Decides which tiles of `host` run in cuDNN, builds (or finds) the graph for their shape bucket
// and uploads the batch arrays; nullopt = every tile on our kernel (mode off, no host copy, cuDNN
// unavailable or refusing the shape, nothing long enough, or a routed tile that is invalid: our
// plan kernel reports those).
std::optional<CudaBackend::CudnnRoute> CudaBackend::route_to_cudnn(const HostAttentionPlan& host, int64_t q_rows,
                                                                   int64_t kv_rows, int n_heads) {
  if (cudnn_.min_rows == 0 || host.n_tiles == 0 || host.head_dim <= 0 || !(host.scale > 0.f)) return std::nullopt;
  const int kv_heads = host.kv_heads > 0 ? host.kv_heads : n_heads;        // grouped-query attention when fewer
  if (kv_heads > n_heads || n_heads % kv_heads != 0) return std::nullopt;  // the calls' checks report it
  const int64_t HD = static_cast<int64_t>(n_heads) * host.head_dim, KD = static_cast<int64_t>(kv_heads) * host.head_dim;
  if (host.head_dim % 8 != 0 || host.head_dim > 256 || std::max(q_rows, kv_rows) * HD >= (int64_t{1} << 31))
    return std::nullopt;  // cuDNN's head dims; I32 element offsets (KD <= HD)
  const int32_t min_rows = cudnn_.min_rows;
  std::vector<size_t> routed;
  int32_t max_q = 0, max_kv = 0;
  for (size_t i = 0; i < host.n_tiles; ++i) {
    const AttentionTile& t = host.tiles[i];
    if (t.q_end - t.q_start < min_rows) continue;
    if (t.q_start < 0 || t.q_end > q_rows || t.k_start < 0 || t.k_start >= t.k_end || t.k_end > kv_rows)
      return std::nullopt;
    if (i < host.n_score_tiles && !score_tile_inside(host.score_tiles[i], t)) return std::nullopt;
    routed.push_back(i);
    max_q = std::max(max_q, t.q_end - t.q_start);
    max_kv = std::max(max_kv, t.k_end - t.k_start);
  }
  if (routed.empty() || !cudnn_ready()) return std::nullopt;
  CudnnRoute r;
  r.min_rows = min_rows;
  r.n_score_tiles = static_cast<int64_t>(host.n_score_tiles);
  // Shape buckets (powers of two) so that a few graphs serve every admission.
  r.shape.batch = pow2_at_least(static_cast<int32_t>(routed.size()));
  r.shape.max_q = pow2_at_least(std::max(max_q, 64));
  r.shape.max_kv = pow2_at_least(std::max(max_kv, 64));
  r.shape.n_heads = n_heads;
  r.shape.n_kv_heads = kv_heads;
  r.shape.head_dim = host.head_dim;
  r.shape.scale = host.scale;
  const std::array<int32_t, 3> bucket{r.shape.batch, r.shape.max_q, r.shape.max_kv};
  if (cudnn_refused_.count(bucket)) return std::nullopt;
  size_t workspace = 0;
  try {
    workspace = cudnn_sdpa_->prepare(r.shape);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported || cudnn_.required) throw;
    cudnn_refused_.insert(bucket);  // cuDNN refuses this bucket: our kernel runs its tiles
    cudnn_why_ = e.what();
    return std::nullopt;
  }
  const auto B = static_cast<size_t>(r.shape.batch), S = cudnn_stride(B);
  std::vector<int32_t>& h = cudnn_host_;
  h.assign(4 * S, 0);
  int32_t* seq_q = h.data();
  int32_t* seq_kv = seq_q + S;
  int32_t* q_off = seq_kv + S;
  int32_t* kv_off = q_off + S;
  for (size_t j = 0; j < B; ++j) {
    if (j < routed.size()) {
      const AttentionTile& t = host.tiles[routed[j]];
      seq_q[j] = t.q_end - t.q_start;
      seq_kv[j] = t.k_end - t.k_start;
      q_off[j] = static_cast<int32_t>(t.q_start * HD);
      kv_off[j] = static_cast<int32_t>(t.k_start * KD);
    } else {  // padding entries: no rows, no keys
      q_off[j] = q_off[j - 1] + seq_q[j - 1] * static_cast<int32_t>(HD);
      kv_off[j] = kv_off[j - 1] + seq_kv[j - 1] * static_cast<int32_t>(KD);
    }
  }
  q_off[B] = q_off[B - 1] + seq_q[B - 1] * static_cast<int32_t>(HD);
  kv_off[B] = kv_off[B - 1] + seq_kv[B - 1] * static_cast<int32_t>(KD);
  for (size_t i : routed)
    if (i < host.n_score_tiles) {
      const AttentionTile& s = host.score_tiles[i];
      h.insert(h.end(), {s.q_start, s.q_end, s.k_start, s.k_end});
      ++r.n_scored;
    }
  ensure_cudnn_buffers(h.size() * sizeof(int32_t), workspace);
  CUDA_CHECK(cudaMemcpyAsync(cudnn_buf_.get(), h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  return r;
}

// Creates the cuDNN instance on first use; false (and the reason kept) when there is none.
bool CudaBackend::cudnn_ready() {
  if (!cudnn_tried_) {
    cudnn_tried_ = true;
    cudnn_sdpa_ = kernels::CudnnSdpa::create(device_, &cudnn_why_);
  }
  FDLLM_CHECK(cudnn_sdpa_ != nullptr || !cudnn_.required, ErrorCode::kUnsupported,
              "FLASHDLLM_CUDNN_ATTENTION={}: cuDNN attention is unavailable: {}",
              cudnn_attention_name(options_.cudnn_attention), cudnn_why_);
  return cudnn_sdpa_ != nullptr;
}

// Grows the route's device arrays and cuDNN's workspace; a move drops the recorded graphs (they
// hold the old addresses).
void CudaBackend::ensure_cudnn_buffers(size_t buf_bytes, size_t workspace) {
  if (buf_bytes <= cudnn_buf_bytes_ && (workspace == 0 || workspace <= cudnn_ws_bytes_)) return;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  graphs_cache_.clear();
  if (buf_bytes > cudnn_buf_bytes_) {
    cudnn_buf_bytes_ = std::max(buf_bytes, 2 * cudnn_buf_bytes_);
    cudnn_buf_ = device_alloc(cudnn_buf_bytes_, "cuDNN attention batch arrays");
  }
  if (workspace > cudnn_ws_bytes_) {
    cudnn_ws_bytes_ = workspace;
    cudnn_ws_ = device_alloc(workspace, "cuDNN attention workspace");
  }
}

// The routed tiles of the standing plan through cuDNN, then the raw importance of their score
// tiles (a.importance set: attention_with_importance) in the separate importance kernel.
void CudaBackend::run_cudnn(const kernels::AttentionArgs& a) {
  const CudnnRoute& r = *route_;
  const size_t S = cudnn_stride(static_cast<size_t>(r.shape.batch));
  const auto* buf = static_cast<const int32_t*>(cudnn_buf_.get());
  const kernels::CudnnSdpaOperands o{a.q, a.k, a.v, a.out, buf, buf + S, buf + 2 * S, buf + 3 * S};
  cudnn_sdpa_->run(r.shape, o, cudnn_ws_.get(), stream_);
  ++routed_calls_;
  if (a.importance == nullptr || r.n_scored == 0) return;
  const kernels::ImportanceArgs ia{a.q,
                                   a.k,
                                   a.importance,
                                   a.q_rows,
                                   a.kv_rows,
                                   a.n_heads,
                                   a.head_dim,
                                   a.scale,
                                   a.importance_weight,
                                   /*probability_mass=*/false,
                                   a.kv_heads()};
  kernels::attention_importance_bf16(ia, buf + 4 * S, r.n_scored, flags(), stream_);
}

}  // namespace flashdllm::cuda_impl
