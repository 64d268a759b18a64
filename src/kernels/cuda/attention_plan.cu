// attention_plan: block table -> flash work items, on the device (see attention.h).
#include <string>

#include "core/verify_mask.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/kernel_errors.h"

namespace flashdllm::kernels {
namespace {

constexpr int kPlanThreads = 1024;

// One block. Round by round, each thread takes one tile, counts its chunks, and an exclusive
// block scan gives where its work items go.
__global__ void __launch_bounds__(kPlanThreads)
    plan_kernel(const int32_t* __restrict__ table, int tile_ints, int64_t n_tiles, int64_t q_rows, int64_t kv_rows,
                int block_m, int32_t skip_min_rows, int32_t min_rows, AttentionWorkItem* __restrict__ work,
                int32_t* __restrict__ work_count, int64_t capacity, int* error_flags) {
  __shared__ int64_t warp_prefix[kPlanThreads / 32];
  __shared__ int64_t round_total;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  int64_t base = 0;
  bool bad_tile = false, overflow = false;
  for (int64_t t0 = 0; t0 < n_tiles; t0 += kPlanThreads) {
    const int64_t i = t0 + tid;
    int32_t qs = 0, qe = 0, ks = 0, ke = 0;
    int64_t chunks = 0;
    if (i < n_tiles) {
      qs = table[tile_ints * i + 0];
      qe = table[tile_ints * i + 1];
      ks = table[tile_ints * i + 2];
      ke = table[tile_ints * i + 3];
      // VerifyTile rows (kVerifyTileInts): any gather range, groups that fit (verify_tile_groups_valid);
      // AttentionTile rows: keys for every row.
      const bool ok = tile_ints == kVerifyTileInts
                          ? qs >= 0 && qs <= qe && qe <= q_rows && ks >= 0 && ks <= ke && ke <= kv_rows &&
                                verify_tile_groups_valid(qe - qs, table[tile_ints * i + 4], table[tile_ints * i + 5])
                          : detail::attention_tile_valid(qs, qe, ks, ke, q_rows, kv_rows);
      if (!ok)
        bad_tile = true;
      else if ((skip_min_rows <= 0 || qe - qs < skip_min_rows) && qe - qs >= min_rows)  // others run elsewhere
        chunks = (static_cast<int64_t>(qe) - qs + block_m - 1) / block_m;
    }
    // Inclusive warp scan, then a scan over the warp totals.
    int64_t incl = chunks;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t n = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += n;
    }
    if (lane == 31) warp_prefix[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int64_t w = warp_prefix[lane];  // kPlanThreads / 32 == 32 warps
      int64_t wincl = w;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int64_t n = __shfl_up_sync(0xffffffffu, wincl, o);
        if (lane >= o) wincl += n;
      }
      warp_prefix[lane] = wincl - w;  // exclusive
      if (lane == 31) round_total = wincl;
    }
    __syncthreads();
    int64_t pos = base + warp_prefix[warp] + incl - chunks;
    for (int64_t c = 0; c < chunks; ++c, ++pos) {
      if (pos >= capacity) {
        overflow = true;
        break;
      }
      const int32_t b = qs + static_cast<int32_t>(c) * block_m;
      const int32_t e = qe - b < block_m ? qe : b + block_m;
      work[pos] = AttentionWorkItem{b, e, ks, ke, static_cast<int32_t>(i)};
    }
    base += round_total;
    __syncthreads();  // warp_prefix / round_total are rewritten next round
  }
  if (error_flags) {
    if (bad_tile) atomicOr(error_flags, kErrAttentionTile);
    if (overflow) atomicOr(error_flags, kErrAttentionWork);
  }
  if (tid == 0) *work_count = static_cast<int32_t>(base < capacity ? base : capacity);
}

}  // namespace

int64_t attention_work_capacity(int64_t q_rows, int64_t n_tiles, int block_m) noexcept {
  return (q_rows + block_m - 1) / block_m + n_tiles;
}

namespace {

void launch_plan(const char* op, const int32_t* table, int tile_ints, int64_t n_tiles, int64_t q_rows, int64_t kv_rows,
                 int block_m, int32_t skip_min_rows, int32_t min_rows, AttentionWorkItem* work, int32_t* work_count,
                 int64_t capacity, int* error_flags, cudaStream_t stream) {
  if (block_m <= 0) cuda::throw_invalid_argument(std::string(op) + ": block_m must be positive");
  if (capacity > 0x7fffffff) cuda::throw_invalid_argument(std::string(op) + ": work capacity exceeds 2^31-1");
  plan_kernel<<<1, kPlanThreads, 0, stream>>>(table, tile_ints, n_tiles, q_rows, kv_rows, block_m, skip_min_rows,
                                              min_rows, work, work_count, capacity, error_flags);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_plan(const int32_t* table, int64_t n_tiles, int64_t q_rows, int64_t kv_rows, int block_m,
                    AttentionWorkItem* work, int32_t* work_count, int64_t capacity, int* error_flags,
                    cudaStream_t stream, int32_t skip_min_rows, int32_t min_rows) {
  launch_plan("attention_plan", table, 4, n_tiles, q_rows, kv_rows, block_m, skip_min_rows, min_rows, work, work_count,
              capacity, error_flags, stream);
}

void attention_plan_verify(const int32_t* table, int64_t n_tiles, int64_t q_rows, int64_t n_keys, int block_m,
                           AttentionWorkItem* work, int32_t* work_count, int64_t capacity, int* error_flags,
                           cudaStream_t stream) {
  launch_plan("attention_plan_verify", table, kVerifyTileInts, n_tiles, q_rows, n_keys, block_m, 0, 0, work, work_count,
              capacity, error_flags, stream);
}

}  // namespace flashdllm::kernels
