// kernels::GemmLt directly (CUDA builds with a GPU; skips otherwise): fixed algorithm picks
// (set_picks) against the heuristic's first algorithm and a CPU reference, the pick's fallback, cache
// invalidation, and set_picks' argument checks. The backend-level matmul twins are in test_cuda_ops.
#include <gtest/gtest.h>

#if FLASHDLLM_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "flashdllm/status.h"
#include "kernels/cuda/gemm.h"

namespace flashdllm {
namespace {

using kernels::GemmBuckets;
using kernels::GemmLt;
using kernels::GemmOut;
using kernels::GemmPick;

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

// x [T, K], w [N, K] (bf16 values), out [T, N] bf16 on the device; the reference in fp64.
struct Operands {
  int64_t T, N, K;
  std::vector<float> x, w;
  __nv_bfloat16 *dx = nullptr, *dw = nullptr, *dout = nullptr;
  ~Operands() {
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dout);
  }
};

void make_operands(Operands& o, int64_t T, int64_t N, int64_t K) {
  o.T = T, o.N = N, o.K = K;
  std::mt19937 rng(static_cast<uint32_t>(T * 131 + N));
  std::normal_distribution<float> d(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, size_t n, std::vector<__nv_bfloat16>& b) {
    v.resize(n), b.resize(n);
    for (size_t i = 0; i < n; ++i) {
      b[i] = __float2bfloat16(d(rng));
      v[i] = __bfloat162float(b[i]);
    }
  };
  std::vector<__nv_bfloat16> bx, bw;
  fill(o.x, static_cast<size_t>(T * K), bx);
  fill(o.w, static_cast<size_t>(N * K), bw);
  CUDA_OK(cudaMalloc(&o.dx, bx.size() * 2));
  CUDA_OK(cudaMalloc(&o.dw, bw.size() * 2));
  CUDA_OK(cudaMalloc(&o.dout, static_cast<size_t>(T * N) * 2));
  CUDA_OK(cudaMemcpy(o.dx, bx.data(), bx.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(o.dw, bw.data(), bw.size() * 2, cudaMemcpyHostToDevice));
}

// Runs `g` on the first `T` rows of `o` and returns the output as float.
std::vector<float> run(GemmLt& g, const Operands& o, int64_t T) {
  g.matmul(o.dx, o.dw, o.dout, GemmOut::kBF16, T, o.N, o.K, false, nullptr);
  std::vector<__nv_bfloat16> b(static_cast<size_t>(T * o.N));
  EXPECT_EQ(cudaMemcpy(b.data(), o.dout, b.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = __bfloat162float(b[i]);
  return f;
}

// Largest |got - ref| / (|ref| + 1) over the first T rows against the fp64 reference.
double max_error(const Operands& o, const std::vector<float>& got, int64_t T) {
  double worst = 0.0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < o.N; ++n) {
      double ref = 0.0;
      for (int64_t k = 0; k < o.K; ++k)
        ref += static_cast<double>(o.x[static_cast<size_t>(t * o.K + k)]) * o.w[static_cast<size_t>(n * o.K + k)];
      worst = std::max(worst, std::abs(got[static_cast<size_t>(t * o.N + n)] - ref) / (std::abs(ref) + 1.0));
    }
  return worst;
}

class CudaGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device (built without CUDA or no GPU)";
  }
};

// A pick of candidate 1 serves its bucket (40 rows: T = 33..40 under quarter octaves) when the
// heuristic lists a second algorithm, with results as exact as the first's; every row count of the
// bucket reports the same choice; set_picks forgets the cached plans.
TEST_F(CudaGemm, PickServesItsBucketAndMatchesTheReference) {
  constexpr int64_t N = 384, K = 256;
  Operands o;
  make_operands(o, 40, N, K);
  GemmLt plain, tuner(kernels::kGemmWorkspaceBytes, 2), picked;
  tuner.matmul(o.dx, o.dw, o.dout, GemmOut::kBF16, 40, N, K, false, nullptr);
  const int listed = tuner.last_choice().candidates;  // how many the heuristic lists (up to 2)
  ASSERT_GE(listed, 1);
  const std::vector<float> first = run(plain, o, 40);
  EXPECT_EQ(plain.last_choice().index, 0);
  const size_t queries_before = picked.heuristic_queries();
  run(picked, o, 40);  // planned without picks
  picked.set_picks({{40, N, K, GemmOut::kBF16, false, 1}});
  EXPECT_EQ(picked.cached_plans(), 0u) << "set_picks must forget the cached plans";
  const std::vector<float> with_pick = run(picked, o, 40);
  EXPECT_GT(picked.heuristic_queries(), queries_before + 1) << "the bucket was not queried again";
  const int index = picked.last_choice().index;
  EXPECT_EQ(index, listed >= 2 ? 1 : 0) << "listed " << listed;
  for (int64_t T : {33, 37}) {  // the same bucket: the same choice (where cuBLASLt accepts it)
    run(picked, o, T);
    EXPECT_TRUE(picked.last_choice().index == index || picked.last_choice().index == 0) << "T " << T;
  }
  EXPECT_LT(max_error(o, first, 40), 2e-2);
  EXPECT_LT(max_error(o, with_pick, 40), 2e-2);
  // Another shape, and the same shape with beta 1, are not picked.
  Operands o2;
  make_operands(o2, 40, N + 128, K);
  run(picked, o2, 40);
  EXPECT_EQ(picked.last_choice().index, 0);
}

// A candidate the heuristic does not list falls back to the first; misaligned operands ignore picks.
TEST_F(CudaGemm, UnlistedCandidateAndMisalignedOperandsUseTheFirst) {
  constexpr int64_t N = 64, K = 64;
  Operands o;
  make_operands(o, 16, N, K);
  GemmLt tuner(kernels::kGemmWorkspaceBytes, 16), picked;
  tuner.matmul(o.dx, o.dw, o.dout, GemmOut::kBF16, 16, N, K, false, nullptr);
  const int listed = tuner.last_choice().candidates;
  picked.set_picks({{16, N, K, GemmOut::kBF16, false, 15}});
  const std::vector<float> got = run(picked, o, 16);
  EXPECT_EQ(picked.last_choice().index, listed >= 16 ? 15 : 0) << "listed " << listed;
  EXPECT_LT(max_error(o, got, 16), 2e-2);
  picked.set_picks({{16, N, K, GemmOut::kBF16, false, 1}});
  // x shifted by one element (2 bytes): alignment 2, not 16; the shape (bucket 16, N, K) is picked.
  picked.matmul(o.dx + 1, o.dw, o.dout, GemmOut::kBF16, 8, N, K, false, nullptr);
  EXPECT_EQ(picked.last_choice().index, 0);
}

TEST_F(CudaGemm, SetPicksRejectsBadPicks) {
  GemmLt g;  // quarter-octave buckets
  // true when set_picks throws Error(kInvalidArgument), false when it accepts the picks.
  auto rejects = [&](const std::vector<GemmPick>& picks) {
    try {
      g.set_picks(picks);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      return true;
    }
    return false;
  };
  EXPECT_TRUE(rejects({{600, 64, 64, GemmOut::kBF16, false, 1}}));  // 600 rows: not a bucket's row count
  EXPECT_TRUE(rejects({{640, 64, 64, GemmOut::kBF16, false, 16}}));
  EXPECT_TRUE(rejects({{640, 64, 64, GemmOut::kBF16, false, -1}}));
  EXPECT_TRUE(rejects({{640, 0, 64, GemmOut::kBF16, false, 1}}));
  EXPECT_TRUE(rejects({{640, 64, 64, GemmOut::kBF16, false, 1}, {640, 64, 64, GemmOut::kBF16, false, 2}}));
  EXPECT_FALSE(rejects({{640, 64, 64, GemmOut::kBF16, false, 1}, {640, 64, 64, GemmOut::kBF16, true, 2}}));
  GemmLt pow2(kernels::kGemmWorkspaceBytes, 0, GemmBuckets::kPowerOfTwo);
  EXPECT_THROW(pow2.set_picks({{640, 64, 64, GemmOut::kBF16, false, 1}}), Error);
}

}  // namespace
}  // namespace flashdllm
#endif
