// Fuzz target: a .safetensors file. On success the invariants of safetensors.h must hold: the
// tensors tile the data region exactly (no overlap, no hole, inside the file), and each tensor's
// bytes equal dtype size x numel.
#include <algorithm>
#include <vector>

#include "flashdllm/status.h"
#include "fuzz/fuzz_common.h"
#include "io/safetensors.h"

using namespace flashdllm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& path = fuzz::as_file("fuzz.safetensors", data, size);
  try {
    const auto f = SafetensorsFile::open(path);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    std::vector<std::pair<const uint8_t*, size_t>> spans;
    for (const auto& [name, t] : f->tensors()) {
      fuzz::require(!name.empty() && name == t.name);
      fuzz::require(t.nbytes == static_cast<size_t>(t.numel()) * dtype_size(t.dtype));
      if (t.nbytes > 0) spans.emplace_back(static_cast<const uint8_t*>(t.data), t.nbytes);
    }
    std::sort(spans.begin(), spans.end());
    size_t covered = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      if (i > 0) fuzz::require(spans[i - 1].first + spans[i - 1].second == spans[i].first);
      covered += spans[i].second;
      // Read the first and last byte: inside the mapping, so never a fault.
      volatile uint8_t b = spans[i].first[0];
      b = spans[i].first[spans[i].second - 1];
      (void)b;
    }
    fuzz::require(covered == size - 8 - header_len);
    // The bytes a tensor points at are the file's bytes at its offset.
    if (!spans.empty())
      fuzz::require(std::equal(spans.front().first, spans.front().first + spans.front().second, data + 8 + header_len));
  } catch (const Error&) {
  }
  return 0;
}
