// NCCL communicators (comm.h): one per GPU, collectives on the rank's backend stream.
//
// NCCL does every transfer and reduction; our only device work is the strided placement of the
// gathered column blocks (cudaMemcpy2DAsync, a copy engine operation, no kernel). NVLink SHARP /
// multicast stays off: NCCL_NVLS_ENABLE=0 is put into the environment before the first
// ncclCommInitRank (overriding any other value, with a warning), and nothing calls cuMulticastCreate.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backend/backend.h"
#include "backend/comm.h"
#include "core/check.h"
#include "core/log.h"

namespace flashdllm {
namespace {

#define FDLLM_NCCL_CHECK(call)                                                                           \
  do {                                                                                                   \
    const ncclResult_t _r = (call);                                                                      \
    FDLLM_CHECK(_r == ncclSuccess, ErrorCode::kDevice, "{} failed: {} ({})", #call, ncclGetErrorString(_r), \
                ncclGetLastError(nullptr) ? ncclGetLastError(nullptr) : "");                             \
  } while (0)

#define FDLLM_CUDART_CHECK(call)                                                                    \
  do {                                                                                              \
    const cudaError_t _e = (call);                                                                  \
    FDLLM_CHECK(_e == cudaSuccess, ErrorCode::kDevice, "{} failed: {}", #call, cudaGetErrorString(_e)); \
  } while (0)

/// NVLS off, once per process, before any communicator exists. NCCL reads its switch from the
/// environment only, so it is written there (never read: `flashdllm env` warns when a user's value
/// is overridden, apps/cli/env_registry.cpp).
void disable_nvls() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1); });
}

ncclDataType_t nccl_dtype(DType t, const char* op) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kF64: return ncclFloat64;
    default: break;
  }
  FDLLM_FAIL(ErrorCode::kInvalidArgument, "{}: dtype {} has no NCCL type", op, dtype_name(t));
}

struct DeviceStream {
  int device = -1;
  cudaStream_t stream = nullptr;
};

DeviceStream device_stream_of(Backend& be) {
  FDLLM_CHECK_ARG(be.device() == DeviceKind::kCUDA && be.device_index() >= 0,
                  "NCCL communicator: backend '{}' is not a CUDA backend", be.name());
  return {be.device_index(), static_cast<cudaStream_t>(be.native_stream())};
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, DeviceStream ds, int rank, int world)
      : comm_(comm), ds_(ds), rank_(rank), world_(world) {}
  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (comm_ == nullptr) return;
    cudaSetDevice(ds_.device);
    ncclCommDestroy(comm_);
    if (token_ != nullptr) cudaFree(token_);
  }

  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return world_; }
  std::string name() const override {
    int v = 0;
    ncclGetVersion(&v);
    return fmt::format("nccl {}.{}.{} (rank {} of {}, cuda:{})", v / 10000, v / 100 % 100, v % 100, rank_, world_,
                       ds_.device);
  }

  void all_reduce_sum(Tensor t) override {
    check(t, "all_reduce_sum", "t");
    FDLLM_CHECK_ARG(t.dtype == DType::kF32 || t.dtype == DType::kBF16,
                    "all_reduce_sum: operand 't' must be F32 or BF16, got {}", t.describe());
    FDLLM_CUDART_CHECK(cudaSetDevice(ds_.device));
    FDLLM_NCCL_CHECK(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), nccl_dtype(t.dtype, "all_reduce_sum"),
                                   ncclSum, comm_, ds_.stream));
  }

  void all_gather_rows(Tensor local, Tensor out) override {
    check(local, "all_gather_rows", "local");
    check(out, "all_gather_rows", "out");
    FDLLM_CHECK_ARG(out.dtype == local.dtype && out.numel() == world_ * local.numel(),
                    "all_gather_rows: out must hold {} x {} elements of {}, got {}", world_, local.numel(),
                    dtype_name(local.dtype), out.describe());
    FDLLM_CUDART_CHECK(cudaSetDevice(ds_.device));
    FDLLM_NCCL_CHECK(ncclAllGather(local.data, out.data, static_cast<size_t>(local.numel()),
                                   nccl_dtype(local.dtype, "all_gather_rows"), comm_, ds_.stream));
  }

  void all_gather_columns(Tensor local, Tensor out, Tensor scratch) override {
    check(local, "all_gather_columns", "local");
    check(out, "all_gather_columns", "out");
    check(scratch, "all_gather_columns", "scratch");
    const int64_t R = local.rows(), C = local.row_size();
    FDLLM_CHECK_ARG(out.dtype == local.dtype && out.rows() == R && out.row_size() == world_ * C,
                    "all_gather_columns: out must be [{}, {} x {}], got {}", R, world_, C, out.describe());
    FDLLM_CHECK_ARG(scratch.dtype == local.dtype && scratch.numel() >= world_ * R * C,
                    "all_gather_columns: scratch must hold {} elements of {}, got {}", world_ * R * C,
                    dtype_name(local.dtype), scratch.describe());
    if (R == 0 || C == 0) return;
    FDLLM_CUDART_CHECK(cudaSetDevice(ds_.device));
    FDLLM_NCCL_CHECK(ncclAllGather(local.data, scratch.data, static_cast<size_t>(R * C),
                                   nccl_dtype(local.dtype, "all_gather_columns"), comm_, ds_.stream));
    const size_t es = dtype_size(local.dtype), row = static_cast<size_t>(C) * es;
    for (int r = 0; r < world_; ++r)
      FDLLM_CUDART_CHECK(cudaMemcpy2DAsync(static_cast<char*>(out.data) + static_cast<size_t>(r) * row,
                                           static_cast<size_t>(world_) * row,
                                           static_cast<const char*>(scratch.data) + static_cast<size_t>(r * R) * row,
                                           row, row, static_cast<size_t>(R), cudaMemcpyDeviceToDevice, ds_.stream));
  }

  void barrier() override {
    // An all-reduce of one int is NCCL's barrier; synchronising the stream waits for it.
    FDLLM_CUDART_CHECK(cudaSetDevice(ds_.device));
    if (!token_) FDLLM_CUDART_CHECK(cudaMalloc(&token_, sizeof(int)));
    FDLLM_NCCL_CHECK(ncclAllReduce(token_, token_, 1, ncclInt32, ncclSum, comm_, ds_.stream));
    FDLLM_CUDART_CHECK(cudaStreamSynchronize(ds_.stream));
  }

  /// ncclCommAbort (documented to unblock collectives pending on other threads); the communicator
  /// refuses every later call.
  void abort() noexcept override {
    std::lock_guard<std::mutex> lk(mu_);
    if (aborted_.exchange(true) || comm_ == nullptr) return;
    cudaSetDevice(ds_.device);
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  void check(const Tensor& t, const char* op, const char* operand) const {
    FDLLM_CHECK(!aborted_, ErrorCode::kInternal, "{}: NCCL communicator aborted: another rank failed", op);
    FDLLM_CHECK_ARG(t.device == DeviceKind::kCUDA, "{}: operand '{}' is not device memory: {}", op, operand,
                    t.describe());
  }

  ncclComm_t comm_ = nullptr;
  DeviceStream ds_;
  int rank_ = 0, world_ = 1;
  void* token_ = nullptr;  // barrier operand (one int)
  std::mutex mu_;          // abort vs destruction
  std::atomic<bool> aborted_{false};
};

}  // namespace

bool nccl_available() noexcept { return true; }

NcclUniqueId nccl_unique_id() {
  disable_nvls();
  ncclUniqueId raw;
  FDLLM_NCCL_CHECK(ncclGetUniqueId(&raw));
  NcclUniqueId id;
  static_assert(sizeof(raw) == sizeof(id.bytes), "ncclUniqueId is 128 bytes");
  std::memcpy(id.bytes.data(), &raw, sizeof(raw));
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(Backend& backend, const NcclUniqueId& id, int rank, int world) {
  FDLLM_CHECK_ARG(world >= 1 && rank >= 0 && rank < world, "NCCL communicator: rank {} outside [0, world = {})", rank,
                  world);
  const DeviceStream ds = device_stream_of(backend);
  disable_nvls();
  ncclUniqueId raw;
  std::memcpy(&raw, id.bytes.data(), sizeof(raw));
  FDLLM_CUDART_CHECK(cudaSetDevice(ds.device));
  ncclComm_t comm = nullptr;
  FDLLM_NCCL_CHECK(ncclCommInitRank(&comm, world, raw, rank));
  return std::make_unique<NcclCommunicator>(comm, ds, rank, world);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<Backend*>& backends) {
  const int world = static_cast<int>(backends.size());
  FDLLM_CHECK_ARG(world >= 1, "NCCL communicators: no backends");
  std::vector<DeviceStream> ds;
  for (Backend* be : backends) {
    FDLLM_CHECK_ARG(be != nullptr, "NCCL communicators: null backend");
    ds.push_back(device_stream_of(*be));
  }
  const NcclUniqueId id = nccl_unique_id();
  ncclUniqueId raw;
  std::memcpy(&raw, id.bytes.data(), sizeof(raw));
  std::vector<ncclComm_t> comms(static_cast<size_t>(world), nullptr);
  FDLLM_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < world; ++r) {
    FDLLM_CUDART_CHECK(cudaSetDevice(ds[static_cast<size_t>(r)].device));
    FDLLM_NCCL_CHECK(ncclCommInitRank(&comms[static_cast<size_t>(r)], world, raw, r));
  }
  FDLLM_NCCL_CHECK(ncclGroupEnd());
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(comms[static_cast<size_t>(r)], ds[static_cast<size_t>(r)], r, world));
  return out;
}

}  // namespace flashdllm
