// CudaBackend: construction (options and policies resolved once), device memory, host copies through pinned
// staging, synchronisation and the device error flags.
#include "backend/cuda/cuda_backend.h"

namespace flashdllm::cuda_impl {

CudaBackend::CudaBackend(int device_index, const BackendOptions& options) : device_(device_index), options_(options) {
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
  int binary_version = 0, ptx_version = 0;
  const cudaError_t code = kernels::probe_device_code(&binary_version, &ptx_version);
  FDLLM_CHECK(code == cudaSuccess, ErrorCode::kUnsupported,
              "CUDA backend: this build has no code for {} (sm_{}{}): it was built for CUDA archs '{}' ({}); "
              "rebuild with -DFLASHDLLM_CUDA_ARCHS=native on this machine, {}{}, or portable",
              prop.name, prop.major, prop.minor, FLASHDLLM_CUDA_ARCHS_BUILT, cudaGetErrorName(code), prop.major,
              prop.minor);
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
  traits_.hopper_attention = kernels::flash_variant_runs_on(kernels::FlashVariant::kWgmma128, prop.major, prop.minor);
  check_forced_attention(prop.major, prop.minor);
  flash_ = flash_choice(options_.attention, traits_);
  cudnn_ = cudnn_choice(options_.cudnn_attention, options_.attention);
  graphs_ = cuda_graphs_enabled(options_);
  row_padding_ = row_padding_for(DeviceKind::kCUDA, options_.row_padding);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// A forced flash kernel must run on this device (and be in this build).
void CudaBackend::check_forced_attention(int cc_major, int cc_minor) const {
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

CudaBackend::~CudaBackend() {
  // Members are released in reverse order: queued work finishes (StreamDestroy synchronises)
  // before the work list, workspace and flag buffers are freed. The cuDNN handle goes first, while
  // the stream it was last given still exists.
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  graphs_cache_.clear();  // graphs hold cuDNN's kernels
  cudnn_sdpa_.reset();
}

Buffer CudaBackend::alloc(size_t bytes, const char* what) {
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

void CudaBackend::copy_from_host(Tensor dst, const void* src) {
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

void CudaBackend::copy_to_host(void* dst, Tensor src) {
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

void CudaBackend::fill_zero(Tensor t) {
  FDLLM_CHECK_ARG(t.device == DeviceKind::kCUDA, "fill_zero: {} is not device memory", t.describe());
  if (t.nbytes() == 0) return;
  CUDA_CHECK(cudaSetDevice(device_));
  drop_plan_if_written(t);
  CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), stream_));
  after_op("fill_zero");
}

void CudaBackend::synchronize() {
  CUDA_CHECK(cudaSetDevice(device_));
  sync_and_check("synchronize");
}

size_t CudaBackend::free_memory() const {
  CUDA_CHECK(cudaSetDevice(device_));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

void CudaBackend::upload_weight(Tensor dst, DType src_dtype, const void* src) {
  // Block-FP8 weights (F8E4M3) are kept as the checkpoint stores them, their block scales in F32.
  if (dst.dtype == DType::kF8E4M3 || dst.dtype == DType::kF32) {
    expect(dst, dst.dtype, "upload_weight", "dst");
    FDLLM_CHECK_ARG(
        src_dtype == dst.dtype || (dst.dtype == DType::kF32 && (src_dtype == DType::kF16 || src_dtype == DType::kBF16)),
        "upload_weight: {} takes {} data, got {}", dst.describe(),
        dst.dtype == DType::kF32 ? "F32, F16 or BF16" : "F8_E4M3", dtype_name(src_dtype));
    if (dst.numel() == 0) return;
    FDLLM_CHECK_ARG(src != nullptr, "upload_weight: null source for {}", dst.describe());
    CUDA_CHECK(cudaSetDevice(device_));
    if (src_dtype == dst.dtype) {
      CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    } else {  // F16 / BF16 scales (small): widened on the host, copied before the vector goes
      std::vector<float> wide(static_cast<size_t>(dst.numel()));
      convert_to_f32(src_dtype, src, wide.data(), wide.size());
      CUDA_CHECK(cudaMemcpyAsync(dst.data, wide.data(), dst.nbytes(), cudaMemcpyHostToDevice, stream_));
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    after_op("upload_weight");
    return;
  }
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

void CudaBackend::fill_normal(Tensor dst, uint64_t seed, uint64_t stream, float mean, float std,
                              const FillWindow& window) {
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
      kernels::fill_normal_window_f32(dst.ptr<float>(), rows, cols, window.offset, parent_cols, seed, stream, mean, std,
                                      stream_);
  } else {
    if (whole)
      kernels::fill_normal_bf16(bf16(dst), n, seed, stream, mean, std, stream_);
    else
      kernels::fill_normal_window_bf16(bf16(dst), rows, cols, window.offset, parent_cols, seed, stream, mean, std,
                                       stream_);
  }
  after_op(kOp);
}

// Synchronises the stream, then turns device-side input errors into Error(kInvalidArgument).
void CudaBackend::sync_and_check(const char* where) {
  CUDA_CHECK(cudaMemcpyAsync(host_flags_.get(), flags_.get(), sizeof(int), cudaMemcpyDeviceToHost, stream_));
  const cudaError_t err = cudaStreamSynchronize(stream_);
  staged_upload_.used = 0;  // every queued upload has been read
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    FDLLM_FAIL(ErrorCode::kDevice, "CUDA backend: device error surfaced at {}: {}: {}", where, cudaGetErrorName(err),
               cudaGetErrorString(err));
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

// Grows `s` to at least `bytes` (<= kStagingCap; 1 MiB, then doubling). Only while nothing is in
// flight from it: the old buffer is freed.
bool CudaBackend::grow_staging(HostStaging& s, size_t bytes) {
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

void* CudaBackend::stage_upload(size_t bytes) {
  if (!options_.pinned_staging || bytes == 0 || bytes > kStagingMax || graphs_cache_.capturing()) return nullptr;
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

void* CudaBackend::stage_download(size_t bytes) {
  if (!options_.pinned_staging || bytes > kStagingMax || graphs_cache_.capturing()) return nullptr;
  // Nothing is in flight from it: every download synchronises before it returns.
  return grow_staging(staged_download_, bytes) ? staged_download_.buf.get() : nullptr;
}

}  // namespace flashdllm::cuda_impl

namespace flashdllm {

std::unique_ptr<Backend> make_cuda_backend(int device_index, const BackendOptions& options) {
  validate_backend_options(options);
  return std::make_unique<cuda_impl::CudaBackend>(device_index, options);
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
