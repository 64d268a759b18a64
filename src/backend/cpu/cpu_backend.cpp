// CPU backend: the numerical oracle. fp32 storage and compute, OpenBLAS SGEMM for matrix
// products, OpenMP for everything else. Reductions that decide numerics (RMSNorm mean, softmax
// sums, attention dot products) accumulate in double so this backend sits closer to the exact
// result than any fp32 GPU implementation it is compared with.
//
// Source of each op's semantics: reference-algorithms.md §A.3 (LLaDA forward, HF modeling_llada.py),
// §B (LLaDA generate.py: Gumbel-max, confidence, CFG).
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "backend/backend.h"
#include "backend/backend_policy.h"
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/cpu_fp8.h"
#include "backend/cpu/cpu_moe.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/operand_checks.h"
#include "core/check.h"
#include "core/log.h"
#include "core/philox.h"

namespace flashdllm {
namespace {

// The shared operand checks (backend/operand_checks.h), for host tensors.
void check_dtype(const Tensor& t, DType want, const char* op, const char* operand) {
  opcheck::expect(t, want, DeviceKind::kCPU, op, operand);
}
using opcheck::expect_matrix;

/// Loops with less work than this many elements run on one thread: an OpenMP fork/join costs
/// microseconds, and on a machine whose cores are busy a spinning barrier can cost milliseconds.
constexpr int64_t kParallelMinWork = int64_t{1} << 16;

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, const BackendOptions& options) {
    // 0 = OpenMP's default (OMP_NUM_THREADS if set, else all hardware threads). Far more threads
    // than cores only slows every parallel region down (100000 overflowed libgomp's stacks).
    check_cpu_threads(threads);
    const int limit = max_cpu_threads();
    threads_ = threads > 0 ? threads : std::max(1, omp_get_max_threads());
    FDLLM_CHECK_ARG(threads_ <= limit,
                    "OMP_NUM_THREADS asks for {} threads, more than {} (4 x the {} hardware threads); pass "
                    "threads explicitly or lower OMP_NUM_THREADS",
                    threads_, limit, limit / 4);
    openblas_set_num_threads(threads_);
    // row_padding true: the CUDA backend's row padding (no graphs here: tests and comparisons).
    row_padding_ = row_padding_for(DeviceKind::kCPU, options.row_padding);
    // CMake links the OpenMP build of OpenBLAS and puts its directory in the RUNPATH; but every
    // flavour has the SONAME libopenblas.so.0, so LD_LIBRARY_PATH or a copied binary can load another.
    if (openblas_get_parallel() == 1 && threads_ > 1)
      logger().warn("the pthread build of OpenBLAS is loaded: its thread pool and OpenMP's spin on the same "
                    "cores and slow the CPU backend down; load the OpenMP build (libopenblas0-openmp)");
  }

  DeviceKind device() const noexcept override { return DeviceKind::kCPU; }
  std::string name() const override {
    const int parallel = openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
    const char* flavour = parallel == 2 ? "OpenMP" : parallel == 1 ? "pthreads" : "sequential";
    return fmt::format("cpu ({} threads, OpenBLAS {}, fp32)", threads_, flavour);
  }
  DType activation_dtype() const noexcept override { return DType::kF32; }
  DType weight_dtype() const noexcept override { return DType::kF32; }

  Buffer alloc(size_t bytes, const char* what) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    FDLLM_CHECK(p != nullptr, ErrorCode::kOutOfMemory, "cannot allocate {} bytes of host memory for {}", bytes, what);
    return Buffer(p, bytes, DeviceKind::kCPU, [](void* q) { std::free(q); });
  }
  // Empty tensors copy nothing (their pointers, and an empty host vector's, may be null).
  void copy_from_host(Tensor dst, const void* src) override {
    if (dst.nbytes() > 0) std::memcpy(dst.data, src, dst.nbytes());
  }
  void copy_to_host(void* dst, Tensor src) override {
    if (src.nbytes() > 0) std::memcpy(dst, src.data, src.nbytes());
  }
  void fill_zero(Tensor t) override {
    if (t.nbytes() > 0) std::memset(t.data, 0, t.nbytes());
  }
  void synchronize() override {}
  RowPadding row_padding() const override { return row_padding_; }

  size_t free_memory() const override {
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  }

  void upload_weight(Tensor dst, DType src_dtype, const void* src) override {
    if (dst.dtype == DType::kF8E4M3) {  // block-FP8 weights: the e4m3 bytes as they are
      FDLLM_CHECK_ARG(src_dtype == DType::kF8E4M3, "upload_weight: {} takes F8_E4M3 data, got {}", dst.describe(),
                      dtype_name(src_dtype));
      if (dst.nbytes() > 0) std::memcpy(dst.data, src, dst.nbytes());
      return;
    }
    check_dtype(dst, DType::kF32, "upload_weight", "dst");
    convert_to_f32(src_dtype, src, dst.ptr<float>(), static_cast<size_t>(dst.numel()));
  }

  void fill_normal(Tensor dst, uint64_t seed, uint64_t stream, float mean, float std,
                   const FillWindow& window = {}) override {
    check_dtype(dst, DType::kF32, "fill_normal", "dst");
    FDLLM_CHECK_ARG(std::isfinite(mean) && std::isfinite(std) && std >= 0.0f,
                    "fill_normal: mean {} and std {} must be finite, std >= 0", mean, std);
    const int64_t parent_cols = fill_parent_cols(dst, window);
    const int64_t n = dst.numel();
    float* p = dst.ptr<float>();
    const double m = mean, s = std;
    // The value of parent element j (backend.h): its pair's Box-Muller transform, cos for even j.
    auto value = [&](int64_t j, bool both, float* out) {
      const int64_t i = j & ~int64_t{1};
      const auto hi = static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32), lo = static_cast<uint32_t>(i);
      const double u1 = philox_uniform(seed, stream, hi, lo);
      const double u2 = philox_uniform(seed ^ 0x9e3779b97f4a7c15ull, stream, hi, lo);
      const double r = std::sqrt(-2.0 * std::log(u1)) * s;
      const double a = 6.283185307179586 * u2;
      if (both || (j & 1) == 0) out[0] = static_cast<float>(r * std::cos(a) + m);
      if (both) out[1] = static_cast<float>(r * std::sin(a) + m);
      else if (j & 1) out[0] = static_cast<float>(r * std::sin(a) + m);
    };
    if (window.offset == 0 && parent_cols == dst.row_size()) {  // the whole tensor: one transform per pair
      const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int64_t k = 0; k < pairs; ++k) value(2 * k, 2 * k + 1 < n, p + 2 * k);
      return;
    }
    const int64_t cols = dst.row_size();
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t e = 0; e < n; ++e) value(window.offset + e / cols * parent_cols + e % cols, false, p + e);
  }

  void embedding(Tensor table, Tensor ids, Tensor out) override {
    check_dtype(table, DType::kF32, "embedding", "table");
    check_dtype(ids, DType::kI32, "embedding", "ids");
    check_dtype(out, DType::kF32, "embedding", "out");
    const int64_t T = ids.numel(), D = table.row_size(), V = table.rows();
    expect_matrix(out, T, D, "embedding", "out");
    const int32_t* id = ids.ptr<int32_t>();
    for (int64_t t = 0; t < T; ++t)
      FDLLM_CHECK_ARG(id[t] >= 0 && id[t] < V, "embedding: token id {} at row {} is outside the vocabulary [0, {})",
                      id[t], t, V);
#pragma omp parallel for num_threads(threads_) if (T * D >= kParallelMinWork)
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(out.ptr<float>() + t * D, table.ptr<float>() + static_cast<int64_t>(id[t]) * D, D * sizeof(float));
  }

  void rmsnorm(Tensor x, Tensor w, float eps, Tensor out) override {
    check_dtype(x, DType::kF32, "rmsnorm", "x");
    check_dtype(w, DType::kF32, "rmsnorm", "w");
    check_dtype(out, DType::kF32, "rmsnorm", "out");
    const int64_t T = x.rows(), D = x.row_size();
    FDLLM_CHECK_ARG(w.numel() == D, "rmsnorm: weight has {} elements, rows have {}", w.numel(), D);
    expect_matrix(out, T, D, "rmsnorm", "out");
#pragma omp parallel for num_threads(threads_) if (T * D >= kParallelMinWork)
    for (int64_t t = 0; t < T; ++t)
      cpu::rmsnorm_row(x.ptr<float>() + t * D, w.ptr<float>(), D, eps, out.ptr<float>() + t * D);
  }

  void matmul(Tensor x, Tensor w, Tensor out, bool accumulate) override {
    check_dtype(x, DType::kF32, "matmul", "x");
    check_dtype(w, DType::kF32, "matmul", "w");
    check_dtype(out, DType::kF32, "matmul", "out");
    const opcheck::LinearShape s = opcheck::expect_linear_shapes(x, w, nullptr, out, "matmul");
    const int64_t T = s.T, N = s.N, K = s.K;
    if (T == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(N),
                static_cast<int>(K), 1.0f, x.ptr<float>(), static_cast<int>(K), w.ptr<float>(), static_cast<int>(K),
                accumulate ? 1.0f : 0.0f, out.ptr<float>(), static_cast<int>(N));
  }

  void check_precision(bool, bool) const override {}  // the oracle runs both FP8 formats

  void matmul_fp8(Tensor x, Tensor w, Tensor w_scale, Tensor out, bool accumulate) override {
    cpu::matmul_fp8(threads_, x, w, w_scale, out, accumulate);
  }

  void qkv_rope_store(Tensor xn, Tensor wqkv, const QkvExtras& extra, Tensor positions, Tensor rows,
                      const RopeTable& rope, int n_heads, Tensor q_out, Tensor k_store, Tensor v_store,
                      Tensor scratch) override {
    static constexpr const char* kOp = "qkv_rope_store";
    const Tensor& bqkv = extra.bias;
    const int64_t T = xn.rows(), HD = q_out.row_size();
    const int n_kv = opcheck::kv_heads_of(q_out, k_store, n_heads, kOp);
    const int64_t Dh = HD / n_heads, KD = n_kv * Dh, W = HD + 2 * KD;
    FDLLM_CHECK_ARG(wqkv.rows() == W,
                    "{}: wqkv {} is not [(n_heads + 2·n_kv_heads)·head_dim = {}, d_model] for n_heads {}, n_kv_heads "
                    "{}, head_dim {}",
                    kOp, wqkv.describe(), W, n_heads, n_kv, Dh);
    FDLLM_CHECK_ARG(bqkv.numel() == 0 || bqkv.numel() == W, "{}: bias {} must be empty or have {} elements", kOp,
                    bqkv.describe(), W);
    if (bqkv.numel() > 0) check_dtype(bqkv, DType::kF32, kOp, "bqkv");
    const bool qk_norm = extra.qk_norm();
    if (qk_norm) {
      check_dtype(extra.q_norm, DType::kF32, kOp, "q_norm");
      check_dtype(extra.k_norm, DType::kF32, kOp, "k_norm");
      FDLLM_CHECK_ARG(extra.q_norm.numel() == Dh && extra.k_norm.numel() == Dh,
                      "{}: q_norm {} and k_norm {} must both have head_dim = {} elements", kOp, extra.q_norm.describe(),
                      extra.k_norm.describe(), Dh);
    }
    check_dtype(positions, DType::kI32, kOp, "positions");
    check_dtype(rows, DType::kI32, kOp, "rows");
    FDLLM_CHECK_ARG(positions.numel() == T && rows.numel() == T, "{}: positions/rows must have {} entries", kOp, T);
    expect_matrix(q_out, T, HD, kOp, "q_out");
    FDLLM_CHECK_ARG(v_store.row_size() == KD && k_store.rows() == v_store.rows(),
                    "{}: K/V stores must be [N, {}], got {} and {}", kOp, KD, k_store.describe(), v_store.describe());
    FDLLM_CHECK_ARG(rope.cos.row_size() * 2 == Dh, "{}: RoPE table width {} does not match head_dim {}", kOp,
                    rope.cos.row_size(), Dh);
    FDLLM_CHECK_ARG(scratch.numel() >= T * W, "{}: scratch too small ({} for {} rows)", kOp, scratch.describe(), T);
    const bool kv_fp8 = extra.kv_scale.numel() > 0;
    if (kv_fp8) {
      check_dtype(extra.kv_scale, DType::kF32, kOp, "kv_scale");
      FDLLM_CHECK_ARG(extra.kv_scale.numel() == 2 * n_kv, "{}: kv_scale {} must have 2·n_kv_heads = {} elements", kOp,
                      extra.kv_scale.describe(), 2 * n_kv);
    }
    Tensor qkv = scratch.reshape({scratch.numel()}).slice_rows(0, T * W).reshape({T, W});
    if (wqkv.dtype == DType::kF8E4M3)
      matmul_fp8(xn, wqkv, extra.weight_scale, qkv, false);
    else
      matmul(xn, wqkv, qkv, false);
    const int32_t* pos = positions.ptr<int32_t>();
    const int32_t* row = rows.ptr<int32_t>();
    const int64_t n_store = k_store.rows(), n_pos = rope.cos.rows();
    for (int64_t t = 0; t < T; ++t) {
      FDLLM_CHECK_ARG(pos[t] >= 0 && pos[t] < n_pos, "{}: position {} at row {} outside the RoPE table [0, {})", kOp,
                      pos[t], t, n_pos);
      FDLLM_CHECK_ARG(row[t] >= 0 && row[t] < n_store, "{}: store row {} at row {} outside [0, {})", kOp, row[t], t,
                      n_store);
    }
    const float* bias = bqkv.numel() > 0 ? bqkv.ptr<float>() : nullptr;
#pragma omp parallel for num_threads(threads_) if (T * W >= kParallelMinWork)
    for (int64_t t = 0; t < T; ++t) {
      float* src = qkv.ptr<float>() + t * W;
      if (bias != nullptr)  // the projection's bias, before RoPE (nn.Linear, then rotary embedding)
        for (int64_t i = 0; i < W; ++i) src[i] += bias[i];
      if (qk_norm) {  // per-head RMSNorm of q and k, before RoPE (LLaDA-MoE's q_norm / k_norm)
        for (int h = 0; h < n_heads; ++h)
          cpu::rmsnorm_row(src + h * Dh, extra.q_norm.ptr<float>(), Dh, extra.norm_eps, src + h * Dh);
        for (int h = 0; h < n_kv; ++h)
          cpu::rmsnorm_row(src + HD + h * Dh, extra.k_norm.ptr<float>(), Dh, extra.norm_eps, src + HD + h * Dh);
      }
      const float* c = rope.cos.ptr<float>() + static_cast<int64_t>(pos[t]) * (Dh / 2);
      const float* s = rope.sin.ptr<float>() + static_cast<int64_t>(pos[t]) * (Dh / 2);
      float* kdst = k_store.ptr<float>() + static_cast<int64_t>(row[t]) * KD;
      float* vdst = v_store.ptr<float>() + static_cast<int64_t>(row[t]) * KD;
      for (int h = 0; h < n_heads; ++h) cpu::rope_head(src + h * Dh, c, s, Dh, q_out.ptr<float>() + t * HD + h * Dh);
      for (int h = 0; h < n_kv; ++h) cpu::rope_head(src + HD + h * Dh, c, s, Dh, kdst + h * Dh);
      std::memcpy(vdst, src + HD + KD, static_cast<size_t>(KD) * sizeof(float));
      if (kv_fp8) {  // an FP8 K/V cache: the rows as e4m3 · per-head scale (stored as fp32 here)
        cpu::fp8_round_heads(kdst, n_kv, Dh, extra.kv_scale.ptr<float>());
        cpu::fp8_round_heads(vdst, n_kv, Dh, extra.kv_scale.ptr<float>() + n_kv);
      }
    }
  }

  void attention(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                 Tensor out) override {
    check_dtype(q, DType::kF32, "attention", "q");
    check_dtype(k_store, DType::kF32, "attention", "k_store");
    check_dtype(v_store, DType::kF32, "attention", "v_store");
    check_dtype(out, DType::kF32, "attention", "out");
    check_dtype(table, DType::kI32, "attention", "table");
    const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows(), KD = k_store.row_size();
    const int group = n_heads / opcheck::kv_heads_of(q, k_store, n_heads, "attention");
    expect_matrix(out, Tq, HD, "attention", "out");
    expect_matrix(v_store, N, KD, "attention", "v_store");
    FDLLM_CHECK_ARG(table.numel() % 4 == 0, "attention: table must be [n_tiles, 4], got {}", table.describe());
    const auto* tiles = reinterpret_cast<const AttentionTile*>(table.data);
    const int64_t n_tiles = table.numel() / 4;
    // Work items (tile, head, up to kRowsPerItem query rows), so OpenMP balances tiles of very
    // different lengths; each runs the blocked kernel, bit-identical to attend_row per row.
    constexpr int32_t kRowsPerItem = 16;
    struct Item {
      int32_t tile, head, row;
    };
    std::vector<Item> work;
    int64_t max_keys = 0;
    for (int64_t i = 0; i < n_tiles; ++i) {
      const AttentionTile& a = tiles[i];
      FDLLM_CHECK_ARG(0 <= a.q_start && a.q_start <= a.q_end && a.q_end <= Tq && 0 <= a.k_start &&
                          a.k_start < a.k_end && a.k_end <= N,
                      "attention: tile {} (q [{}, {}), k [{}, {})) outside q rows {} / store rows {}", i, a.q_start,
                      a.q_end, a.k_start, a.k_end, Tq, N);
      max_keys = std::max<int64_t>(max_keys, a.k_end - a.k_start);
      for (int h = 0; h < n_heads; ++h)
        for (int32_t r = a.q_start; r < a.q_end; r += kRowsPerItem) work.push_back({static_cast<int32_t>(i), h, r});
    }
    const int64_t Dh = HD / n_heads;
#pragma omp parallel num_threads(threads_) if (work.size() > 1)
    {
      std::vector<double> scores(static_cast<size_t>(cpu::kAttnScratchRows * max_keys));
#pragma omp for schedule(dynamic)
      for (size_t w = 0; w < work.size(); ++w) {
        const AttentionTile& a = tiles[work[w].tile];
        const int64_t r = work[w].row, h = work[w].head, rows = std::min<int64_t>(kRowsPerItem, a.q_end - r);
        const int64_t kh = h / group;  // the K/V head of query head h
        cpu::attend_rows(simd_, q.ptr<float>() + r * HD + h * Dh, HD, rows, k_store.ptr<float>() + kh * Dh,
                         v_store.ptr<float>() + kh * Dh, KD, a.k_start, a.k_end, Dh, scale, scores.data(),
                         out.ptr<float>() + r * HD + h * Dh, HD);
      }
    }
  }

  void attention_verify(Tensor q, Tensor k_store, Tensor v_store, Tensor key_rows, Tensor k_tile, Tensor v_tile,
                        Tensor table, int n_heads, float scale, Tensor out) override {
    static constexpr const char* kOp = "attention_verify";
    const int n_kv = opcheck::expect_verify_operands(q, k_store, v_store, key_rows, k_tile, v_tile, table, n_heads, out,
                                                     DType::kF32, DeviceKind::kCPU);
    const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows(), G = key_rows.numel();
    const int64_t KD = k_store.row_size(), group = n_heads / n_kv;
    const auto* tiles = reinterpret_cast<const VerifyTile*>(table.data);
    const int64_t n_tiles = table.numel() / kVerifyTileInts;
    const int32_t* gather = key_rows.ptr<int32_t>();
    for (int64_t g = 0; g < G; ++g)
      FDLLM_CHECK_ARG(gather[g] >= 0 && gather[g] < N, "{}: key_rows[{}] = {} is outside the store rows [0, {})", kOp,
                      g, gather[g], N);
    std::vector<std::pair<int32_t, int32_t>> work;  // (tile, query row)
    for (int64_t i = 0; i < n_tiles; ++i) {
      const VerifyTile& a = tiles[i];
      FDLLM_CHECK_ARG(0 <= a.q_start && a.q_start <= a.q_end && a.q_end <= Tq && 0 <= a.k_start &&
                          a.k_start <= a.k_end && a.k_end <= G &&
                          verify_tile_groups_valid(a.q_end - a.q_start, a.n_cand, a.n_src),
                      "{}: tile {} (q [{}, {}), keys [{}, {}), {} candidates, {} source rows) is outside {} query rows "
                      "/ {} key rows or its groups do not fit (0 <= n_src <= n_cand, 2·n_cand + n_src <= rows)",
                      kOp, i, a.q_start, a.q_end, a.k_start, a.k_end, a.n_cand, a.n_src, Tq, G);
      for (int32_t r = a.q_start; r < a.q_end; ++r) work.emplace_back(static_cast<int32_t>(i), r);
    }
    const int64_t Dh = HD / n_heads;
#pragma omp parallel num_threads(threads_)
    {
      std::vector<double> scores;
      std::vector<const float*> vrows;
      std::vector<double> acc(static_cast<size_t>(Dh));
#pragma omp for schedule(dynamic, 4)
      for (size_t w = 0; w < work.size(); ++w) {
        const VerifyTile& a = tiles[work[w].first];
        const int64_t r = work[w].second, rows = a.q_end - a.q_start, S = a.n_cand, T = a.n_kept();
        for (int h = 0; h < n_heads; ++h) {
          const float* qr = q.ptr<float>() + r * HD + h * Dh;
          const int64_t kc = h / group * Dh;  // the columns of query head h's K/V head
          scores.clear();
          vrows.clear();
          auto add_key = [&](const float* kr, const float* vr) {
            double d = 0.0;
            for (int64_t i = 0; i < Dh; ++i) d += static_cast<double>(qr[i]) * kr[i];
            scores.push_back(d * scale);
            vrows.push_back(vr);
          };
          for (int32_t g = a.k_start; g < a.k_end; ++g)
            add_key(k_store.ptr<float>() + static_cast<int64_t>(gather[g]) * KD + kc,
                    v_store.ptr<float>() + static_cast<int64_t>(gather[g]) * KD + kc);
          for (int64_t c = 0; c < rows; ++c)
            if (verify_may_attend(T, S, r - a.q_start, c))
              add_key(k_tile.ptr<float>() + (a.q_start + c) * KD + kc, v_tile.ptr<float>() + (a.q_start + c) * KD + kc);
          // One softmax over the cached and the in-tile keys (global maximum).
          double m = -std::numeric_limits<double>::infinity();
          for (double sc : scores) m = std::max(m, sc);
          double sum = 0.0;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (size_t j = 0; j < scores.size(); ++j) {
            const double p = std::exp(scores[j] - m);
            sum += p;
            for (int64_t i = 0; i < Dh; ++i) acc[static_cast<size_t>(i)] += p * vrows[j][i];
          }
          float* o = out.ptr<float>() + r * HD + h * Dh;
          for (int64_t i = 0; i < Dh; ++i) o[i] = static_cast<float>(acc[static_cast<size_t>(i)] / sum);
        }
      }
    }
  }

  void attention_with_importance(Tensor q, Tensor k_store, Tensor v_store, Tensor table, int n_heads, float scale,
                                 Tensor out, Tensor score_table, float weight, Tensor scores) override {
    static constexpr const char* kOp = "attention_with_importance";
    check_score_table_args(table, score_table, kOp);
    const auto* tiles = reinterpret_cast<const AttentionTile*>(table.data);
    const auto* scored = reinterpret_cast<const AttentionTile*>(score_table.data);
    for (int64_t i = 0; i < score_table.numel() / 4; ++i) {
      const AttentionTile &s = scored[i], &a = tiles[i];
      FDLLM_CHECK_ARG(score_tile_inside(s, a),
                      "{}: score tile {} (q [{}, {}) k [{}, {})) is not a non-empty sub-range of tile {}'s query rows "
                      "(q [{}, {}) k [{}, {})) with its keys",
                      kOp, i, s.q_start, s.q_end, s.k_start, s.k_end, i, a.q_start, a.q_end, a.k_start, a.k_end);
    }
    Backend::attention_with_importance(q, k_store, v_store, table, n_heads, scale, out, score_table, weight, scores);
  }

  void attention_importance(Tensor q, Tensor k_store, Tensor table, int n_heads, float scale, bool probability_mass,
                            float weight, Tensor scores) override {
    static constexpr const char* kOp = "attention_importance";
    check_dtype(q, DType::kF32, kOp, "q");
    check_dtype(k_store, DType::kF32, kOp, "k_store");
    check_dtype(table, DType::kI32, kOp, "table");
    check_dtype(scores, DType::kF32, kOp, "scores");
    const int64_t Tq = q.rows(), HD = q.row_size(), N = k_store.rows(), KD = k_store.row_size();
    const int group = n_heads / opcheck::kv_heads_of(q, k_store, n_heads, kOp);
    FDLLM_CHECK_ARG(scores.numel() == N, "{}: operand 'scores' must have {} elements (one per store row), got {}",
                    kOp, N, scores.describe());
    FDLLM_CHECK_ARG(table.numel() % 4 == 0, "{}: table must be [n_tiles, 4], got {}", kOp, table.describe());
    FDLLM_CHECK_ARG(std::isfinite(weight), "{}: weight {} must be finite", kOp, weight);
    FDLLM_CHECK_ARG(!probability_mass || (std::isfinite(scale) && scale > 0.f),
                    "{}: scale {} must be finite and > 0 for the probability-mass variant", kOp, scale);
    const auto* tiles = reinterpret_cast<const AttentionTile*>(table.data);
    const int64_t n_tiles = table.numel() / 4;
    for (int64_t i = 0; i < n_tiles; ++i) {
      const AttentionTile& a = tiles[i];
      FDLLM_CHECK_ARG(0 <= a.q_start && a.q_start <= a.q_end && a.q_end <= Tq && 0 <= a.k_start &&
                          a.k_start <= a.k_end && a.k_end <= N && (a.q_start == a.q_end || a.k_start < a.k_end),
                      "{}: tile {} (q [{}, {}), k [{}, {})) outside q rows {} / store rows {}", kOp, i, a.q_start,
                      a.q_end, a.k_start, a.k_end, Tq, N);
    }
    const int64_t Dh = HD / n_heads;
    const float* qp = q.ptr<float>();
    const float* kp = k_store.ptr<float>();
    // One double accumulator per key over every tile, row and head; one rounding per key at the end.
    std::vector<double> acc(static_cast<size_t>(N), 0.0);
    std::vector<char> touched(static_cast<size_t>(N), 0);
    auto dot = [&](int64_t r, int h, int64_t t) {
      const float* a = qp + r * HD + h * Dh;
      const float* b = kp + t * KD + h / group * Dh;  // query head h's K/V head
      double d = 0.0;
      for (int64_t i = 0; i < Dh; ++i) d += static_cast<double>(a[i]) * b[i];
      return d;
    };
    for (int64_t i = 0; i < n_tiles; ++i) {
      const AttentionTile& a = tiles[i];
      const int64_t rows = a.q_end - a.q_start, keys = a.k_end - a.k_start;
      if (rows == 0 || keys == 0) continue;
      // Probability mass: log-sum-exp of every (row, head) over the tile's keys first.
      std::vector<double> lse;
      if (probability_mass) {
        lse.assign(static_cast<size_t>(rows * n_heads), 0.0);
#pragma omp parallel for num_threads(threads_) if (rows * n_heads * keys * Dh >= kParallelMinWork)
        for (int64_t rh = 0; rh < rows * n_heads; ++rh) {
          const int64_t r = a.q_start + rh / n_heads;
          const int h = static_cast<int>(rh % n_heads);
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t t = a.k_start; t < a.k_end; ++t) m = std::max(m, dot(r, h, t) * scale);
          double s = 0.0;
          for (int64_t t = a.k_start; t < a.k_end; ++t) s += std::exp(dot(r, h, t) * scale - m);
          lse[static_cast<size_t>(rh)] = m + std::log(s);
        }
      }
#pragma omp parallel for num_threads(threads_) if (rows * n_heads * keys * Dh >= kParallelMinWork)
      for (int64_t t = a.k_start; t < a.k_end; ++t) {
        double s = 0.0;
        for (int64_t r = 0; r < rows; ++r)
          for (int h = 0; h < n_heads; ++h) {
            const double d = dot(a.q_start + r, h, t);
            s += probability_mass ? std::exp(d * scale - lse[static_cast<size_t>(r * n_heads + h)]) : d;
          }
        acc[static_cast<size_t>(t)] += s;
        touched[static_cast<size_t>(t)] = 1;
      }
    }
    float* out = scores.ptr<float>();
    for (int64_t t = 0; t < N; ++t)
      if (touched[static_cast<size_t>(t)])
        out[t] = static_cast<float>(static_cast<double>(out[t]) + static_cast<double>(weight) * acc[static_cast<size_t>(t)]);
  }

  void moe_route(Tensor router_logits, Tensor expert_bias, const MoeRouting& routing, Tensor expert_ids,
                 Tensor expert_weights) override {
    cpu::moe_route(threads_, router_logits, expert_bias, routing, expert_ids, expert_weights);
  }
  void moe_experts(Tensor x, Tensor expert_ids, Tensor expert_weights, Tensor w_gate_up, Tensor w_down, Tensor out,
                   bool accumulate, Tensor scratch) override {
    cpu::moe_experts(threads_, x, expert_ids, expert_weights, w_gate_up, w_down, out, accumulate, scratch);
  }

  void swiglu(Tensor gate_up, Tensor out) override {
    check_dtype(gate_up, DType::kF32, "swiglu", "gate_up");
    check_dtype(out, DType::kF32, "swiglu", "out");
    const int64_t T = gate_up.rows(), F = gate_up.row_size() / 2;
    FDLLM_CHECK_ARG(gate_up.row_size() % 2 == 0, "swiglu: gate_up width {} is odd", gate_up.row_size());
    expect_matrix(out, T, F, "swiglu", "out");
#pragma omp parallel for num_threads(threads_) if (T * 2 * F >= kParallelMinWork)
    for (int64_t t = 0; t < T; ++t) {
      const float* g = gate_up.ptr<float>() + t * 2 * F;
      float* o = out.ptr<float>() + t * F;
      for (int64_t f = 0; f < F; ++f) o[f] = cpu::silu(g[f]) * g[F + f];
    }
  }

  void gather_rows(Tensor x, Tensor rows, Tensor out) override {
    check_dtype(rows, DType::kI32, "gather_rows", "rows");
    FDLLM_CHECK_ARG(x.dtype == out.dtype, "gather_rows: x is {} but out is {}", x.describe(), out.describe());
    const int64_t R = rows.numel(), D = x.row_size();
    expect_matrix(out, R, D, "gather_rows", "out");
    const size_t row_bytes = static_cast<size_t>(D) * dtype_size(x.dtype);
    const int32_t* r = rows.ptr<int32_t>();
    for (int64_t i = 0; i < R; ++i) {
      FDLLM_CHECK_ARG(r[i] >= 0 && r[i] < x.rows(), "gather_rows: row {} outside [0, {})", r[i], x.rows());
      std::memcpy(static_cast<char*>(out.data) + i * row_bytes, static_cast<const char*>(x.data) + r[i] * row_bytes,
                  row_bytes);
    }
  }

  void gather_columns(Tensor x, Tensor cols, Tensor out) override {
    check_dtype(x, DType::kF32, "gather_columns", "x");
    check_dtype(cols, DType::kI32, "gather_columns", "cols");
    check_dtype(out, DType::kF32, "gather_columns", "out");
    const int64_t R = x.rows(), V = x.row_size();
    FDLLM_CHECK_ARG(cols.numel() == R && out.numel() == R,
                    "gather_columns: x {} needs cols and out of {} rows, got {} and {}", x.describe(), R,
                    cols.describe(), out.describe());
    const float* in = x.ptr<float>();
    const int32_t* c = cols.ptr<int32_t>();
    float* o = out.ptr<float>();
    for (int64_t r = 0; r < R; ++r)
      o[r] = c[r] >= 0 && c[r] < V ? in[r * V + c[r]] : std::numeric_limits<float>::quiet_NaN();
  }

  void cfg_combine(Tensor cond, Tensor uncond, float scale, Tensor out) override {
    check_dtype(cond, DType::kF32, "cfg_combine", "cond");
    check_dtype(uncond, DType::kF32, "cfg_combine", "uncond");
    check_dtype(out, DType::kF32, "cfg_combine", "out");
    FDLLM_CHECK_ARG(cond.numel() == uncond.numel() && cond.numel() == out.numel(),
                    "cfg_combine: cond {}, uncond {}, out {} differ in size", cond.describe(), uncond.describe(),
                    out.describe());
    const float* c = cond.ptr<float>();
    const float* u = uncond.ptr<float>();
    float* o = out.ptr<float>();
    const int64_t n = cond.numel();
#pragma omp parallel for num_threads(threads_) if (n >= kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) o[i] = u[i] + (scale + 1.0f) * (c[i] - u[i]);
  }

  void select_tokens(Tensor logits, Tensor row_keys, const SelectParams& p, Tensor x0, Tensor conf) override {
    check_dtype(logits, DType::kF32, "select_tokens", "logits");
    check_dtype(row_keys, DType::kI32, "select_tokens", "row_keys");
    check_dtype(x0, DType::kI32, "select_tokens", "x0");
    check_dtype(conf, DType::kF64, "select_tokens", "conf");
    const int64_t R = logits.rows(), V = logits.row_size();
    FDLLM_CHECK_ARG(row_keys.numel() == R && x0.numel() == R && conf.numel() == R,
                    "select_tokens: row_keys/x0/conf must have {} entries", R);
    FDLLM_CHECK_ARG(p.temperature >= 0.0 && std::isfinite(p.temperature), "select_tokens: temperature {} must be >= 0",
                    p.temperature);
#pragma omp parallel for num_threads(threads_)
    for (int64_t r = 0; r < R; ++r) {
      cpu::SelectResult s = cpu::select_row(logits.ptr<float>() + r * V, V,
                                            static_cast<uint32_t>(row_keys.ptr<int32_t>()[r]), p);
      x0.ptr<int32_t>()[r] = s.token;
      conf.ptr<double>()[r] = s.confidence;
    }
  }

 private:
  int threads_ = 1;
  RowPadding row_padding_;                        // Backend::row_padding: none unless FLASHDLLM_ROW_PADDING=1
  cpu::SimdLevel simd_ = cpu::best_simd_level();  // instruction set of the blocked attention
};

}  // namespace

int max_cpu_threads() noexcept {
  const unsigned hw = std::thread::hardware_concurrency();
  return 4 * static_cast<int>(std::clamp(hw, 1u, 1u << 20));
}

void check_cpu_threads(int threads) {
  const int limit = max_cpu_threads();
  FDLLM_CHECK_ARG(threads >= 0 && threads <= limit,
                  "threads = {} is outside [0, {}] (0 = all cores; at most 4 x the {} hardware threads)", threads,
                  limit, limit / 4);
}

std::unique_ptr<Backend> make_cpu_backend(int threads, const BackendOptions& options) {
  validate_backend_options(options);
  return std::make_unique<CpuBackend>(threads, options);
}

}  // namespace flashdllm
