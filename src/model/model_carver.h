// The byte layout helper of the model's buffers (weights, RoPE tables, K/V stores, forward
// workspaces): aligned tensors carved out of one Buffer. Private to src/model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/tensor.h"

namespace flashdllm::model_detail {

inline constexpr size_t kAlign = 256;
inline size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Carves consecutive, aligned tensors out of one Buffer (two passes: measure, then bind).
class Carver {
 public:
  explicit Carver(DeviceKind dev) : dev_(dev) {}
  Tensor take(DType t, std::initializer_list<int64_t> dims) {
    Tensor v(nullptr, t, dev_, dims);
    v.data = reinterpret_cast<void*>(offset_);  // offset until bind()
    offset_ += align_up(v.nbytes());
    return v;
  }
  size_t bytes() const noexcept { return offset_; }
  /// Moves the end back to `offset` (tensors taken after it overlap those taken before the seek).
  void seek(size_t offset) noexcept { offset_ = offset; }
  static void bind(Tensor& t, const Buffer& b) {
    t.data = static_cast<char*>(b.data()) + reinterpret_cast<uintptr_t>(t.data);
  }

 private:
  DeviceKind dev_;
  size_t offset_ = 0;
};

}  // namespace flashdllm::model_detail
