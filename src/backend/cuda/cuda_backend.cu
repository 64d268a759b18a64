// CUDA backend: bf16 weights and activations, fp32 accumulation; cuBLASLt GEMMs and the kernels
// of src/kernels/cuda. Every op follows validate -> dispatch -> launch:
//   validate  operand device / dtype / shape against backend.h, Error(kInvalidArgument) naming
//             the op and the operand;
//   dispatch  pick the kernel (e.g. flash variant or reference attention);
//   launch    enqueue on this backend's one stream; every launch is checked (CUDA_CHECK_LAUNCH).
// Nothing waits for the device except copy_to_host() and synchronize() (and every op under
// BackendOptions::sync kEveryOp, a debug mode that pins asynchronous faults to the op that caused them).
//
// Data-dependent input errors (token ids, rows, positions, attention tiles) are detected by the
// kernels into a device flag word and reported as Error(kInvalidArgument) at the next
// synchronising call (see kernels/cuda/kernel_errors.h).
//
// Options: BackendOptions (flashdllm/backend_options.h), given at construction; what they leave at
// their defaults is chosen by backend/backend_policy.h (attention kernel per tile, cuDNN route, QKV
// path, row padding, graphs). The FLASHDLLM_* variables that set them from the command line are
// listed by `flashdllm env` (apps/cli/env_registry.cpp); the library reads no environment.

// nvcc 13 cannot evaluate fmt 9's C++20 consteval format-string checks (core/check.h includes
// fmt): when compiled as C++20, this translation unit uses fmt's runtime-checked format strings
// instead (what fmt itself does in C++17). Argument types are still checked by the compiler.
#if defined(__CUDACC__) && __cplusplus >= 202002L
#ifndef FMT_CONSTEVAL
#define FMT_CONSTEVAL
#endif
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_policy.h"
#include "backend/cuda/gemm_picks.h"
#include "core/check.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_importance.h"
#include "kernels/cuda/attention_verify.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/gather.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kernel_errors.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/qkv_rope_fused.h"
#include "kernels/cuda/rope_store.h"
#include "kernels/cuda/select.h"
#include "kernels/cuda/swiglu.h"

namespace flashdllm {
namespace {

// ----------------------------------------------------------------------------- validation

void expect(const Tensor& t, DType dtype, const char* op, const char* operand) {
  FDLLM_CHECK_ARG(t.device == DeviceKind::kCUDA, "{}: operand '{}' ({}) is not in CUDA device memory", op, operand,
                  t.describe());
  FDLLM_CHECK_ARG(t.dtype == dtype, "{}: operand '{}' must be {}, got {}", op, operand, dtype_name(dtype),
                  t.describe());
  FDLLM_CHECK_ARG(t.data != nullptr || t.numel() == 0, "{}: operand '{}' ({}) has no data", op, operand,
                  t.describe());
}

void expect_matrix(const Tensor& t, int64_t rows, int64_t cols, const char* op, const char* operand) {
  FDLLM_CHECK_ARG(t.rows() == rows && t.row_size() == cols, "{}: operand '{}' must be [{}, {}], got {}", op, operand,
                  rows, cols, t.describe());
}

void expect_numel(const Tensor& t, int64_t n, const char* op, const char* operand) {
  FDLLM_CHECK_ARG(t.numel() == n, "{}: operand '{}' must have {} elements, got {}", op, operand, n, t.describe());
}

bool overlap(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

void expect_disjoint(const Tensor& out, const Tensor& in, const char* op, const char* out_name, const char* in_name) {
  FDLLM_CHECK_ARG(!overlap(out, in), "{}: operand '{}' must not overlap '{}'", op, out_name, in_name);
}

__nv_bfloat16* bf16(const Tensor& t) { return static_cast<__nv_bfloat16*>(t.data); }

// ----------------------------------------------------------------------------- policy -> kernels

// The kernel of a flash attention choice (backend_policy.h speaks AttentionKernel; kAuto and
// kReference never reach here).
constexpr kernels::FlashVariant flash_variant(AttentionKernel k) noexcept {
  switch (k) {
    case AttentionKernel::kM128N64: return kernels::FlashVariant::kM128N64;
    case AttentionKernel::kM128N128: return kernels::FlashVariant::kM128N128;
    case AttentionKernel::kWgmma: return kernels::FlashVariant::kWgmmaM128N64;
    case AttentionKernel::kWgmma128: return kernels::FlashVariant::kWgmmaM128N128;
    case AttentionKernel::kWgmma64: return kernels::FlashVariant::kWgmmaM64N128;
    case AttentionKernel::kAuto:
    case AttentionKernel::kReference:
    case AttentionKernel::kM64N64: break;
  }
  return kernels::FlashVariant::kM64N64;
}
constexpr kernels::FlashVariant kSmallTileVariant = flash_variant(kSmallTileKernel);

// The fused QKV kernel's tile of a forced path (kAuto: chosen by the token count).
kernels::QkvTile qkv_tile(QkvPath p) noexcept {
  switch (p) {
    case QkvPath::kFused128x128b: return kernels::QkvTile::k128x128b;
    case QkvPath::kFused128x256b: return kernels::QkvTile::k128x256b;
    case QkvPath::kAuto:
    case QkvPath::kFused:
    case QkvPath::kUnfused: break;
  }
  return kernels::QkvTile::kAuto;
}

bool qkv_forced_fused(QkvPath p) noexcept { return p != QkvPath::kAuto && p != QkvPath::kUnfused; }

// The smallest power of two >= n (n in [1, 2^30]); cuDNN graphs are built per power-of-two bucket.
int32_t pow2_at_least(int32_t n) {
  int32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ----------------------------------------------------------------------------- backend

struct CudaFree {
  void operator()(void* p) const noexcept {
    if (p) cudaFree(p);
  }
};
struct CudaFreeHost {
  void operator()(void* p) const noexcept {
    if (p) cudaFreeHost(p);
  }
};
struct StreamDestroy {
  void operator()(cudaStream_t s) const noexcept {
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
};
struct GraphExecDestroy {
  void operator()(cudaGraphExec_t g) const noexcept {
    if (g) cudaGraphExecDestroy(g);
  }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;
using GraphExecPtr = std::unique_ptr<CUgraphExec_st, GraphExecDestroy>;
using StreamPtr = std::unique_ptr<CUstream_st, StreamDestroy>;
using PinnedPtr = std::unique_ptr<void, CudaFreeHost>;

DevicePtr device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    FDLLM_FAIL(err == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kDevice,
               "cannot allocate {} bytes ({:.2f} GiB) of CUDA device memory for {} ({:.2f} GiB free): {}", bytes,
               static_cast<double>(bytes) / (1 << 30), what, static_cast<double>(free_b) / (1 << 30),
               cudaGetErrorString(err));
  }
  return DevicePtr(p);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device_index, const BackendOptions& options) : device_(device_index), options_(options) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      // No driver (or a stub one) reads "CUDA driver version is insufficient" / "no CUDA-capable
      // device": on a machine without a GPU say so first.
      const bool no_device = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver;
      FDLLM_FAIL(ErrorCode::kDevice, "CUDA backend: {} ({}: {}); use --device cpu",
                 no_device ? "no CUDA device found" : "no usable CUDA driver/device", cudaGetErrorName(err),
                 cudaGetErrorString(err));
    }
    FDLLM_CHECK(count > 0, ErrorCode::kDevice, "CUDA backend: no CUDA device found");
    FDLLM_CHECK(device_index >= 0 && device_index < count, ErrorCode::kDevice,
                "CUDA backend: device index {} outside [0, {})", device_index, count);
    CUDA_CHECK(cudaSetDevice(device_));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = fmt::format("cuda ({}, sm_{}{}, {} SMs)", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    FDLLM_CHECK(prop.major >= 8, ErrorCode::kUnsupported,
                "CUDA backend: {} has compute capability {}.{}; the bf16 kernels need 8.0 or newer", prop.name,
                prop.major, prop.minor);
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    stream_owner_.reset(stream);
    stream_ = stream;
    flags_ = device_alloc(sizeof(int), "kernel error flags");
    CUDA_CHECK(cudaMemsetAsync(flags_.get(), 0, sizeof(int), stream_));
    void* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, sizeof(int)));
    host_flags_.reset(pinned);
    *static_cast<int*>(host_flags_.get()) = 0;
    gemm_ = std::make_unique<kernels::GemmLt>(kernels::kGemmWorkspaceBytes, options_.gemm_tune, options_.gemm_buckets);
    if (gemm_picks_apply(options_.gemm_tune))
      gemm_->set_picks(resolve_gemm_picks(options_.gemm_picks, options_.gemm_picks_file,
                                          {prop.name, prop.multiProcessorCount, kernels::GemmLt::library_version(),
                                           kernels::kGemmWorkspaceBytes, options_.gemm_buckets}));
    traits_.cc_major = prop.major;
    traits_.cc_minor = prop.minor;
    traits_.sms = prop.multiProcessorCount;
    traits_.hopper_attention =
        kernels::flash_variant_runs_on(kernels::FlashVariant::kWgmmaM128N128, prop.major, prop.minor);
    traits_.fused_qkv = kernels::qkv_rope_fused_available();
    check_forced_attention(prop.major, prop.minor);
    flash_ = flash_choice(options_.attention, traits_);
    cudnn_ = cudnn_choice(options_.cudnn_attention, options_.attention);
    FDLLM_CHECK(!qkv_forced_fused(options_.qkv) || traits_.fused_qkv, ErrorCode::kUnsupported,
                "FLASHDLLM_QKV={}: the fused QKV kernel needs an sm_90 device and a build with it (CUTLASS "
                "and sm_90 among the CUDA archs; scripts/setup.sh fetches CUTLASS); device sm_{}{}",
                qkv_path_name(options_.qkv), prop.major, prop.minor);
    graphs_ = cuda_graphs_enabled(options_);
    row_padding_ = row_padding_for(DeviceKind::kCUDA, options_.row_padding);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // A forced flash kernel must run on this device (and be in this build).
  void check_forced_attention(int cc_major, int cc_minor) const {
    const AttentionKernel k = options_.attention;
    if (k == AttentionKernel::kAuto || k == AttentionKernel::kReference) return;
    FDLLM_CHECK(kernels::flash_variant_runs_on(flash_variant(k), cc_major, cc_minor), ErrorCode::kUnsupported,
                "FLASHDLLM_ATTENTION={}: this kernel {} (device sm_{}{})", attention_kernel_name(k),
                is_hopper_kernel(k) ? (kernels::flash_wgmma_built()
                                           ? "needs an sm_90 device"
                                           : "is not in this build (it needs CUTLASS and sm_90 among the CUDA archs; "
                                             "scripts/setup.sh fetches CUTLASS)")
                                    : "needs compute capability 8.0 or newer",
                cc_major, cc_minor);
  }

  ~CudaBackend() override {
    // Members are released in reverse order: queued work finishes (StreamDestroy synchronises)
    // before the work list, workspace and flag buffers are freed. The cuDNN handle goes first, while
    // the stream it was last given still exists.
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    drop_graphs();  // graphs hold cuDNN's kernels
    cudnn_sdpa_.reset();
  }

  DeviceKind device() const noexcept override { return DeviceKind::kCUDA; }
  std::string name() const override { return name_; }
  DType activation_dtype() const noexcept override { return DType::kBF16; }
  DType weight_dtype() const noexcept override { return DType::kBF16; }
  void* native_stream() const noexcept override { return stream_; }
  int device_index() const noexcept override { return device_; }

  // --------------------------------------------------------------------------- memory

  Buffer alloc(size_t bytes, const char* what) override {
    CUDA_CHECK(cudaSetDevice(device_));
    DevicePtr p = device_alloc(bytes > 0 ? bytes : 1, what);
    const int dev = device_;
    return Buffer(p.release(), bytes, DeviceKind::kCUDA, [dev](void* q) {
      int cur = -1;
      if (cudaGetDevice(&cur) == cudaSuccess && cur != dev) cudaSetDevice(dev);
      cudaFree(q);
      if (cur >= 0 && cur != dev) cudaSetDevice(cur);
    });
  }

  void copy_from_host(Tensor dst, const void* src) override {
    FDLLM_CHECK_ARG(dst.device == DeviceKind::kCUDA, "copy_from_host: destination {} is not device memory",
                    dst.describe());
    if (dst.nbytes() == 0) return;
    FDLLM_CHECK_ARG(src != nullptr && dst.data != nullptr, "copy_from_host: null pointer");
    CUDA_CHECK(cudaSetDevice(device_));
    drop_plan_if_written(dst);
    const size_t n = dst.nbytes();
    if (void* staged = stage_upload(n)) {  // pinned: an asynchronous DMA, no driver staging
      std::memcpy(staged, src, n);
      CUDA_CHECK(cudaMemcpyAsync(dst.data, staged, n, cudaMemcpyHostToDevice, stream_));
    } else {
      CUDA_CHECK(cudaMemcpyAsync(dst.data, src, n, cudaMemcpyHostToDevice, stream_));
    }
    after_op("copy_from_host");
  }

  void copy_to_host(void* dst, Tensor src) override {
    FDLLM_CHECK_ARG(src.device == DeviceKind::kCUDA, "copy_to_host: source {} is not device memory", src.describe());
    CUDA_CHECK(cudaSetDevice(device_));
    const size_t n = src.nbytes();
    void* staged = nullptr;
    if (n > 0) {
      FDLLM_CHECK_ARG(dst != nullptr && src.data != nullptr, "copy_to_host: null pointer");
      // Pinned: the copy and the error flags' copy queue together, then one synchronisation (a
      // pageable destination makes the first copy wait for the stream on its own).
      staged = stage_download(n);
      CUDA_CHECK(cudaMemcpyAsync(staged != nullptr ? staged : dst, src.data, n, cudaMemcpyDeviceToHost, stream_));
    }
    sync_and_check("copy_to_host");
    if (staged != nullptr) std::memcpy(dst, staged, n);
  }

  void fill_zero(Tensor t) override {
    FDLLM_CHECK_ARG(t.device == DeviceKind::kCUDA, "fill_zero: {} is not device memory", t.describe());
    if (t.nbytes() == 0) return;
    CUDA_CHECK(cudaSetDevice(device_));
    drop_plan_if_written(t);
    CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), stream_));
    after_op("fill_zero");
  }

  void synchronize() override {
    CUDA_CHECK(cudaSetDevice(device_));
    sync_and_check("synchronize");
  }

  size_t free_memory() const override {
    CUDA_CHECK(cudaSetDevice(device_));
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
  }

  void upload_weight(Tensor dst, DType src_dtype, const void* src) override {
    expect(dst, DType::kBF16, "upload_weight", "dst");
    FDLLM_CHECK_ARG(src_dtype == DType::kF32 || src_dtype == DType::kF16 || src_dtype == DType::kBF16,
                    "upload_weight: source dtype {} is not convertible to BF16 (supported: F32, F16, BF16)",
                    dtype_name(src_dtype));
    const int64_t n = dst.numel();
    if (n == 0) return;
    FDLLM_CHECK_ARG(src != nullptr, "upload_weight: null source for {}", dst.describe());
    CUDA_CHECK(cudaSetDevice(device_));
    if (src_dtype == DType::kBF16) {
      CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    } else {
      // Host -> staging (source dtype) -> convert kernel -> dst, in chunks; stream order keeps
      // the staging buffer from being overwritten before the previous chunk was converted.
      const size_t esize = dtype_size(src_dtype);
      if (!staging_) staging_ = device_alloc(kStagingBytes, "weight upload staging");
      const int64_t chunk = static_cast<int64_t>(kStagingBytes / esize);
      for (int64_t off = 0; off < n; off += chunk) {
        const int64_t cnt = std::min(chunk, n - off);
        CUDA_CHECK(cudaMemcpyAsync(staging_.get(), static_cast<const char*>(src) + static_cast<size_t>(off) * esize,
                                   static_cast<size_t>(cnt) * esize, cudaMemcpyHostToDevice, stream_));
        kernels::convert_to_bf16(src_dtype, staging_.get(), bf16(dst) + off, cnt, stream_);
      }
    }
    after_op("upload_weight");
  }

  void fill_normal(Tensor dst, uint64_t seed, uint64_t stream, float mean, float std,
                   const FillWindow& window = {}) override {
    static constexpr const char* kOp = "fill_normal";
    FDLLM_CHECK_ARG(dst.dtype == DType::kBF16 || dst.dtype == DType::kF32,
                    "fill_normal: operand 'dst' must be BF16 or F32, got {}", dst.describe());
    expect(dst, dst.dtype, kOp, "dst");
    FDLLM_CHECK_ARG(std::isfinite(mean) && std::isfinite(std) && std >= 0.0f,
                    "fill_normal: mean {} and std {} must be finite, std >= 0", mean, std);
    const int64_t parent_cols = fill_parent_cols(dst, window);
    const int64_t n = dst.numel();
    if (n == 0) return;
    CUDA_CHECK(cudaSetDevice(device_));
    const int64_t rows = dst.rows(), cols = dst.row_size();
    const bool whole = window.offset == 0 && parent_cols == cols;
    if (dst.dtype == DType::kF32) {
      if (whole)
        kernels::fill_normal_f32(dst.ptr<float>(), n, seed, stream, mean, std, stream_);
      else
        kernels::fill_normal_window_f32(dst.ptr<float>(), rows, cols, window.offset, parent_cols, seed, stream, mean,
                                        std, stream_);
    } else {
      if (whole)
        kernels::fill_normal_bf16(bf16(dst), n, seed, stream, mean, std, stream_);
      else
        kernels::fill_normal_window_bf16(bf16(dst), rows, cols, window.offset, parent_cols, seed, stream, mean, std,
                                         stream_);
    }
    after_op(kOp);
  }

  // --------------------------------------------------------------------------- recorded sequences

  void run_recorded(const std::vector<int64_t>& caller_key, const std::function<void()>& ops) override {
    if (!graphs_) {
      ++rec_stats_.direct;
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
    if (auto it = graphs_by_key_.find(key); it != graphs_by_key_.end()) {
      graph_lru_.splice(graph_lru_.begin(), graph_lru_, it->second.lru);  // most recent first
      CUDA_CHECK(cudaGraphLaunch(it->second.exec.get(), stream_));
      ++rec_stats_.replays;
      after_op("graph launch");
      return;
    }
    auto seen = std::find(seen_keys_.begin(), seen_keys_.end(), key);
    const int failures = failed_keys_.count(key) ? failed_keys_[key] : 0;
    if (seen == seen_keys_.end() || failures >= 2) {  // first sighting (or never capturable): op by op
      if (seen == seen_keys_.end() && failures < 2) {
        seen_keys_.push_front(key);
        if (seen_keys_.size() > kMaxGraphs) seen_keys_.pop_back();
      }
      ++rec_stats_.direct;
      ops();
      return;
    }
    seen_keys_.erase(seen);
    GraphExecPtr exec = capture(ops);
    if (!exec) {  // the capture failed: nothing ran, so run the ops directly (raising their errors)
      ++rec_stats_.failed;
      if (failed_keys_.size() > 4 * kMaxGraphs) failed_keys_.clear();
      ++failed_keys_[key];
      ++rec_stats_.direct;
      ops();
      return;
    }
    if (graphs_by_key_.size() >= kMaxGraphs) {  // drop the least recently used graph
      graphs_by_key_.erase(graph_lru_.back());
      graph_lru_.pop_back();
    }
    graph_lru_.push_front(key);
    CUDA_CHECK(cudaGraphLaunch(exec.get(), stream_));
    graphs_by_key_.emplace(key, GraphEntry{std::move(exec), graph_lru_.begin()});
    ++rec_stats_.captures;
    after_op("graph launch");
  }

  int64_t routed_attention_calls() const override { return routed_calls_; }

  RowPadding row_padding() const override { return row_padding_; }

  RecordingStats recording_stats() const override {
    RecordingStats s = rec_stats_;
    s.cached = static_cast<int64_t>(graphs_by_key_.size());
    return s;
  }

  // --------------------------------------------------------------------------- model ops

  void embedding(Tensor table, Tensor ids, Tensor out) override {
    static constexpr const char* kOp = "embedding";
    expect(table, DType::kBF16, kOp, "table");
    expect(ids, DType::kI32, kOp, "ids");
    expect(out, DType::kBF16, kOp, "out");
    const int64_t T = ids.numel(), V = table.rows(), D = table.row_size();
    expect_matrix(out, T, D, kOp, "out");
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::gather_rows(table.data, V, D * 2, ids.ptr<int32_t>(), T, out.data, flags(), kernels::kErrEmbeddingId,
                         stream_);
    after_op(kOp);
  }

  void rmsnorm(Tensor x, Tensor w, float eps, Tensor out) override {
    static constexpr const char* kOp = "rmsnorm";
    expect(x, DType::kBF16, kOp, "x");
    expect(w, DType::kBF16, kOp, "w");
    expect(out, DType::kBF16, kOp, "out");
    const int64_t T = x.rows(), D = x.row_size();
    expect_numel(w, D, kOp, "w");
    expect_matrix(out, T, D, kOp, "out");
    FDLLM_CHECK_ARG(out.data == x.data || !overlap(out, x), "rmsnorm: 'out' must alias 'x' exactly or not overlap it");
    FDLLM_CHECK_ARG(std::isfinite(eps) && eps >= 0.f, "rmsnorm: eps {} must be finite and >= 0", eps);
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::rmsnorm_bf16(bf16(x), bf16(w), T, D, eps, bf16(out), stream_);
    after_op(kOp);
  }

  void matmul(Tensor x, Tensor w, Tensor out, bool accumulate) override {
    static constexpr const char* kOp = "matmul";
    expect(x, DType::kBF16, kOp, "x");
    expect(w, DType::kBF16, kOp, "w");
    FDLLM_CHECK_ARG(out.dtype == DType::kBF16 || out.dtype == DType::kF32,
                    "matmul: operand 'out' must be BF16 or F32, got {}", out.describe());
    expect(out, out.dtype, kOp, "out");
    const int64_t T = x.rows(), K = x.row_size(), N = w.rows();
    FDLLM_CHECK_ARG(w.row_size() == K, "matmul: x is {} but w is {} (inner dimensions differ)", x.describe(),
                    w.describe());
    expect_matrix(out, T, N, kOp, "out");
    expect_disjoint(out, x, kOp, "out", "x");
    expect_disjoint(out, w, kOp, "out", "w");
    if (T == 0) return;
    FDLLM_CHECK_ARG(N > 0 && K > 0, "matmul: empty weight {}", w.describe());
    CUDA_CHECK(cudaSetDevice(device_));
    gemm_->matmul(bf16(x), bf16(w), out.data,
                  out.dtype == DType::kF32 ? kernels::GemmOut::kF32 : kernels::GemmOut::kBF16, T, N, K, accumulate,
                  stream_);
    after_op(kOp);
  }

  void qkv_rope_store(Tensor xn, Tensor wqkv, Tensor positions, Tensor rows, const RopeTable& rope, int n_heads,
                      Tensor q_out, Tensor k_store, Tensor v_store, Tensor scratch) override {
    static constexpr const char* kOp = "qkv_rope_store";
    expect(xn, DType::kBF16, kOp, "xn");
    expect(wqkv, DType::kBF16, kOp, "wqkv");
    expect(positions, DType::kI32, kOp, "positions");
    expect(rows, DType::kI32, kOp, "rows");
    expect(rope.cos, DType::kF32, kOp, "rope.cos");
    expect(rope.sin, DType::kF32, kOp, "rope.sin");
    expect(q_out, DType::kBF16, kOp, "q_out");
    expect(k_store, DType::kBF16, kOp, "k_store");
    expect(v_store, DType::kBF16, kOp, "v_store");
    expect(scratch, DType::kBF16, kOp, "scratch");
    const int64_t T = xn.rows(), D = xn.row_size();
    FDLLM_CHECK_ARG(n_heads > 0 && wqkv.rows() % 3 == 0 && (wqkv.rows() / 3) % n_heads == 0,
                    "qkv_rope_store: wqkv {} is not [3·n_heads·head_dim, d_model] for n_heads {}", wqkv.describe(),
                    n_heads);
    FDLLM_CHECK_ARG(wqkv.row_size() == D, "qkv_rope_store: xn is {} but wqkv is {} (inner dimensions differ)",
                    xn.describe(), wqkv.describe());
    const int64_t HD = wqkv.rows() / 3, Dh = HD / n_heads;
    FDLLM_CHECK_ARG(Dh % 2 == 0, "qkv_rope_store: head_dim {} must be even", Dh);
    expect_numel(positions, T, kOp, "positions");
    expect_numel(rows, T, kOp, "rows");
    expect_matrix(q_out, T, HD, kOp, "q_out");
    FDLLM_CHECK_ARG(k_store.row_size() == HD && v_store.row_size() == HD && k_store.rows() == v_store.rows(),
                    "qkv_rope_store: K/V stores must both be [N, {}], got {} and {}", HD, k_store.describe(),
                    v_store.describe());
    FDLLM_CHECK_ARG(rope.cos.row_size() * 2 == Dh && rope.sin.row_size() * 2 == Dh &&
                        rope.cos.rows() == rope.sin.rows(),
                    "qkv_rope_store: RoPE tables must be [max_positions, {}], got cos {} and sin {}", Dh / 2,
                    rope.cos.describe(), rope.sin.describe());
    FDLLM_CHECK_ARG(scratch.numel() >= T * 3 * HD, "qkv_rope_store: scratch {} holds fewer than {}·{} elements",
                    scratch.describe(), T, 3 * HD);
    if (T == 0) return;
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::FusedQkvArgs f;
    f.xn = bf16(xn);
    f.wqkv = bf16(wqkv);
    f.positions = positions.ptr<int32_t>();
    f.rows = rows.ptr<int32_t>();
    f.cos = rope.cos.ptr<float>();
    f.sin = rope.sin.ptr<float>();
    f.q_out = bf16(q_out);
    f.k_store = bf16(k_store);
    f.v_store = bf16(v_store);
    f.tokens = T;
    f.d_model = D;
    f.n_heads = n_heads;
    f.head_dim = static_cast<int>(Dh);
    f.max_positions = rope.cos.rows();
    f.store_rows = k_store.rows();
    f.error_flags = flags();
    const bool supported = kernels::qkv_rope_fused_supported(f);
    FDLLM_CHECK(!qkv_forced_fused(options_.qkv) || supported, ErrorCode::kUnsupported,
                "qkv_rope_store: FLASHDLLM_QKV=fused needs head_dim 64 or 128, d_model a multiple of 8 and 16-byte "
                "aligned operands (got head_dim {}, d_model {}); unset it to use the unfused path",
                Dh, D);
    if (use_fused_qkv(options_.qkv, traits_, supported, T)) {
      kernels::QkvConfig config;
      config.tile = qkv_tile(options_.qkv);
      kernels::qkv_rope_store_fused_bf16(f, stream_, config);
      after_op(kOp);
      return;
    }
    Tensor qkv(scratch.data, DType::kBF16, DeviceKind::kCUDA, {T, 3 * HD});
    for (const Tensor* t : {&xn, &wqkv, &q_out, &k_store, &v_store})
      FDLLM_CHECK_ARG(!overlap(qkv, *t), "qkv_rope_store: 'scratch' overlaps another operand ({})", t->describe());
    gemm_->matmul(bf16(xn), bf16(wqkv), qkv.data, kernels::GemmOut::kBF16, T, 3 * HD, D, false, stream_);
    kernels::RopeStoreArgs a;
    a.qkv = bf16(qkv);
    a.positions = positions.ptr<int32_t>();
    a.rows = rows.ptr<int32_t>();
    a.cos = rope.cos.ptr<float>();
    a.sin = rope.sin.ptr<float>();
    a.q_out = bf16(q_out);
    a.k_store = bf16(k_store);
    a.v_store = bf16(v_store);
    a.tokens = T;
    a.n_heads = n_heads;
    a.head_dim = static_cast<int>(Dh);
    a.max_positions = rope.cos.rows();
    a.store_rows = k_store.rows();
    a.error_flags = flags();
    kernels::rope_store_bf16(a, stream_);
    after_op(kOp);
  }

  void attention(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                 Tensor out) override {
    run_attention("attention", q, k_store, v_store, table, n_heads, scale, out, Tensor{}, 0.f, nullptr);
  }

  void attention_with_importance(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                                 Tensor out, Tensor score_table, float weight, Tensor scores) override {
    static constexpr const char* kOp = "attention_with_importance";
    check_score_table_args(table, score_table, kOp);
    const int64_t HD = q.row_size();
    const bool fused = score_table.numel() > 0 && !reference_attention() && n_heads > 0 && HD % n_heads == 0 &&
                       kernels::flash_supports_head_dim(static_cast<int>(HD / n_heads));
    if (!fused) {  // the two ops (reference kernel, other head dims, or nothing to score)
      Backend::attention_with_importance(q, k_store, v_store, table, n_heads, scale, out, score_table, weight, scores);
      return;
    }
    expect(scores, DType::kF32, kOp, "scores");
    expect_numel(scores, k_store.rows(), kOp, "scores");
    FDLLM_CHECK_ARG(std::isfinite(weight), "{}: weight {} must be finite", kOp, weight);
    for (const Tensor* t : {&q, &k_store, &v_store, &table, &score_table, &out})
      FDLLM_CHECK_ARG(!overlap(scores, *t), "{}: 'scores' overlaps another operand ({})", kOp, t->describe());
    run_attention(kOp, q, k_store, v_store, table, n_heads, scale, out, score_table, weight, scores.ptr<float>());
  }

  void plan_attention(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads,
                      const HostAttentionPlan& host = {}) override {
    check_plan_args(table, 4, q_rows, kv_rows, n_heads, "plan_attention");
    check_host_plan(table, host, "plan_attention");
    expect(table, DType::kI32, "plan_attention", "table");
    reset_plan();
    const int64_t n_tiles = table.numel() / 4;
    if (reference_attention() || n_tiles == 0 || q_rows == 0) return;  // nothing reuses a plan
    CUDA_CHECK(cudaSetDevice(device_));
    PlanKey key = attention_key(table, q_rows, kv_rows, n_heads);
    std::optional<CudnnRoute> route = route_to_cudnn(host, q_rows, kv_rows, n_heads);
    if (route) key.skip_min_rows = route->min_rows;
    if (key.split_rows > 0 && host.n_tiles > 0) {  // the host copy says whether the small-tile list has work
      const int32_t below = key.small_below();
      key.small_tiles = std::any_of(host.tiles, host.tiles + host.n_tiles, [&](const AttentionTile& t) {
        return t.q_end - t.q_start > 0 && t.q_end - t.q_start < below;
      });
    }
    make_plan(key);
    plan_ = key;
    route_ = route;
    after_op("plan_attention");
  }

  void plan_attention_verify(Tensor table, int64_t q_rows, int64_t n_keys) override {
    check_plan_args(table, 5, q_rows, n_keys, 1, "plan_attention_verify");
    expect(table, DType::kI32, "plan_attention_verify", "table");
    reset_plan();
    if (reference_attention() || table.numel() == 0 || q_rows == 0) return;
    CUDA_CHECK(cudaSetDevice(device_));
    const PlanKey key = verify_key(table, q_rows, n_keys);
    make_plan(key);
    plan_ = key;
    after_op("plan_attention_verify");
  }

  bool reference_attention() const noexcept { return options_.attention == AttentionKernel::kReference; }

  // attention() and, with `importance` set, the fused raw-importance variant of score_table's rows
  // (flash path only).
  void run_attention(const char* kOp, Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                     Tensor out, Tensor score_table, float weight, float* importance) {
    expect(q, DType::kBF16, kOp, "q");
    expect(k_store, DType::kBF16, kOp, "k_store");
    expect(v_store, DType::kBF16, kOp, "v_store");
    expect(table, DType::kI32, kOp, "table");
    expect(out, DType::kBF16, kOp, "out");
    const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows();
    FDLLM_CHECK_ARG(n_heads > 0 && HD % n_heads == 0, "attention: {} columns of q not divisible by n_heads {}", HD,
                    n_heads);
    expect_matrix(out, Tq, HD, kOp, "out");
    expect_matrix(k_store, N, HD, kOp, "k_store");
    expect_matrix(v_store, N, HD, kOp, "v_store");
    FDLLM_CHECK_ARG(table.numel() % 4 == 0, "attention: table must be [n_tiles, 4], got {}", table.describe());
    FDLLM_CHECK_ARG(std::isfinite(scale) && scale > 0.f, "attention: scale {} must be finite and > 0", scale);
    for (const Tensor* t : {&q, &k_store, &v_store})
      FDLLM_CHECK_ARG(!overlap(out, *t), "attention: 'out' overlaps an input ({})", t->describe());
    const int64_t n_tiles = table.numel() / 4;
    if (n_tiles == 0 || Tq == 0) return;
    kernels::AttentionArgs a;
    a.q = bf16(q);
    a.k = bf16(k_store);
    a.v = bf16(v_store);
    a.out = bf16(out);
    a.q_rows = Tq;
    a.kv_rows = N;
    a.n_heads = n_heads;
    a.head_dim = static_cast<int>(HD / n_heads);
    a.scale = scale;
    a.importance = importance;
    a.importance_weight = weight;
    a.table = table.ptr<int32_t>();
    if (importance != nullptr) {
      a.score_tiles = score_table.ptr<int32_t>();
      a.n_score_tiles = static_cast<int32_t>(score_table.numel() / 4);
    }
    a.error_flags = flags();
    CUDA_CHECK(cudaSetDevice(device_));
    if (reference_attention()) {
      kernels::attention_reference(a, table.ptr<int32_t>(), n_tiles, flags(), stream_);
      after_op(kOp);
      return;
    }
    FDLLM_CHECK(kernels::flash_supports_head_dim(a.head_dim), ErrorCode::kUnsupported,
                "attention: head_dim {} has no flash kernel (supported: 128); FLASHDLLM_ATTENTION=reference runs the "
                "slow reference kernel for head_dim multiples of 32 up to 256",
                a.head_dim);
    const PlanKey key = attention_key(table, Tq, N, n_heads);
    // The standing plan serves this call when it was made for this table; its routed tiles run in
    // cuDNN when the call matches the route (heads, head_dim, scale, score tiles), else the call
    // plans again with every tile on our kernel.
    WorkLists lists;
    bool cudnn_call = false;
    if (plan_ && plan_->same_table(key)) {
      cudnn_call = plan_->skip_min_rows > 0 && route_ && route_->shape.n_heads == n_heads &&
                   route_->shape.head_dim == a.head_dim && route_->shape.scale == scale &&
                   (importance == nullptr || score_table.numel() / 4 == route_->n_score_tiles);
      lists = plan_->skip_min_rows > 0 && !cudnn_call ? make_plan(key) : planned_work(*plan_);
    } else {
      lists = make_plan(key);
    }
    kernels::attention_flash(a, key.main, work_.get(), work_count(), lists.main, stream_);
    if (lists.small > 0)
      kernels::attention_flash(a, kSmallTileVariant, work_.get() + lists.main, work_count() + 1, lists.small, stream_);
    if (cudnn_call) run_cudnn(a);
    after_op(kOp);
  }

  void attention_verify(Tensor q, Tensor k_store, Tensor v_store, Tensor key_rows, Tensor k_tile, Tensor v_tile,
                        Tensor table, int n_heads, float scale, Tensor out) override {
    static constexpr const char* kOp = "attention_verify";
    expect(q, DType::kBF16, kOp, "q");
    expect(k_store, DType::kBF16, kOp, "k_store");
    expect(v_store, DType::kBF16, kOp, "v_store");
    expect(key_rows, DType::kI32, kOp, "key_rows");
    expect(k_tile, DType::kBF16, kOp, "k_tile");
    expect(v_tile, DType::kBF16, kOp, "v_tile");
    expect(table, DType::kI32, kOp, "table");
    expect(out, DType::kBF16, kOp, "out");
    const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows();
    FDLLM_CHECK_ARG(n_heads > 0 && HD % n_heads == 0, "attention_verify: {} columns of q not divisible by n_heads {}",
                    HD, n_heads);
    expect_matrix(k_store, N, HD, kOp, "k_store");
    expect_matrix(v_store, N, HD, kOp, "v_store");
    expect_matrix(k_tile, Tq, HD, kOp, "k_tile");
    expect_matrix(v_tile, Tq, HD, kOp, "v_tile");
    expect_matrix(out, Tq, HD, kOp, "out");
    FDLLM_CHECK_ARG(table.numel() % 5 == 0, "attention_verify: table must be [n_tiles, 5] (VerifyTile rows), got {}",
                    table.describe());
    FDLLM_CHECK_ARG(std::isfinite(scale) && scale > 0.f, "attention_verify: scale {} must be finite and > 0", scale);
    for (const Tensor* t : {&q, &k_store, &v_store, &k_tile, &v_tile, &key_rows, &table})
      FDLLM_CHECK_ARG(!overlap(out, *t), "attention_verify: 'out' overlaps an input ({})", t->describe());
    const int64_t n_tiles = table.numel() / 5;
    if (n_tiles == 0 || Tq == 0) return;
    kernels::VerifyAttentionArgs a;
    a.q = bf16(q);
    a.k_store = bf16(k_store);
    a.v_store = bf16(v_store);
    a.key_rows = key_rows.ptr<int32_t>();
    a.k_tile = bf16(k_tile);
    a.v_tile = bf16(v_tile);
    a.out = bf16(out);
    a.q_rows = Tq;
    a.kv_rows = N;
    a.n_keys = key_rows.numel();
    a.n_heads = n_heads;
    a.head_dim = static_cast<int>(HD / n_heads);
    a.scale = scale;
    CUDA_CHECK(cudaSetDevice(device_));
    if (reference_attention() || !kernels::flash_supports_head_dim(a.head_dim)) {
      kernels::attention_verify_bf16(a, table.ptr<int32_t>(), n_tiles, flags(), stream_);  // scalar kernel
      after_op(kOp);
      return;
    }
    // Tensor cores: the flash kernel's verify mode over work items of verify_block_m rows per tile.
    kernels::AttentionArgs fa;
    fa.q = a.q;
    fa.k = a.k_store;
    fa.v = a.v_store;
    fa.out = a.out;
    fa.q_rows = Tq;
    fa.kv_rows = N;
    fa.n_heads = n_heads;
    fa.head_dim = a.head_dim;
    fa.scale = scale;
    kernels::VerifyKeys vk;
    vk.table = table.ptr<int32_t>();
    vk.key_rows = a.key_rows;
    vk.k_tile = a.k_tile;
    vk.v_tile = a.v_tile;
    vk.error_flags = flags();
    const int64_t capacity = planned_work(verify_key(table, Tq, a.n_keys)).main;
    // About one work item per tile (tiles of <= 32 rows), more where tiles are longer.
    const int64_t items = std::max<int64_t>(table.rows(), (Tq + 31) / 32);
    kernels::attention_verify_flash(fa, vk, work_.get(), work_count(), capacity, stream_,
                                    kernels::verify_cta_for(items * n_heads));
    after_op(kOp);
  }

  void attention_importance(Tensor q, Tensor k_store, Tensor table, int n_heads, float scale, bool probability_mass,
                            float weight, Tensor scores) override {
    static constexpr const char* kOp = "attention_importance";
    expect(q, DType::kBF16, kOp, "q");
    expect(k_store, DType::kBF16, kOp, "k_store");
    expect(table, DType::kI32, kOp, "table");
    expect(scores, DType::kF32, kOp, "scores");
    const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows();
    FDLLM_CHECK_ARG(n_heads > 0 && HD % n_heads == 0, "attention_importance: {} columns of q not divisible by n_heads {}",
                    HD, n_heads);
    expect_matrix(k_store, N, HD, kOp, "k_store");
    expect_numel(scores, N, kOp, "scores");
    FDLLM_CHECK_ARG(table.numel() % 4 == 0, "attention_importance: table must be [n_tiles, 4], got {}",
                    table.describe());
    FDLLM_CHECK_ARG(std::isfinite(weight), "attention_importance: weight {} must be finite", weight);
    FDLLM_CHECK_ARG(!probability_mass || (std::isfinite(scale) && scale > 0.f),
                    "attention_importance: scale {} must be finite and > 0 for the probability-mass variant", scale);
    for (const Tensor* t : {&q, &k_store, &table})
      FDLLM_CHECK_ARG(!overlap(scores, *t), "attention_importance: 'scores' overlaps an input ({})", t->describe());
    const int64_t n_tiles = table.numel() / 4;
    if (n_tiles == 0) return;
    kernels::ImportanceArgs a;
    a.q = bf16(q);
    a.k = bf16(k_store);
    a.scores = scores.ptr<float>();
    a.q_rows = Tq;
    a.kv_rows = N;
    a.n_heads = n_heads;
    a.head_dim = static_cast<int>(HD / n_heads);
    a.scale = scale;
    a.weight = weight;
    a.probability_mass = probability_mass;
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::attention_importance_bf16(a, table.ptr<int32_t>(), n_tiles, flags(), stream_);
    after_op(kOp);
  }

  void swiglu(Tensor gate_up, Tensor out) override {
    static constexpr const char* kOp = "swiglu";
    expect(gate_up, DType::kBF16, kOp, "gate_up");
    expect(out, DType::kBF16, kOp, "out");
    FDLLM_CHECK_ARG(gate_up.row_size() % 2 == 0, "swiglu: gate_up width {} is odd", gate_up.row_size());
    const int64_t T = gate_up.rows(), F = gate_up.row_size() / 2;
    expect_matrix(out, T, F, kOp, "out");
    expect_disjoint(out, gate_up, kOp, "out", "gate_up");
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::swiglu_bf16(bf16(gate_up), T, F, bf16(out), stream_);
    after_op(kOp);
  }

  void gather_rows(Tensor x, Tensor rows, Tensor out) override {
    static constexpr const char* kOp = "gather_rows";
    expect(x, x.dtype, kOp, "x");
    expect(rows, DType::kI32, kOp, "rows");
    expect(out, x.dtype, kOp, "out");
    const int64_t R = rows.numel(), D = x.row_size();
    expect_matrix(out, R, D, kOp, "out");
    expect_disjoint(out, x, kOp, "out", "x");
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::gather_rows(x.data, x.rows(), D * static_cast<int64_t>(dtype_size(x.dtype)), rows.ptr<int32_t>(), R,
                         out.data, flags(), kernels::kErrGatherRow, stream_);
    after_op(kOp);
  }

  void gather_columns(Tensor x, Tensor cols, Tensor out) override {
    static constexpr const char* kOp = "gather_columns";
    expect(x, DType::kF32, kOp, "x");
    expect(cols, DType::kI32, kOp, "cols");
    expect(out, DType::kF32, kOp, "out");
    const int64_t R = x.rows();
    FDLLM_CHECK_ARG(cols.numel() == R && out.numel() == R, "{}: x {} needs cols and out of {} rows, got {} and {}", kOp,
                    x.describe(), R, cols.describe(), out.describe());
    expect_disjoint(out, x, kOp, "out", "x");
    expect_disjoint(out, cols, kOp, "out", "cols");
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::gather_columns_f32(x.ptr<float>(), R, x.row_size(), cols.ptr<int32_t>(), out.ptr<float>(), stream_);
    after_op(kOp);
  }

  // --------------------------------------------------------------------------- denoiser ops

  void cfg_combine(Tensor cond, Tensor uncond, float scale, Tensor out) override {
    static constexpr const char* kOp = "cfg_combine";
    expect(cond, DType::kF32, kOp, "cond");
    expect(uncond, DType::kF32, kOp, "uncond");
    expect(out, DType::kF32, kOp, "out");
    FDLLM_CHECK_ARG(cond.numel() == uncond.numel() && cond.numel() == out.numel(),
                    "cfg_combine: cond {}, uncond {}, out {} differ in size", cond.describe(), uncond.describe(),
                    out.describe());
    FDLLM_CHECK_ARG((out.data == cond.data || !overlap(out, cond)) && (out.data == uncond.data || !overlap(out, uncond)),
                    "cfg_combine: 'out' must alias an input exactly or not overlap it");
    CUDA_CHECK(cudaSetDevice(device_));
    kernels::cfg_combine_f32(cond.ptr<float>(), uncond.ptr<float>(), scale, cond.numel(), out.ptr<float>(), stream_);
    after_op(kOp);
  }

  void select_tokens(Tensor logits, Tensor row_keys, const SelectParams& p, Tensor x0, Tensor conf) override {
    static constexpr const char* kOp = "select_tokens";
    expect(logits, DType::kF32, kOp, "logits");
    expect(row_keys, DType::kI32, kOp, "row_keys");
    expect(x0, DType::kI32, kOp, "x0");
    expect(conf, DType::kF64, kOp, "conf");
    const int64_t R = logits.rows(), V = logits.row_size();
    expect_numel(row_keys, R, kOp, "row_keys");
    expect_numel(x0, R, kOp, "x0");
    expect_numel(conf, R, kOp, "conf");
    FDLLM_CHECK_ARG(p.temperature >= 0.0 && std::isfinite(p.temperature),
                    "select_tokens: temperature {} must be finite and >= 0", p.temperature);
    if (R == 0) return;
    FDLLM_CHECK_ARG(V > 0 && V < (int64_t{1} << 31), "select_tokens: vocabulary size {} outside [1, 2^31)", V);
    kernels::SelectArgs a;
    a.logits = logits.ptr<float>();
    a.row_keys = row_keys.ptr<int32_t>();
    a.x0 = x0.ptr<int32_t>();
    a.conf = conf.ptr<double>();
    a.rows = R;
    a.vocab = V;
    a.temperature = p.temperature;
    a.seed = p.seed;
    a.step = p.step;
    a.suppress_token = p.suppress_token;
    a.exclude_token = p.exclude_token;
    a.conf_suppress_a = p.conf_suppress_a;
    a.conf_suppress_b = p.conf_suppress_b;
    a.confidence_f64 = p.confidence_f64;
    CUDA_CHECK(cudaSetDevice(device_));
    ensure_select_scratch(R, kernels::select_chunks(V));
    a.partials = static_cast<kernels::SelectPartial*>(select_partials_.get());
    a.arrivals = static_cast<uint32_t*>(select_arrivals_.get());
    kernels::select_tokens_f32(a, stream_);
    after_op(kOp);
  }

 private:
  static constexpr size_t kStagingBytes = size_t{64} << 20;

  int* flags() const noexcept { return static_cast<int*>(flags_.get()); }
  int32_t* work_count() const noexcept { return static_cast<int32_t*>(work_count_.get()); }

  // Synchronises the stream, then turns device-side input errors into Error(kInvalidArgument).
  void sync_and_check(const char* where) {
    CUDA_CHECK(cudaMemcpyAsync(host_flags_.get(), flags_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
    const cudaError_t err = cudaStreamSynchronize(stream_);
    staged_upload_.used = 0;  // every queued upload has been read
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      FDLLM_FAIL(ErrorCode::kDevice, "CUDA backend: device error surfaced at {}: {}: {}", where,
                 cudaGetErrorName(err), cudaGetErrorString(err));
    }
    const int f = *static_cast<volatile int*>(host_flags_.get());
    if (f != 0) {
      CUDA_CHECK(cudaMemsetAsync(flags_.get(), 0, sizeof(int), stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      *static_cast<int*>(host_flags_.get()) = 0;
      FDLLM_FAIL(ErrorCode::kInvalidArgument, "CUDA backend: invalid input detected on the device (reported at {}): {}",
                 where, kernels::describe_kernel_errors(f));
    }
  }

  void after_op(const char* op) {
    if (options_.sync == SyncMode::kEveryOp) sync_and_check(op);
  }

  // Pinned host staging of small copies (BackendOptions::pinned_staging false: none). An upload is copied into
  // staged_upload_ at `used` and DMA'd from there; its bytes are reused only after a stream
  // synchronisation (sync_and_check) has seen the copy complete. A download lands in
  // staged_download_ and is copied out after the synchronisation. Copies over kStagingMax (weights)
  // and copies while a graph is being captured (the graph would keep the staging address) stay
  // pageable, as does everything when pinned memory cannot be had. Returns nullptr for those.
  static constexpr size_t kStagingMax = size_t{4} << 20, kStagingCap = 4 * kStagingMax;
  struct HostStaging {
    PinnedPtr buf;
    size_t capacity = 0, used = 0, wanted = 0;
    bool failed = false;  // cudaMallocHost refused: pageable from then on
  };
  // Grows `s` to at least `bytes` (<= kStagingCap; 1 MiB, then doubling). Only while nothing is in
  // flight from it: the old buffer is freed.
  static bool grow_staging(HostStaging& s, size_t bytes) {
    if (s.capacity >= bytes) return true;
    if (s.failed || bytes > kStagingCap) return false;
    size_t cap = std::max<size_t>(s.capacity, size_t{1} << 20);
    while (cap < bytes) cap *= 2;
    void* p = nullptr;
    if (cudaMallocHost(&p, cap) != cudaSuccess) {
      (void)cudaGetLastError();
      s.failed = true;
      return false;
    }
    s.buf.reset(p);
    s.capacity = cap;
    return true;
  }
  void* stage_upload(size_t bytes) {
    if (!options_.pinned_staging || bytes == 0 || bytes > kStagingMax || capturing_) return nullptr;
    HostStaging& s = staged_upload_;
    // Between two synchronisations the uploads outgrew the buffer: grow it now that it is free.
    if (s.used == 0 && s.wanted > s.capacity) grow_staging(s, std::min(s.wanted, kStagingCap));
    const size_t at = s.used == 0 ? 0 : (s.used + 255) / 256 * 256;
    if (at + bytes > s.capacity) {
      s.wanted = std::max(s.wanted, at + bytes);
      if (s.used > 0 || !grow_staging(s, bytes)) return nullptr;
    }
    s.used = at + bytes;
    return static_cast<char*>(s.buf.get()) + at;
  }
  void* stage_download(size_t bytes) {
    if (!options_.pinned_staging || bytes > kStagingMax || capturing_) return nullptr;
    // Nothing is in flight from it: every download synchronises before it returns.
    return grow_staging(staged_download_, bytes) ? staged_download_.buf.get() : nullptr;
  }

  // Captures `ops` from the stream into an instantiated graph (nothing runs). nullptr when the
  // capture failed: an op threw (a validation error, or a call that is illegal while capturing,
  // such as a synchronisation) or the capture was invalidated; the stream is left capturing nothing.
  GraphExecPtr capture(const std::function<void()>& ops) {
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    bool threw = false;
    capturing_ = true;
    try {
      ops();
    } catch (...) {
      threw = true;
    }
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
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

  // Graphs hold the device addresses of their launches: when the attention work list moves, every
  // graph that reads it is stale.
  void drop_graphs() {
    graphs_by_key_.clear();
    graph_lru_.clear();
    seen_keys_.clear();
  }

  // What an attention work list was made for: the table (4 ints per AttentionTile, 5 per
  // VerifyTile), query rows, key rows (store rows or gathered keys) and rows per work item.
  // skip_min_rows > 0: tiles of at least that many query rows are left out (the cuDNN route's).
  struct PlanKey {
    Tensor table;
    int64_t tile_ints = 0, q_rows = 0, kv_rows = 0;
    int block_m = 0;
    kernels::FlashVariant main = kernels::FlashVariant::kM64N64;  // the main list's kernel (attention tables)
    int32_t skip_min_rows = 0;
    int32_t split_rows = 0;  // > 0: tiles of fewer rows in a second list of kSmallTileVariant (block_m 64)
    // With split_rows: false when plan_attention's host copy of the table showed no such tile (a
    // Flash-Cache main pass of 128-row windows), so the small list and its launch are left out.
    bool small_tiles = true;
    int64_t n_tiles() const noexcept { return table.numel() / tile_ints; }
    // With split_rows: the tiles of fewer rows than this run in the small-tile list (the others in
    // the main list or, from skip_min_rows rows on, in cuDNN).
    int32_t small_below() const noexcept {
      return skip_min_rows > 0 ? std::min(skip_min_rows, split_rows) : split_rows;
    }
    bool same_table(const PlanKey& o) const noexcept {
      return table.data == o.table.data && table.numel() == o.table.numel() && tile_ints == o.tile_ints &&
             q_rows == o.q_rows && kv_rows == o.kv_rows && block_m == o.block_m && main == o.main &&
             split_rows == o.split_rows;
    }
    bool operator==(const PlanKey& o) const noexcept {
      return same_table(o) && skip_min_rows == o.skip_min_rows && small_tiles == o.small_tiles;
    }
  };

  // The plan key of an attention call over `table` (4-int AttentionTile rows).
  PlanKey attention_key(Tensor table, int64_t q_rows, int64_t kv_rows, int n_heads) const {
    const bool forced = options_.attention != AttentionKernel::kAuto;
    const kernels::FlashVariant main =
        flash_variant(forced ? flash_.main : small_call_kernel(flash_.main, q_rows, n_heads, traits_.sms));
    PlanKey key{table, 4, q_rows, kv_rows, kernels::flash_block_m(main), main};
    key.split_rows = flash_.split_rows;
    return key;
  }

  // The plan key of a verify attention call over `table` (5-int VerifyTile rows): work items of the
  // verify mode's CTA rows (every VerifyCta the engine picks plans alike).
  static PlanKey verify_key(Tensor table, int64_t q_rows, int64_t n_keys) {
    return PlanKey{table, 5, q_rows, n_keys, kernels::verify_block_m(kernels::VerifyCta{})};
  }

  // The capacities of a plan's work lists (bounds from the key alone, so that a recorded loop's
  // launches keep their grids): the main list at work_[0, main) with its count at work_count()[0];
  // with split_rows, the small tiles' list at work_[main, main + small), count at work_count()[1]
  // (none when the key says no tile is small: small_tiles, which the recorded loop's key carries).
  // Split bounds: a small tile (< split_rows rows) is at most ceil((split_rows - 1) / 64) items of
  // 64 rows and at least one row; a main tile has r >= split_rows > 64 rows, and ceil(r / block_m)
  // <= r / 64 for those when block_m is 128, so the main list needs at most q_rows / 64 items (the
  // tiles' query ranges are disjoint): its grid stays small when every tile is small. (With block_m
  // 64, wgmma64, a 65-row tile is two items: the general bound holds.)
  struct WorkLists {
    int64_t main = 0, small = 0;
  };
  static WorkLists work_lists(const PlanKey& key) {
    WorkLists w{kernels::attention_work_capacity(key.q_rows, key.n_tiles(), key.block_m), 0};
    if (key.split_rows > 0) {
      const int small_m = kernels::flash_block_m(kSmallTileVariant);
      if (key.small_tiles)
        w.small = std::min<int64_t>(key.q_rows, key.n_tiles() * ((key.split_rows - 1 + small_m - 1) / small_m));
      if (key.split_rows > small_m && key.block_m == 2 * small_m) w.main = std::min(w.main, key.q_rows / small_m);
    }
    return w;
  }

  // Makes the work lists of `key` (kernels on the stream: no host wait).
  WorkLists make_plan(const PlanKey& key) {
    const int64_t n_tiles = key.n_tiles();
    const WorkLists lists = work_lists(key);
    reset_plan();
    ensure_attention_work(lists.main + lists.small);
    if (key.tile_ints == 4) {
      kernels::attention_plan(key.table.ptr<int32_t>(), n_tiles, key.q_rows, key.kv_rows, key.block_m, work_.get(),
                              work_count(), lists.main, flags(), stream_, key.skip_min_rows, key.split_rows);
      if (lists.small > 0) {
        kernels::attention_plan(key.table.ptr<int32_t>(), n_tiles, key.q_rows, key.kv_rows,
                                kernels::flash_block_m(kSmallTileVariant), work_.get() + lists.main, work_count() + 1,
                                lists.small, flags(), stream_, key.small_below());
      }
    } else {
      kernels::attention_plan_verify(key.table.ptr<int32_t>(), n_tiles, key.q_rows, key.kv_rows, key.block_m,
                                     work_.get(), work_count(), lists.main, flags(), stream_);
    }
    return lists;
  }

  // The work lists for `key`: plan_attention's when it was made for exactly this call, else planned
  // here (which drops the standing plan: the lists it lived in are overwritten).
  WorkLists planned_work(const PlanKey& key) {
    if (plan_ && *plan_ == key) return work_lists(key);
    return make_plan(key);
  }

  void drop_plan_if_written(const Tensor& dst) {
    if (plan_ && overlap(dst, plan_->table)) reset_plan();
  }

  // Grows the attention work list; only reallocates when a larger table than ever before arrives.
  // The counts exist from the first plan on, also when its lists have no capacity (every tile routed
  // to cuDNN, no small tile): the plan kernel writes them either way.
  void ensure_attention_work(int64_t capacity) {
    if (!work_count_) work_count_ = device_alloc(2 * sizeof(int32_t), "attention work counts");
    if (capacity <= work_capacity_) return;
    const int64_t cap = std::max<int64_t>(capacity, 2 * work_capacity_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old list may still be read by queued kernels
    drop_graphs();                               // and graphs launch kernels that read it
    work_ = std::unique_ptr<kernels::AttentionWorkItem, CudaFree>(static_cast<kernels::AttentionWorkItem*>(
        device_alloc(static_cast<size_t>(cap) * sizeof(kernels::AttentionWorkItem), "attention work list").release()));
    work_capacity_ = cap;
  }

  // select_tokens' scratch (kernels::SelectArgs): a partial per (row, chunk) and an arrival counter
  // per row, zeroed here once and left zeroed by every selection. Selections run outside recorded
  // loops, so growing it drops no graph; queued selections may still use the old arrays.
  void ensure_select_scratch(int64_t rows, int64_t chunks) {
    if (rows <= select_rows_ && rows * chunks <= select_partials_n_) return;
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    // Each capacity is recorded only once its array exists (an allocation may throw).
    if (rows > select_rows_) {
      const int64_t n = std::max(rows, 2 * select_rows_);
      select_arrivals_.reset();
      select_rows_ = 0;
      select_arrivals_ = device_alloc(static_cast<size_t>(n) * sizeof(uint32_t), "selection arrivals");
      CUDA_CHECK(cudaMemsetAsync(select_arrivals_.get(), 0, static_cast<size_t>(n) * sizeof(uint32_t), stream_));
      select_rows_ = n;
    }
    if (rows * chunks > select_partials_n_) {
      const int64_t n = std::max(rows * chunks, 2 * select_partials_n_);
      select_partials_.reset();
      select_partials_n_ = 0;
      select_partials_ = device_alloc(static_cast<size_t>(n) * sizeof(kernels::SelectPartial), "selection partials");
      select_partials_n_ = n;
    }
  }

  // ------------------------------------------------------------------------- cuDNN route

  // The tiles of the standing plan that run in cuDNN: those of >= min_rows query rows, packed as
  // one ragged SDPA batch. cudnn_buf_ holds four I32 arrays of cudnn_stride(B) entries each (16-byte
  // aligned, as cuDNN assumes): seq_q [B], seq_kv [B], q offsets [B + 1], kv offsets [B + 1]; then the
  // routed tiles' score tiles, 4 ints each.
  static size_t cudnn_stride(size_t B) { return (B + 1 + 3) / 4 * 4; }

  struct CudnnRoute {
    kernels::CudnnSdpaShape shape;
    int32_t min_rows = 0;
    int64_t n_scored = 0;       // their score tiles
    int64_t n_score_tiles = 0;  // the score tiles of the whole plan (HostAttentionPlan::score_tiles)
  };

  void reset_plan() {
    plan_.reset();
    route_.reset();
  }

  // Decides which tiles of `host` run in cuDNN, builds (or finds) the graph for their shape bucket
  // and uploads the batch arrays; nullopt = every tile on our kernel (mode off, no host copy, cuDNN
  // unavailable or refusing the shape, nothing long enough, or a routed tile that is invalid: our
  // plan kernel reports those).
  std::optional<CudnnRoute> route_to_cudnn(const HostAttentionPlan& host, int64_t q_rows, int64_t kv_rows,
                                           int n_heads) {
    if (cudnn_.min_rows == 0 || host.n_tiles == 0 || host.head_dim <= 0 || !(host.scale > 0.f)) return std::nullopt;
    const int64_t HD = static_cast<int64_t>(n_heads) * host.head_dim;
    if (host.head_dim % 8 != 0 || host.head_dim > 256 || std::max(q_rows, kv_rows) * HD >= (int64_t{1} << 31))
      return std::nullopt;  // cuDNN's head dims; I32 element offsets
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
        kv_off[j] = static_cast<int32_t>(t.k_start * HD);
      } else {  // padding entries: no rows, no keys
        q_off[j] = q_off[j - 1] + seq_q[j - 1] * static_cast<int32_t>(HD);
        kv_off[j] = kv_off[j - 1] + seq_kv[j - 1] * static_cast<int32_t>(HD);
      }
    }
    q_off[B] = q_off[B - 1] + seq_q[B - 1] * static_cast<int32_t>(HD);
    kv_off[B] = kv_off[B - 1] + seq_kv[B - 1] * static_cast<int32_t>(HD);
    for (size_t i : routed)
      if (i < host.n_score_tiles) {
        const AttentionTile& s = host.score_tiles[i];
        h.insert(h.end(), {s.q_start, s.q_end, s.k_start, s.k_end});
        ++r.n_scored;
      }
    ensure_cudnn_buffers(h.size() * sizeof(int32_t), workspace);
    CUDA_CHECK(
        cudaMemcpyAsync(cudnn_buf_.get(), h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    return r;
  }

  // Creates the cuDNN instance on first use; false (and the reason kept) when there is none.
  bool cudnn_ready() {
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
  void ensure_cudnn_buffers(size_t buf_bytes, size_t workspace) {
    if (buf_bytes <= cudnn_buf_bytes_ && (workspace == 0 || workspace <= cudnn_ws_bytes_)) return;
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    drop_graphs();
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
  void run_cudnn(const kernels::AttentionArgs& a) {
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
                                     /*probability_mass=*/false};
    kernels::attention_importance_bf16(ia, buf + 4 * S, r.n_scored, flags(), stream_);
  }

  int device_ = 0;
  BackendOptions options_;
  DeviceTraits traits_;  // what the policies know of this device
  std::string name_;
  DevicePtr flags_;
  PinnedPtr host_flags_;
  HostStaging staged_upload_, staged_download_;  // stage_upload / stage_download
  bool capturing_ = false;
  DevicePtr staging_;
  std::unique_ptr<kernels::GemmLt> gemm_;
  std::unique_ptr<kernels::AttentionWorkItem, CudaFree> work_;
  DevicePtr work_count_;
  int64_t work_capacity_ = 0;
  std::optional<PlanKey> plan_;  // the standing plan_attention / plan_attention_verify plan, if any
  std::optional<CudnnRoute> route_;  // its tiles that run in cuDNN (plan_attention only)
  CudnnChoice cudnn_;                // cudnn_choice(options_)
  std::unique_ptr<kernels::CudnnSdpa> cudnn_sdpa_;  // created on the first route (null: unavailable)
  bool cudnn_tried_ = false;
  // Why there is no cuDNN path (or the last refused bucket's reason); the (batch, max_q, max_kv)
  // buckets cuDNN refused.
  std::string cudnn_why_;
  std::set<std::array<int32_t, 3>> cudnn_refused_;
  int64_t routed_calls_ = 0;
  std::vector<int32_t> cudnn_host_;
  DevicePtr cudnn_buf_, cudnn_ws_;
  DevicePtr select_partials_, select_arrivals_;  // ensure_select_scratch
  int64_t select_partials_n_ = 0, select_rows_ = 0;
  size_t cudnn_buf_bytes_ = 0, cudnn_ws_bytes_ = 0;
  FlashChoice flash_;  // flash_choice(options_.attention, traits_)
  // run_recorded's graphs: by key, with their place in the use order (most recent first).
  static constexpr size_t kMaxGraphs = 64;
  struct GraphEntry {
    GraphExecPtr exec;
    std::list<std::vector<int64_t>>::iterator lru;
  };
  bool graphs_ = true;
  RowPadding row_padding_;  // Backend::row_padding: row_padding_for(options_.row_padding)
  std::map<std::vector<int64_t>, GraphEntry> graphs_by_key_;
  std::list<std::vector<int64_t>> graph_lru_;
  std::list<std::vector<int64_t>> seen_keys_;        // keys run once, newest first (at most kMaxGraphs)
  std::map<std::vector<int64_t>, int> failed_keys_;  // failed captures per key
  RecordingStats rec_stats_;
  // Declared last, destroyed first: StreamDestroy waits for queued work before anything above is freed.
  StreamPtr stream_owner_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_index, const BackendOptions& options) {
  validate_backend_options(options);
  return std::make_unique<CudaBackend>(device_index, options);
}

bool cuda_available() noexcept { return cuda_device_count() > 0; }

int cuda_device_count() noexcept {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace flashdllm
