// cuDNN SDPA over ragged attention tiles; see attention_cudnn.h.
#include "kernels/cuda/attention_cudnn.h"

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

#if defined(FLASHDLLM_HAVE_CUDNN)
#include <map>
#include <tuple>
#include <unordered_map>

#include <cudnn.h>
#include <cudnn_frontend.h>
#endif

namespace flashdllm::kernels {

#if defined(FLASHDLLM_HAVE_CUDNN)

namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the variant pack.
enum Uid : fe::graph::Tensor_attributes::uid_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kSeqQ,
  kSeqKv,
  kOffQ,
  kOffKv,
};

// cuDNN 9.x with ragged (THD) SDPA forward on Hopper.
constexpr size_t kMinCudnnVersion = 90500;

class CudnnSdpaImpl final : public CudnnSdpa {
 public:
  explicit CudnnSdpaImpl(cudnnHandle_t h) : handle_(h) {}
  ~CudnnSdpaImpl() override {
    graphs_.clear();
    cudnnDestroy(handle_);
  }

  size_t prepare(const CudnnSdpaShape& s) override { return entry(s).workspace; }

  void run(const CudnnSdpaShape& s, const CudnnSdpaOperands& o, void* workspace, cudaStream_t stream) override {
    Entry& e = entry(s);
    const cudnnStatus_t st = cudnnSetStream(handle_, stream);
    if (st != CUDNN_STATUS_SUCCESS)
      FDLLM_FAIL(ErrorCode::kDevice, "cudnn attention: cudnnSetStream failed: {}", cudnnGetErrorString(st));
    std::unordered_map<fe::graph::Tensor_attributes::uid_t, void*> pack = {
        {kQ, const_cast<void*>(o.q)},
        {kK, const_cast<void*>(o.k)},
        {kV, const_cast<void*>(o.v)},
        {kO, o.out},
        {kSeqQ, const_cast<int32_t*>(o.seq_q)},
        {kSeqKv, const_cast<int32_t*>(o.seq_kv)},
        {kOffQ, const_cast<int32_t*>(o.q_offsets)},
        {kOffKv, const_cast<int32_t*>(o.kv_offsets)},
    };
    fe::error_t err = e.graph->execute(handle_, pack, workspace);
    if (!err.is_good()) {
      (void)cudaGetLastError();
      FDLLM_FAIL(ErrorCode::kDevice, "cudnn attention: execute failed: {}", err.get_message());
    }
  }

  size_t graphs() const noexcept override { return graphs_.size(); }

 private:
  struct Entry {
    std::shared_ptr<fe::graph::Graph> graph;
    size_t workspace = 0;
  };

  static auto key(const CudnnSdpaShape& s) {
    return std::make_tuple(s.batch, s.max_q, s.max_kv, s.n_heads, s.n_kv_heads, s.head_dim, s.scale);
  }

  Entry& entry(const CudnnSdpaShape& s) {
    if (auto it = graphs_.find(key(s)); it != graphs_.end()) return it->second;
    const int32_t hk = s.n_kv_heads > 0 ? s.n_kv_heads : s.n_heads;
    if (s.batch < 1 || s.max_q < 1 || s.max_kv < 1 || s.n_heads < 1 || s.n_kv_heads < 0 || s.n_heads % hk != 0 ||
        s.head_dim < 8 || s.head_dim % 8 != 0 || s.head_dim > 256 || !(s.scale > 0.f))
      cuda::throw_invalid_argument("cudnn attention: bad shape (batch " + std::to_string(s.batch) + ", max_q " +
                                   std::to_string(s.max_q) + ", max_kv " + std::to_string(s.max_kv) + ", heads " +
                                   std::to_string(s.n_heads) + ", kv heads " + std::to_string(s.n_kv_heads) +
                                   ", head_dim " + std::to_string(s.head_dim) + ")");
    Entry e;
    e.graph = build(s);
    int64_t ws = 0;
    fe::error_t err = e.graph->get_workspace_size(ws);
    if (!err.is_good()) cuda::throw_unsupported("cudnn attention: workspace size: " + err.get_message());
    e.workspace = static_cast<size_t>(ws);
    return graphs_.emplace(key(s), std::move(e)).first->second;
  }

  std::shared_ptr<fe::graph::Graph> build(const CudnnSdpaShape& s) {
    const int64_t b = s.batch, h = s.n_heads, hk = s.n_kv_heads > 0 ? s.n_kv_heads : s.n_heads, d = s.head_dim,
                  sq = s.max_q, skv = s.max_kv;
    const int64_t hd = h * d;  // q / out row width
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto i32 = [&](const char* name, Uid uid, int64_t n) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({n, 1, 1, 1})
                           .set_stride({1, 1, 1, 1})
                           .set_data_type(fe::DataType_t::INT32));
    };
    auto off_q = i32("q_offsets", kOffQ, b + 1), off_kv = i32("kv_offsets", kOffKv, b + 1);
    auto seq_q = i32("seq_q", kSeqQ, b), seq_kv = i32("seq_kv", kSeqKv, b);
    // [b, heads, s, d] views of token-major rows (BSHD strides); the ragged offsets place each batch.
    // K and V have hk heads (grouped-query attention when hk < h: cuDNN's SDPA maps the groups).
    auto rows = [&](const char* name, Uid uid, int64_t heads, int64_t s_len,
                    const std::shared_ptr<fe::graph::Tensor_attributes>& off) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({b, heads, s_len, d})
                           .set_stride({s_len * heads * d, d, heads * d, 1})
                           .set_ragged_offset(off));
    };
    auto Q = rows("Q", kQ, h, sq, off_q), K = rows("K", kK, hk, skv, off_kv), V = rows("V", kV, hk, skv, off_kv);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("flashdllm_sdpa")
                    .set_generate_stats(false)
                    .set_attn_scale(s.scale)
                    .set_padding_mask(true)
                    .set_seq_len_q(seq_q)
                    .set_seq_len_kv(seq_kv);
    auto [O, stats] = g->sdpa(Q, K, V, opts);
    (void)stats;
    O->set_output(true).set_dim({b, h, sq, d}).set_stride({sq * hd, d, hd, 1}).set_uid(kO).set_ragged_offset(off_q);
    fe::error_t err = g->build(handle_, {fe::HeurMode_t::A});
    if (!err.is_good())
      cuda::throw_unsupported("cudnn attention: cuDNN cannot run ragged SDPA (batch " + std::to_string(b) + ", max_q " +
                              std::to_string(sq) + ", max_kv " + std::to_string(skv) + ", heads " + std::to_string(h) +
                              "/" + std::to_string(hk) + ", head_dim " + std::to_string(d) + "): " + err.get_message());
    return g;
  }

  cudnnHandle_t handle_;
  std::map<std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, float>, Entry> graphs_;
};

}  // namespace

std::unique_ptr<CudnnSdpa> CudnnSdpa::create(int device, std::string* why) {
  auto fail = [&](std::string reason) -> std::unique_ptr<CudnnSdpa> {
    if (why) *why = std::move(reason);
    return nullptr;
  };
  try {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return fail("no CUDA device " + std::to_string(device));
    }
    if (prop.major < 9)
      return fail("ragged cuDNN attention needs sm_90 or newer (this GPU is sm_" + std::to_string(prop.major) +
                  std::to_string(prop.minor) + ")");
    const size_t version = cudnnGetVersion();
    if (version < kMinCudnnVersion)
      return fail("libcudnn " + std::to_string(version) + " is older than " + std::to_string(kMinCudnnVersion));
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t st = cudnnCreate(&h);
    if (st != CUDNN_STATUS_SUCCESS) return fail(std::string("cudnnCreate: ") + cudnnGetErrorString(st));
    return std::make_unique<CudnnSdpaImpl>(h);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

#else  // built without cuDNN

std::unique_ptr<CudnnSdpa> CudnnSdpa::create(int /*device*/, std::string* why) {
  if (why) *why = "built without cuDNN (configure with the cuDNN headers and the cuDNN frontend present)";
  return nullptr;
}

#endif

}  // namespace flashdllm::kernels
