#include "core/tensor.h"

namespace flashdllm {

std::string Tensor::describe() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "] ";
  s += dtype_name(dtype);
  return s;
}

}  // namespace flashdllm
