// cuDNN's fused attention (SDPA) through the cuDNN frontend graph API, for the attention tiles
// that are plain bidirectional attention over one contiguous key range: the admission prefills
// (a whole sequence attending to itself) and, optionally, every tile of Backend::attention().
//
// Why: on the H200 cuDNN's Hopper SDPA kernel (wgmma, TMA, warp specialisation) runs the prefill
// shapes at ~600 TFLOP/s against ~290 for our mma.sync flash kernel
// (bench/results/2026-12-02-h200-targets-3b47fcc); issue 13 allows it for the plain variants when it
// measures faster. Our kernel stays the default for the Flash-Cache windows (it fuses the
// importance a_i, which cuDNN cannot) and is the fallback wherever cuDNN is absent or refuses a
// shape.
//
// Layout: every tile i is one "batch" of a ragged (THD) SDPA: its query rows are rows
// [q_start, q_end) of q / out ([Tq, H·Dh] bf16, row-major), its keys rows [k_start, k_end) of the
// K and V stores ([N, Hkv·Dh] bf16; Hkv < H is grouped-query attention, which cuDNN's SDPA takes
// natively: query head h reads K/V head h / (H / Hkv)); cuDNN reads per tile the element offsets
// q_start·H·Dh and k_start·Hkv·Dh and the lengths from device arrays, so one built graph serves every table with the
// same (batch, max rows, max keys) bucket. Numerics: bf16 in/out, fp32 scores, softmax and
// accumulation (cuDNN's online softmax), scale applied to q·k.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <cuda_runtime.h>

namespace flashdllm::kernels {

/// The build-time shape of a ragged SDPA graph (the values a graph is specialised for). Actual
/// tiles may be shorter: batch entries past the real tiles have zero query rows.
struct CudnnSdpaShape {
  int32_t batch = 0;   ///< tiles (graph batch), >= 1
  int32_t max_q = 0;   ///< >= every tile's query rows
  int32_t max_kv = 0;  ///< >= every tile's key count
  int32_t n_heads = 0;
  int32_t head_dim = 0;  ///< cuDNN: a multiple of 8, <= 256
  float scale = 0.f;     ///< softmax scale, finite > 0
  /// K/V heads, dividing n_heads (grouped-query attention when fewer); 0 means n_heads.
  int32_t n_kv_heads = 0;
};

/// Device operands of one run. seq_q / seq_kv: I32 [batch]; q_offsets / kv_offsets: I32 [batch + 1]
/// element offsets of each tile's first query row in q and out (row · n_heads · head_dim), and of
/// its first key row in k and v (row · n_kv_heads · head_dim). Every pointer 16-byte aligned (cuDNN selects engines
/// assuming it).
struct CudnnSdpaOperands {
  const void* q = nullptr;  ///< bf16 [Tq, H·Dh]
  const void* k = nullptr;  ///< bf16 [N, Hkv·Dh]
  const void* v = nullptr;  ///< bf16 [N, Hkv·Dh]
  void* out = nullptr;      ///< bf16 [Tq, H·Dh]; rows outside every tile untouched
  const int32_t* seq_q = nullptr;
  const int32_t* seq_kv = nullptr;
  const int32_t* q_offsets = nullptr;
  const int32_t* kv_offsets = nullptr;
};

/// One cuDNN handle and its built SDPA graphs (one per CudnnSdpaShape, kept for the backend's
/// life). Not thread-safe (one per CUDA backend, used from its thread).
class CudnnSdpa {
 public:
  /// A ready instance, or nullptr with the reason in *why (built without cuDNN, libcudnn older than
  /// 9.5, or not an sm_90+ GPU: cuDNN's ragged SDPA needs Hopper). Never throws. (A build with cuDNN
  /// links libcudnn: without it at run time the program does not start.)
  static std::unique_ptr<CudnnSdpa> create(int device, std::string* why);
  virtual ~CudnnSdpa() = default;

  /// Builds the graph for `shape` (host work; the first build of a shape may compile kernels and
  /// take 10-1000 ms) unless already built, and returns the workspace bytes its runs need.
  /// Throws Error(kUnsupported) with cuDNN's message when cuDNN refuses the shape.
  virtual size_t prepare(const CudnnSdpaShape& shape) = 0;

  /// Enqueues the graph of `shape` (prepare()d before) on `stream` over `ops` with `workspace`
  /// (at least prepare()'s bytes). No host synchronisation, no allocation (capturable into a CUDA
  /// graph). Throws Error(kDevice) when cuDNN's execute fails.
  virtual void run(const CudnnSdpaShape& shape, const CudnnSdpaOperands& ops, void* workspace, cudaStream_t stream) = 0;

  /// Graphs built so far.
  virtual size_t graphs() const noexcept = 0;
};

}  // namespace flashdllm::kernels
