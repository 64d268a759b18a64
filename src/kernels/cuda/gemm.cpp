#include "kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace flashdllm::kernels {
namespace {

struct PlanKey {
  int64_t T, N, K;
  int out_type;
  bool accumulate;
  int align_x, align_w, align_out;  // largest power-of-two alignment (bytes, capped at 16)
  bool fp8 = false;                 // e4m3 operands with block scales (matmul_fp8) instead of bf16
  bool fp8_x_as_a = false;          // matmul_fp8's operand roles swapped (Fp8Roles::kActivationsAsA)
  bool operator==(const PlanKey& o) const {
    return std::tie(T, N, K, out_type, accumulate, align_x, align_w, align_out, fp8, fp8_x_as_a) ==
           std::tie(o.T, o.N, o.K, o.out_type, o.accumulate, o.align_x, o.align_w, o.align_out, o.fp8, o.fp8_x_as_a);
  }
};


struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const noexcept {
    size_t h = std::hash<int64_t>()(k.T);
    auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
    mix(std::hash<int64_t>()(k.N));
    mix(std::hash<int64_t>()(k.K));
    mix(static_cast<size_t>(k.out_type) | (static_cast<size_t>(k.accumulate) << 4) |
        (static_cast<size_t>(k.align_x) << 8) | (static_cast<size_t>(k.align_w) << 16) |
        (static_cast<size_t>(k.align_out) << 24));
    mix(static_cast<size_t>(k.fp8) | (static_cast<size_t>(k.fp8_x_as_a) << 1));
    return h;
  }
};

// Owns the descriptors of one GEMM shape and the algorithm the heuristic chose for it.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  GemmLt::Choice choice;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

int alignment_of(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  int al = 16;
  while (al > 1 && u % static_cast<uintptr_t>(al) != 0) al /= 2;
  return al;
}

}  // namespace

struct GemmLt::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int tune_candidates = 0;
  GemmBuckets buckets = GemmBuckets::kQuarterOctave;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
  // Fixed picks: (bucket rows, N, K, output type, accumulate) -> the heuristic candidate to use.
  using PickKey = std::tuple<int64_t, int64_t, int64_t, int, bool>;
  std::map<PickKey, int> picks;
  // The algorithm per row bucket (key.T = gemm_bucket_rows(T, buckets)) and its candidate index:
  // the heuristic's first, or the pick's candidate.
  struct BucketAlgo {
    cublasLtMatmulAlgo_t algo;
    int index;
  };
  std::unordered_map<PlanKey, BucketAlgo, PlanKeyHash> bucket_algos;
  std::unordered_map<PlanKey, bool, PlanKeyHash> fp8_refused;  // block-FP8 shapes cuBLASLt has no algorithm for
  size_t heuristic_queries = 0;
  GemmLt::Choice last;

  /// cuBLASLt's heuristic for `op` over layouts a, b, c (c also as d): up to `count` results.
  int heuristic(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                const PlanKey& key, int count, cublasLtMatmulHeuristicResult_t* results) {
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    const uint64_t ws = workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t al_a = static_cast<uint32_t>(key.fp8_x_as_a ? key.align_x : key.align_w),
                   al_b = static_cast<uint32_t>(key.fp8_x_as_a ? key.align_w : key.align_x),
                   al_c = static_cast<uint32_t>(key.align_out);
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
    CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, c, c, pref, count, results, &found);
    ++heuristic_queries;
    // A block-FP8 GEMM this GPU or library cannot run is "no algorithm" (the caller's other route).
    if (key.fp8 && (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)) return 0;
    CUBLAS_CHECK(st);
    return found;
  }

  /// The algorithm of the bucket of key.T (queried at its bucket's row count once per bucket) and its
  /// candidate index, if cuBLASLt accepts it for exactly key.T rows with our workspace.
  std::optional<BucketAlgo> bucket_algorithm(const PlanKey& key, const Plan& p, cudaDataType_t out_dt) {
    PlanKey bk = key;
    bk.T = gemm_bucket_rows(key.T, buckets);
    auto it = bucket_algos.find(bk);
    if (it == bucket_algos.end()) {
      cublasLtMatrixLayout_t b = p.b, c = p.c, bb = nullptr, bc = nullptr;
      struct LayoutGuard {
        cublasLtMatrixLayout_t& b;
        cublasLtMatrixLayout_t& c;
        ~LayoutGuard() {
          if (b) cublasLtMatrixLayoutDestroy(b);
          if (c) cublasLtMatrixLayoutDestroy(c);
        }
      } guard{bb, bc};
      if (bk.T != key.T) {  // the bucket's row count: x col-major [K, Tb], out col-major [N, Tb]
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&bb, key.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF,
                                                static_cast<uint64_t>(key.K), static_cast<uint64_t>(bk.T), key.K));
        CUBLAS_CHECK(
            cublasLtMatrixLayoutCreate(&bc, out_dt, static_cast<uint64_t>(key.N), static_cast<uint64_t>(bk.T), key.N));
        b = bb;
        c = bc;
      }
      // Picks are measured on 16-byte-aligned bf16 operands (bench/gemm_bench); others, and block-FP8
      // GEMMs, keep the first.
      const bool aligned = bk.align_x == 16 && bk.align_w == 16 && bk.align_out == 16 && !bk.fp8;
      const auto pick = aligned ? picks.find({bk.T, bk.N, bk.K, bk.out_type, bk.accumulate}) : picks.end();
      const int want = pick == picks.end() ? 0 : pick->second;
      cublasLtMatmulHeuristicResult_t r[kMaxGemmCandidates]{};
      const int found = heuristic(p.op, p.a, b, c, bk, want + 1, r);
      if (found < 1) return std::nullopt;
      const int index = want < found ? want : 0;  // a candidate the heuristic does not list: its first
      it = bucket_algos.emplace(bk, BucketAlgo{r[index].algo, index}).first;
    }
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(handle, p.op, p.a, p.b, p.c, p.c, &it->second.algo, &check) != CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > workspace_bytes)
      return std::nullopt;
    return it->second;
  }

  /// The fastest of `results` for this call (median of 3 after a warm-up, events on `stream`).
  /// An accumulating call is timed into a scratch output so that its residual is kept.
  int fastest(const Plan& p, const cublasLtMatmulHeuristicResult_t* results, int n, const void* x, const void* w,
              void* out, size_t out_bytes, bool accumulate, cudaStream_t stream) {
    struct Scratch {  // released on every path, a throwing check included
      void* dst = nullptr;
      cudaEvent_t e0 = nullptr, e1 = nullptr;
      ~Scratch() {
        if (e0) cudaEventDestroy(e0);
        if (e1) cudaEventDestroy(e1);
        if (dst) cudaFree(dst);
      }
    } sc;
    if (accumulate) CUDA_CHECK(cudaMalloc(&sc.dst, out_bytes));
    void* dst = accumulate ? sc.dst : out;
    CUDA_CHECK(cudaEventCreate(&sc.e0));
    CUDA_CHECK(cudaEventCreate(&sc.e1));
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    int best = -1;
    float best_ms = 0.0f;
    for (int i = 0; i < n; ++i) {
      auto run = [&] {
        return cublasLtMatmul(handle, p.op, &alpha, w, p.a, x, p.b, &beta, dst, p.c, dst, p.c, &results[i].algo,
                              workspace, workspace_bytes, stream);
      };
      if (run() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that cannot run here is skipped
      std::array<float, 3> ms{};
      for (float& m : ms) {
        CUDA_CHECK(cudaEventRecord(sc.e0, stream));
        CUBLAS_CHECK(run());
        CUDA_CHECK(cudaEventRecord(sc.e1, stream));
        CUDA_CHECK(cudaEventSynchronize(sc.e1));
        CUDA_CHECK(cudaEventElapsedTime(&m, sc.e0, sc.e1));
      }
      std::sort(ms.begin(), ms.end());
      if (best < 0 || ms[1] < best_ms) {
        best = i;
        best_ms = ms[1];
      }
    }
    return std::max(best, 0);
  }

  /// The plan of `key` (made and cached on first use); nullptr when cuBLASLt has no algorithm for a
  /// block-FP8 key (a bf16 key without one throws). An FP8 plan's descriptor gets its scale
  /// pointers from the caller (set_scales) before the heuristic and every call.
  const Plan* plan_for(const PlanKey& key, const void* x, const void* w, void* out, cudaStream_t stream,
                       const void* x_scales = nullptr, const void* w_scales = nullptr) {
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.get();
    if (key.fp8 && fp8_refused.count(key)) return nullptr;
    auto p = std::make_unique<Plan>();
    const cudaDataType_t out_dt = key.out_type == static_cast<int>(GemmOut::kF32) ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t in_dt = key.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (key.fp8) {  // w in 128 x 128 blocks, x in 1 x 128 groups (A = w, or A = x when swapped)
      int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      if (key.fp8_x_as_a) std::swap(a_mode, b_mode);
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
      set_scales(*p, key, x_scales, w_scales);
    }
    const auto N = static_cast<uint64_t>(key.N), T = static_cast<uint64_t>(key.T), K = static_cast<uint64_t>(key.K);
    if (key.fp8_x_as_a) {  // A = x col-major [K, T] (op T), B = w col-major [K, N], D col-major [T, N] = outᵀ
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, in_dt, K, T, key.K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, in_dt, K, N, key.K));
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out_dt, T, N, key.T));
    } else {
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, in_dt, K, N, key.K));   // w: col-major [K, N]
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, in_dt, K, T, key.K));   // x: col-major [K, T]
      CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out_dt, N, T, key.N));  // out: col-major [N, T]
    }

    // The row bucket's algorithm, where cuBLASLt takes it for these rows (bf16 only: block-FP8 plans
    // are made for their exact rows, fp8_plan).
    if (tune_candidates <= 1 && !key.fp8) {
      if (const auto algo = bucket_algorithm(key, *p, out_dt)) {
        p->algo = algo->algo;
        p->choice = {algo->index, 0};
        return plans.emplace(key, std::move(p)).first->second.get();
      }
    }
    cublasLtMatmulHeuristicResult_t results[kMaxGemmCandidates]{};
    if (key.fp8) return fp8_plan(key, std::move(p), results);
    const int found = heuristic(p->op, p->a, p->b, p->c, key, std::max(1, tune_candidates), results);
    FDLLM_CHECK(found > 0, ErrorCode::kUnsupported,
                "matmul: cuBLASLt has no algorithm for out[{}, {}] = x[{}, {}]·w[{}, {}]ᵀ ({} output, beta {})", key.T,
                key.N, key.T, key.K, key.N, key.K, out_dt == CUDA_R_32F ? "F32" : "BF16", key.accumulate ? 1 : 0);
    const size_t out_bytes = static_cast<size_t>(key.T * key.N) * (out_dt == CUDA_R_32F ? 4 : 2);
    const int pick = tune_candidates > 1 && found > 1
                         ? fastest(*p, results, found, key.fp8_x_as_a ? w : x, key.fp8_x_as_a ? x : w, out, out_bytes,
                                   key.accumulate, stream)
                         : 0;
    p->algo = results[pick].algo;
    p->choice = {pick, tune_candidates > 1 ? found : 0};
    auto [ins, ok] = plans.emplace(key, std::move(p));
    (void)ok;
    return ins->second.get();
  }

  /// A block-FP8 plan: the heuristic's first algorithm (split-K ones included: the wrong products
  /// that once pointed at split-K came from the weight scales' row stride, kCublasFp8Scales), exact
  /// rows (no bucket), no timing; nullptr (and the key remembered as refused) when there is none.
  const Plan* fp8_plan(const PlanKey& key, std::unique_ptr<Plan> p, cublasLtMatmulHeuristicResult_t* results) {
    const int found = heuristic(p->op, p->a, p->b, p->c, key, 1, results);
    if (found == 0) {
      fp8_refused.emplace(key, true);
      return nullptr;
    }
    p->algo = results[0].algo;
    p->choice = {0, 0};
    return plans.emplace(key, std::move(p)).first->second.get();
  }

  /// An FP8 plan's scale pointers (the weight's on A and the activations' on B, or swapped with
  /// key.fp8_x_as_a), set before each call.
  static void set_scales(const Plan& p, const PlanKey& key, const void* x_scales, const void* w_scales) {
    const void* a = key.fp8_x_as_a ? x_scales : w_scales;
    const void* b = key.fp8_x_as_a ? w_scales : x_scales;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a, sizeof(a)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b, sizeof(b)));
  }
};

GemmLt::GemmLt(size_t workspace_bytes, int tune_candidates, GemmBuckets buckets) : impl_(std::make_unique<Impl>()) {
  FDLLM_CHECK_ARG(tune_candidates >= 0 && tune_candidates <= 16, "matmul: tune_candidates must be in [0, 16], got {}",
                  tune_candidates);
  impl_->tune_candidates = tune_candidates;
  impl_->buckets = buckets;
  CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  if (workspace_bytes > 0) {
    const cudaError_t err = cudaMalloc(&impl_->workspace, workspace_bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      cublasLtDestroy(impl_->handle);
      FDLLM_FAIL(ErrorCode::kOutOfMemory, "matmul: cannot allocate the {} MiB cuBLASLt workspace: {}",
                 workspace_bytes >> 20, cudaGetErrorString(err));
    }
  }
  impl_->workspace_bytes = workspace_bytes;
}

GemmLt::~GemmLt() {
  impl_->plans.clear();
  if (impl_->workspace) cudaFree(impl_->workspace);
  if (impl_->handle) cublasLtDestroy(impl_->handle);
}

size_t GemmLt::cached_plans() const noexcept { return impl_->plans.size(); }
size_t GemmLt::heuristic_queries() const noexcept { return impl_->heuristic_queries; }
GemmLt::Choice GemmLt::last_choice() const noexcept { return impl_->last; }

int64_t GemmLt::library_version() noexcept { return static_cast<int64_t>(cublasLtGetVersion()); }

void GemmLt::set_picks(const std::vector<GemmPick>& picks) {
  std::map<Impl::PickKey, int> table;
  for (const GemmPick& p : picks) {
    FDLLM_CHECK_ARG(p.rows > 0 && p.N > 0 && p.K > 0, "matmul picks: sizes must be positive, got rows {} N {} K {}",
                    p.rows, p.N, p.K);
    FDLLM_CHECK_ARG(gemm_bucket_rows(p.rows, impl_->buckets) == p.rows,
                    "matmul picks: rows {} is not a row count of this GemmLt's buckets (N {}, K {})", p.rows, p.N, p.K);
    FDLLM_CHECK_ARG(p.candidate >= 0 && p.candidate < kMaxGemmCandidates,
                    "matmul picks: candidate {} is outside [0, {}) (rows {}, N {}, K {})", p.candidate,
                    kMaxGemmCandidates, p.rows, p.N, p.K);
    const bool added =
        table.emplace(Impl::PickKey{p.rows, p.N, p.K, static_cast<int>(p.out), p.accumulate}, p.candidate).second;
    FDLLM_CHECK_ARG(added, "matmul picks: two picks for rows {} N {} K {} ({} output, accumulate {})", p.rows, p.N, p.K,
                    p.out == GemmOut::kF32 ? "F32" : "BF16", p.accumulate);
  }
  impl_->picks = std::move(table);
  impl_->plans.clear();
  impl_->bucket_algos.clear();
  impl_->fp8_refused.clear();
}

void GemmLt::matmul(const __nv_bfloat16* x, const __nv_bfloat16* w, void* out, GemmOut out_type, int64_t T, int64_t N,
                    int64_t K, bool accumulate, cudaStream_t stream) {
  FDLLM_CHECK_ARG(T >= 0 && N > 0 && K > 0, "matmul: sizes must be positive (T={}, N={}, K={})", T, N, K);
  if (T == 0) return;
  const PlanKey key{T, N, K, static_cast<int>(out_type), accumulate, alignment_of(x), alignment_of(w),
                    alignment_of(out)};
  const Plan& p = *impl_->plan_for(key, x, w, out, stream);  // bf16: throws rather than returning null
  impl_->last = p.choice;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(impl_->handle, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &p.algo,
                              impl_->workspace, impl_->workspace_bytes, stream));
}

bool GemmLt::matmul_fp8(const uint8_t* xq, const float* x_scales, const uint8_t* w, const float* w_scales, void* out,
                        GemmOut out_type, int64_t T, int64_t N, int64_t K, bool accumulate, cudaStream_t stream,
                        Fp8Roles roles) {
  FDLLM_CHECK_ARG(T >= 0 && N > 0 && K > 0, "matmul_fp8: sizes must be positive (T={}, N={}, K={})", T, N, K);
  FDLLM_CHECK_ARG(T % 16 == 0, "matmul_fp8: T={} rows is not a multiple of 16 (pad with fp8_padded_rows)", T);
  if (T == 0) return true;
  PlanKey key{T, N, K, static_cast<int>(out_type), accumulate, alignment_of(xq), alignment_of(w), alignment_of(out)};
  key.fp8 = true;
  key.fp8_x_as_a = roles == Fp8Roles::kActivationsAsA;
  const Plan* p = impl_->plan_for(key, xq, w, out, stream, x_scales, w_scales);
  if (p == nullptr) return false;
  Impl::set_scales(*p, key, x_scales, w_scales);
  impl_->last = p->choice;
  const void* a = key.fp8_x_as_a ? static_cast<const void*>(xq) : static_cast<const void*>(w);
  const void* b = key.fp8_x_as_a ? static_cast<const void*>(w) : static_cast<const void*>(xq);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(impl_->handle, p->op, &alpha, a, p->a, b, p->b, &beta, out, p->c, out, p->c, &p->algo,
                              impl_->workspace, impl_->workspace_bytes, stream));
  return true;
}

}  // namespace flashdllm::kernels
