// Tensor: a non-owning view (pointer + shape + dtype + device) over contiguous row-major memory.
// Buffer: an owning allocation made by a Backend (host memory for CPU, device memory for CUDA).
//
// Invariants: views are always contiguous (strides are implied by the shape); a view never
// outlives the Buffer it points into. Dimension 0 is "rows" for matrices ([rows, cols]).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "core/check.h"
#include "core/dtype.h"

namespace flashdllm {

enum class DeviceKind : uint8_t { kCPU, kCUDA };

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kF32;
  DeviceKind device = DeviceKind::kCPU;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* d, DType t, DeviceKind dev, std::initializer_list<int64_t> dims) : data(d), dtype(t), device(dev) {
    FDLLM_ASSERT(dims.size() <= kMaxDims);
    for (int64_t s : dims) shape[ndim++] = s;
  }

  int64_t numel() const noexcept {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return ndim == 0 ? 0 : n;
  }
  size_t nbytes() const noexcept { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool empty() const noexcept { return data == nullptr || numel() == 0; }
  int64_t rows() const noexcept { return ndim > 0 ? shape[0] : 0; }
  /// Elements per row (product of all dims but the first).
  int64_t row_size() const noexcept {
    int64_t n = 1;
    for (int i = 1; i < ndim; ++i) n *= shape[i];
    return n;
  }
  template <class T>
  T* ptr() const noexcept { return static_cast<T*>(data); }

  /// Rows [begin, end) along dim 0, sharing memory.
  Tensor slice_rows(int64_t begin, int64_t end) const {
    FDLLM_ASSERT_MSG(begin >= 0 && begin <= end && end <= rows(), "slice [{}, {}) of {} rows", begin, end, rows());
    Tensor t = *this;
    t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_size()) * dtype_size(dtype);
    t.shape[0] = end - begin;
    return t;
  }
  /// Same memory, new shape with the same number of elements.
  Tensor reshape(std::initializer_list<int64_t> dims) const {
    Tensor t(data, dtype, device, dims);
    FDLLM_ASSERT_MSG(t.numel() == numel(), "reshape changes element count {} -> {}", numel(), t.numel());
    return t;
  }
  /// "[a, b, c] BF16" for messages.
  std::string describe() const;
};

/// Owning allocation. Move-only; frees through the deleter given by its Backend.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* p, size_t bytes, DeviceKind dev, std::function<void(void*)> deleter)
      : ptr_(p), bytes_(bytes), device_(dev), deleter_(std::move(deleter)) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      device_ = o.device_;
      deleter_ = std::move(o.deleter_);
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() noexcept {
    if (ptr_ && deleter_) deleter_(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* data() const noexcept { return ptr_; }
  size_t bytes() const noexcept { return bytes_; }
  DeviceKind device() const noexcept { return device_; }

  /// A view of the whole buffer (or its first elements) with the given dtype and shape.
  Tensor view(DType t, std::initializer_list<int64_t> dims) const {
    Tensor v(ptr_, t, device_, dims);
    FDLLM_ASSERT_MSG(v.nbytes() <= bytes_, "view {} exceeds buffer of {} bytes", v.describe(), bytes_);
    return v;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  DeviceKind device_ = DeviceKind::kCPU;
  std::function<void(void*)> deleter_;
};

}  // namespace flashdllm
