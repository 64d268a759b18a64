// Block-FP8 linear layers on CUDA (issue 48) against the CPU oracle (cpu_fp8.cpp, core/fp8.h):
// Backend::matmul_fp8 on both routes (cuBLASLt's block-scaled FP8 GEMM where the GPU has it, the
// default there, and the dequantising route every other GPU runs, BackendOptions::fp8_dequantize),
// qkv_rope_store with an FP8 wqkv, the device quantiser bit for bit against core/fp8.cpp, and the
// probe that establishes which scale layouts cuBLASLt reads (kernels::kCublasFp8Scales).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/fp8.h"
#include "kernels/cuda_twin.h"

#if FLASHDLLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/fp8.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/swiglu.h"
#endif

namespace flashdllm {
namespace {

using twin::close;
using twin::Dev;
using twin::get;
using twin::make;
using twin::put;

/// A block-FP8 weight [N, K] made from N(0, 0.05²) values whose 128 x 128 blocks differ in scale
/// (block (i, j) x (1 + i + 2j)), quantised on the host as the loader does.
struct Fp8Weight {
  int64_t N, K;
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

Fp8Weight make_fp8_weight(int64_t N, int64_t K, uint64_t seed) {
  std::vector<float> w = twin::randn_bf16(static_cast<size_t>(N * K), seed, 0.05f);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c)
      w[static_cast<size_t>(r * K + c)] *= static_cast<float>(1 + r / kFp8Block + 2 * (c / kFp8Block));
  Fp8Weight f{N, K, std::vector<uint8_t>(w.size()),
              std::vector<float>(static_cast<size_t>(fp8_blocks(N) * fp8_blocks(K)))};
  quantize_fp8_blocks(w.data(), N, K, f.q.data(), f.scale.data());
  return f;
}

/// x [T, K] ~ N(0, 1) in bf16 with one large value per row and 128-group (the group scales differ).
std::vector<float> make_x(int64_t T, int64_t K, uint64_t seed) {
  std::vector<float> x = twin::randn_bf16(static_cast<size_t>(T * K), seed);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c0 = 0; c0 < K; c0 += kFp8Block) {
      const int64_t c = c0 + (t * 7 + c0 / kFp8Block * 3) % std::min<int64_t>(kFp8Block, K - c0);
      x[static_cast<size_t>(t * K + c)] = bf16_to_f32(f32_to_bf16(static_cast<float>(4 + (t + c0) % 29)));
    }
  return x;
}

struct Fp8Dev {
  Dev w, scale;
};

Fp8Dev upload(Backend& be, const Fp8Weight& f) {
  Fp8Dev d{make(be, DType::kF8E4M3, f.N, f.K), make(be, DType::kF32, fp8_blocks(f.N), fp8_blocks(f.K))};
  be.upload_weight(d.w.t, DType::kF8E4M3, f.q.data());
  be.upload_weight(d.scale.t, DType::kF32, f.scale.data());
  return d;
}

class CudaFp8 : public twin::TwinTest {};

// Both routes, bf16 and f32 outputs, with and without accumulation, on shapes of the 8B model's
// layers and partial edge blocks (N = 200, K = 200: cuBLASLt refuses a K that is not a multiple of
// 16, so the dequantising route serves it on Hopper too), padded rows (T = 1, 5, 7, 9, 3) and K block
// counts that are not multiples of 4 (256, 320, 640: the weight scales' padded row stride).
TEST_F(CudaFp8, MatmulMatchesCpuOnBothRoutes) {
  struct Case {
    int64_t T, N, K;
  };
  const std::vector<Case> cases{{1, 256, 256},   {7, 384, 512}, {37, 4096, 4096}, {130, 1024, 4096},
                                {5, 256, 12288}, {9, 200, 320}, {3, 136, 200},    {16, 256, 640}};
  BackendOptions dq;  // the dequantising route (the default on sm_90 is the FP8 GEMM)
  dq.fp8_dequantize = true;
  std::unique_ptr<Backend> dequant = is_cuda_ ? cuda_with(dq) : make_cpu_backend(0);
  for (Backend* be : {twin_.get(), dequant.get()}) {
    const std::string route = be == twin_.get() ? "default route (FP8 GEMM on sm_90)" : "dequantising route";
    for (const Case& c : cases) {
      const Fp8Weight f = make_fp8_weight(c.N, c.K, 11 + c.N + c.K);
      const std::vector<float> x = make_x(c.T, c.K, 5 + c.T);
      const std::vector<float> o0 = twin::randn_bf16(static_cast<size_t>(c.T * c.N), 13 + c.T);
      const Fp8Dev wc = upload(*cpu_, f), wt = upload(*be, f);
      Dev xc = make(*cpu_, cpu_act(), c.T, c.K), xt = make(*be, be->activation_dtype(), c.T, c.K);
      put(*cpu_, xc.t, x);
      put(*be, xt.t, x);
      for (DType out_dt : {be->activation_dtype(), DType::kF32}) {
        for (bool acc : {false, true}) {
          SCOPED_TRACE(route + " T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                       " out " + dtype_name(out_dt) + (acc ? " accumulate" : ""));
          Dev oc = make(*cpu_, DType::kF32, c.T, c.N), ot = make(*be, out_dt, c.T, c.N);
          if (acc) {
            put(*cpu_, oc.t, o0);
            put(*be, ot.t, o0);
          } else {
            twin::poison(*be, ot.t);  // beta = 0 must not read the NaNs
          }
          cpu_->matmul_fp8(xc.t, wc.w.t, wc.scale.t, oc.t, acc);
          be->matmul_fp8(xt.t, wt.w.t, wt.scale.t, ot.t, acc);
          // The bf16 bound: bf16 out, or f32 out from the dequantising route's bf16 operands (e4m3 · scale
          // rounded to bf16: 2.6e-3 measured at K = 4096 on an H100).
          const double tol = is_cuda_ ? test::kBf16OpRelTol : 0.0;
          EXPECT_TRUE(close("matmul_fp8", get(*be, ot.t), get(*cpu_, oc.t), c.N, tol));
        }
      }
    }
  }
}

// swiglu_matmul_fp8 (the SwiGLU-fused input quantisation on the FP8-GEMM route) against swiglu then
// matmul_fp8 on the same backend, both routes: the quantised bytes are the same (the kernel test
// above), so only the GEMM's fp32 summation order may differ. F = 1040 (16-byte route, padded rows
// at T = 37), F = 1024 at T = 64 (no padding, accumulate), F = 200 (cuBLASLt refuses K % 16 != 0:
// the unfused fallback).
TEST_F(CudaFp8, SwigluMatmulIsSwigluThenMatmul) {
  struct Case {
    int64_t T, N, F;
  };
  BackendOptions dq;
  dq.fp8_dequantize = true;
  std::unique_ptr<Backend> dequant = is_cuda_ ? cuda_with(dq) : make_cpu_backend(0);
  for (Backend* be : {twin_.get(), dequant.get()}) {
    const std::string route = be == twin_.get() ? "default route" : "dequantising route";
    for (const Case& c : {Case{37, 256, 1040}, Case{64, 384, 1024}, Case{3, 136, 200}}) {
      const Fp8Weight f = make_fp8_weight(c.N, c.F, 41 + c.F);
      const std::vector<float> gu = twin::randn_bf16(static_cast<size_t>(c.T * 2 * c.F), 43 + c.T, 2.0f);
      const std::vector<float> o0 = twin::randn_bf16(static_cast<size_t>(c.T * c.N), 47 + c.T);
      const Fp8Dev w = upload(*be, f);
      const DType act_dt = be->activation_dtype();
      Dev g = make(*be, act_dt, c.T, 2 * c.F), act = make(*be, act_dt, c.T, c.F), act2 = make(*be, act_dt, c.T, c.F);
      put(*be, g.t, gu);
      for (bool acc : {false, true}) {
        SCOPED_TRACE(route + " T=" + std::to_string(c.T) + " F=" + std::to_string(c.F) + (acc ? " accumulate" : ""));
        Dev fused = make(*be, act_dt, c.T, c.N), plain = make(*be, act_dt, c.T, c.N);
        put(*be, fused.t, o0);
        put(*be, plain.t, o0);
        be->swiglu_matmul_fp8(g.t, act.t, w.w.t, w.scale.t, fused.t, acc);
        be->swiglu(g.t, act2.t);
        be->matmul_fp8(act2.t, w.w.t, w.scale.t, plain.t, acc);
        // Two fp32 sums of the same products, each rounded to bf16 once: at most one bf16 step apart
        // (2^-7 of a value's magnitude, at most max|ref|).
        const double tol = act_dt == DType::kBF16 ? 1.0 / 128 + test::kFp32OpRelTol : test::kFp32OpRelTol;
        EXPECT_TRUE(close("swiglu_matmul_fp8", get(*be, fused.t), get(*be, plain.t), c.N, tol));
      }
    }
  }
}

TEST_F(CudaFp8, MatmulValidatesOperands) {
  const Fp8Weight f = make_fp8_weight(256, 256, 3);
  const Fp8Dev w = upload(*twin_, f);
  Dev x = make(*twin_, twin_act(), 4, 256), o = make(*twin_, twin_act(), 4, 256);
  Dev bad_scale = make(*twin_, DType::kF32, 1, 2);
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->matmul_fp8(x.t, w.w.t, bad_scale.t, o.t, false); }, ErrorCode::kInvalidArgument, "w_scale"));
  Dev x2 = make(*twin_, twin_act(), 4, 128);
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->matmul_fp8(x2.t, w.w.t, w.scale.t, o.t, false); }, ErrorCode::kInvalidArgument,
      "inner dimensions"));
  Dev wb = make(*twin_, twin_->weight_dtype(), 256, 256);
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->matmul_fp8(x.t, wb.t, w.scale.t, o.t, false); }, ErrorCode::kInvalidArgument, "'w'"));
}

// The FP8 projection inside qkv_rope_store (GQA 4:2 heads, head_dim 64, q|k|v rows 512) on both
// routes: q and the stored K/V rows against the CPU's.
TEST_F(CudaFp8, QkvRopeStoreWithFp8Weights) {
  const int H = 4, Hkv = 2, Dh = 64;
  const int64_t T = 9, D = 256, W = (H + 2 * Hkv) * Dh, rows = 16, P = 64;
  const Fp8Weight f = make_fp8_weight(W, D, 21);
  const std::vector<float> x = make_x(T, D, 22);
  std::vector<int32_t> pos(static_cast<size_t>(T)), dst(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    pos[static_cast<size_t>(t)] = static_cast<int32_t>(3 * t + 1),
    dst[static_cast<size_t>(t)] = static_cast<int32_t>(rows - 1 - t);
  std::vector<float> cosv(static_cast<size_t>(P * Dh / 2)), sinv(cosv.size());
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < Dh / 2; ++i) {
      const double a = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(i) / Dh);
      cosv[static_cast<size_t>(p * Dh / 2 + i)] = static_cast<float>(std::cos(a));
      sinv[static_cast<size_t>(p * Dh / 2 + i)] = static_cast<float>(std::sin(a));
    }
  struct Side {
    Fp8Dev w;
    Dev x, pos, dst, cos, sin, q, k, v, scratch;
  };
  auto setup = [&](Backend& be) {
    Side s{upload(be, f),
           make(be, be.activation_dtype(), T, D),
           make(be, DType::kI32, T),
           make(be, DType::kI32, T),
           make(be, DType::kF32, P, Dh / 2),
           make(be, DType::kF32, P, Dh / 2),
           make(be, be.activation_dtype(), T, H * Dh),
           make(be, be.activation_dtype(), rows, Hkv * Dh),
           make(be, be.activation_dtype(), rows, Hkv * Dh),
           make(be, be.activation_dtype(), T, W)};
    put(be, s.x.t, x);
    twin::put_i32(be, s.pos.t, pos);
    twin::put_i32(be, s.dst.t, dst);
    put(be, s.cos.t, cosv);
    put(be, s.sin.t, sinv);
    be.fill_zero(s.k.t);
    be.fill_zero(s.v.t);
    return s;
  };
  auto run = [&](Backend& be, Side& s) {
    QkvExtras extra;
    extra.weight_scale = s.w.scale.t;
    be.qkv_rope_store(s.x.t, s.w.w.t, extra, s.pos.t, s.dst.t, RopeTable{s.cos.t, s.sin.t}, H, s.q.t, s.k.t, s.v.t,
                      s.scratch.t);
  };
  Side c = setup(*cpu_);
  run(*cpu_, c);
  BackendOptions dq;  // the dequantising route (the default on sm_90 is the FP8 GEMM)
  dq.fp8_dequantize = true;
  std::unique_ptr<Backend> dequant = is_cuda_ ? cuda_with(dq) : make_cpu_backend(0);
  for (Backend* be : {twin_.get(), dequant.get()}) {
    SCOPED_TRACE(be == twin_.get() ? "default route (FP8 GEMM on sm_90)" : "dequantising route");
    Side s = setup(*be);
    run(*be, s);
    const double tol = is_cuda_ ? test::kBf16OpRelTol : 0.0;
    EXPECT_TRUE(close("q", get(*be, s.q.t), get(*cpu_, c.q.t), H * Dh, tol));
    EXPECT_TRUE(close("k store", get(*be, s.k.t), get(*cpu_, c.k.t), Hkv * Dh, tol));
    EXPECT_TRUE(close("v store", get(*be, s.v.t), get(*cpu_, c.v.t), Hkv * Dh, tol));
  }
}

#if FLASHDLLM_HAVE_CUDA

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

/// Device buffers freed at scope end.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes > 0 ? bytes : 1), cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

bool gpu_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  convert_f32_to_bf16(v.data(), b.data(), v.size());
  return b;
}

/// The CPU's bytes and scales of x [T, K] quantised per token and 1 x 128 group (core/fp8.h:
/// fp8_scale_of, fp8_act_multiplier, fp8_act_encode; a non-finite group NaN / 0x7F), scales row-major.
struct HostQuant {
  std::vector<uint8_t> q;
  std::vector<float> s;
};
HostQuant host_quantise(const std::vector<float>& x, int64_t T, int64_t K) {
  const int64_t G = fp8_blocks(K);
  HostQuant h{std::vector<uint8_t>(static_cast<size_t>(T * K)), std::vector<float>(static_cast<size_t>(T * G))};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t c0 = g * kFp8Block, c1 = std::min(K, c0 + kFp8Block);
      float amax = 0.0f;
      bool finite = true;
      for (int64_t c = c0; c < c1; ++c) {
        finite = finite && std::isfinite(x[static_cast<size_t>(t * K + c)]);
        amax = std::max(amax, std::fabs(x[static_cast<size_t>(t * K + c)]));
      }
      const float s = fp8_scale_of(amax), r = fp8_act_multiplier(amax);
      h.s[static_cast<size_t>(t * G + g)] = finite ? s : NAN;
      for (int64_t c = c0; c < c1; ++c)
        h.q[static_cast<size_t>(t * K + c)] = finite ? fp8_act_encode(x[static_cast<size_t>(t * K + c)], s, r) : 0x7f;
    }
  return h;
}

/// Counts (and reports the first 5 of) the device's bytes q [T, K] and scales (outer-major with
/// stride ld, or row-major) that differ from `want`'s (NaN scales compare equal).
int count_mismatches(const HostQuant& want, const DevBuf& dq, const DevBuf& ds, int64_t T, int64_t K, bool outer,
                     int64_t ld) {
  const int64_t G = fp8_blocks(K);
  std::vector<uint8_t> q(static_cast<size_t>(T * K));
  std::vector<float> s(static_cast<size_t>(G * std::max(ld, T)));
  EXPECT_EQ(cudaMemcpy(q.data(), dq.p, q.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(s.data(), ds.p, s.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  int bad = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g) {
      const float want_s = want.s[static_cast<size_t>(t * G + g)];
      const float got_s = s[static_cast<size_t>(outer ? g * ld + t : t * G + g)];
      if (!(got_s == want_s || (std::isnan(got_s) && std::isnan(want_s))) && bad++ < 5)
        ADD_FAILURE() << "scale (" << t << ", " << g << "): " << got_s << " vs " << want_s;
    }
  for (size_t i = 0; i < q.size(); ++i)
    if (q[i] != want.q[i] && bad++ < 5)
      ADD_FAILURE() << "q(" << i / K << ", " << i % K << ") = " << int(q[i]) << ", CPU " << int(want.q[i]);
  return bad;
}

// The device quantiser against core/fp8.cpp bit for bit (bytes and scales), both scale layouts and
// both routes (K = 300: the scalar one; K = 520, a multiple of 8 with an odd group count: the
// 16-byte one, a half-warp of its last pair idle), with a partial last group, an all-zero group,
// saturating values, a group so small that 448 / amax overflows (the division fallback) and a
// non-finite group.
TEST(CudaFp8Kernels, GroupQuantisationIsTheCpuOnesBitForBit) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t K : {300, 520}) {
    SCOPED_TRACE("K=" + std::to_string(K));
    const int64_t T = 6, G = fp8_blocks(K);
    std::vector<float> x = twin::randn_bf16(static_cast<size_t>(T * K), 17 + K, 3.0f);
    for (int64_t c = 128; c < 256; ++c) x[static_cast<size_t>(1 * K + c)] = 0.0f;  // row 1, group 1: all zero
    x[static_cast<size_t>(2 * K + 5)] = 1e6f;                                      // row 2: a huge amax
    x[static_cast<size_t>(3 * K + 290)] = INFINITY;                                // row 3, group 2: not finite
    for (int64_t c = 0; c < 128; ++c)  // row 5, group 0: amax ~1e-37, 448 / amax overflows fp32
      x[static_cast<size_t>(5 * K + c)] = 1e-37f * static_cast<float>((c % 7) - 3);
    for (int64_t c = 128; c < 256; ++c)  // row 4, group 1: a bf16 subnormal amax, a subnormal scale
      x[static_cast<size_t>(4 * K + c)] = (c % 5 == 0) ? 1e-40f : 0.0f;
    for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
    ASSERT_EQ(fp8_act_multiplier(3e-37f), 0.0f) << "the overflow case is not exercised";
    const HostQuant want = host_quantise(x, T, K);
    const std::vector<uint16_t> xb = bf16_bits(x);
    DevBuf dx(xb.size() * 2), dq(static_cast<size_t>(T * K)), ds(static_cast<size_t>(G * 8) * sizeof(float)),
        dout(xb.size() * 2);
    CUDA_OK(cudaMemcpy(dx.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    for (bool outer : {false, true}) {
      SCOPED_TRACE(outer ? "outer-major scales (ld 8)" : "row-major scales");
      kernels::quantize_fp8_groups_bf16(dx.as<__nv_bfloat16>(), dq.as<uint8_t>(), ds.as<float>(), T, K,
                                        kernels::Fp8ActScaleLayout{outer, 8}, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(count_mismatches(want, dq, ds, T, K, outer, 8), 0);
    }
    // The dequantising route's activations: bf16(e4m3 · s) = bf16 of the CPU's fake quantisation.
    kernels::fake_quantize_fp8_groups_bf16(dx.as<__nv_bfloat16>(), dout.as<__nv_bfloat16>(), T, K, nullptr);
    std::vector<uint16_t> ob(xb.size());
    CUDA_OK(cudaMemcpy(ob.data(), dout.p, ob.size() * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> ref(static_cast<size_t>(K));
      fake_quantize_fp8_groups(x.data() + t * K, K, ref.data());
      for (int64_t c = 0; c < K; ++c) {
        const uint16_t want_b = f32_to_bf16(ref[static_cast<size_t>(c)]), got = ob[static_cast<size_t>(t * K + c)];
        const bool both_nan = std::isnan(ref[static_cast<size_t>(c)]) && std::isnan(bf16_to_f32(got));
        if (got != want_b && !both_nan && bad++ < 5)
          ADD_FAILURE() << "fake quant (" << t << ", " << c << "): " << bf16_to_f32(got) << " vs "
                        << ref[static_cast<size_t>(c)];
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// The SwiGLU-fused quantiser (the down projection's input) against the CPU quantisation of what
// swiglu_bf16 writes, bit for bit: F = 1040 (16-byte route, 9 groups, the last partial), F = 300
// (swiglu_bf16 into act, then the scalar route), and a gate_up that is not 16-byte aligned (same).
TEST(CudaFp8Kernels, SwigluQuantisationIsTheUnfusedOnesBitForBit) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  struct Case {
    int64_t F;
    bool misaligned;
  };
  for (const Case& c : {Case{1040, false}, Case{300, false}, Case{1040, true}}) {
    SCOPED_TRACE("F=" + std::to_string(c.F) + (c.misaligned ? " misaligned gate_up" : ""));
    const int64_t T = 5, F = c.F, G = fp8_blocks(F), off = c.misaligned ? 1 : 0;
    std::vector<float> gu = twin::randn_bf16(static_cast<size_t>(T * 2 * F), 29 + F, 2.5f);
    gu[static_cast<size_t>(1 * 2 * F + 3)] = 60.0f;  // a large gate: silu ~ gate
    const std::vector<uint16_t> gub = bf16_bits(gu);
    DevBuf dgu((gub.size() + 8) * 2), dact(static_cast<size_t>(T * F) * 2), dref(static_cast<size_t>(T * F) * 2),
        dq(static_cast<size_t>(T * F)), ds(static_cast<size_t>(G * 8) * sizeof(float));
    auto* gate_up = dgu.as<__nv_bfloat16>() + off;
    CUDA_OK(cudaMemcpy(gate_up, gub.data(), gub.size() * 2, cudaMemcpyHostToDevice));
    kernels::swiglu_bf16(gate_up, T, F, dref.as<__nv_bfloat16>(), nullptr);
    kernels::swiglu_quantize_fp8_groups_bf16(gate_up, T, F, dact.as<__nv_bfloat16>(), dq.as<uint8_t>(), ds.as<float>(),
                                             kernels::Fp8ActScaleLayout{true, 8}, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> act_bits(static_cast<size_t>(T * F));
    CUDA_OK(cudaMemcpy(act_bits.data(), dref.p, act_bits.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> act(act_bits.size());
    for (size_t i = 0; i < act.size(); ++i) act[i] = bf16_to_f32(act_bits[i]);
    EXPECT_EQ(count_mismatches(host_quantise(act, T, F), dq, ds, T, F, true, 8), 0);
  }
}

// Which operand roles and block-scale layouts cuBLASLt's block-scaled FP8 GEMM takes: both roles
// (Fp8Roles) and every candidate of kernels::Fp8ScaleLayouts are tried, bf16 out, on a shape whose
// block grid is not square (N = 384, K = 512) and whose token count is not a multiple of 4 (T = 37),
// with scales that differ per block and group; what cuBLASLt refuses and what reproduces the CPU
// oracle is printed ([probe] lines), and kCublasFp8Scales must be among the matches. A wrong layout
// scales whole blocks by the wrong factor (1 to 8 here): errors of order 1, far above the bf16 bound.
/// The oracle of a block-FP8 product: the CPU backend's formula (dequantised weight, fake-quantised
/// activations, fp64 sums), [T, N].
std::vector<float> oracle_product(const Fp8Weight& f, const std::vector<float>& x, int64_t T, int64_t N, int64_t K) {
  std::vector<float> wd(static_cast<size_t>(N * K)), xq(static_cast<size_t>(T * K));
  dequantize_fp8_blocks(f.q.data(), f.scale.data(), N, K, wd.data());
  for (int64_t t = 0; t < T; ++t) fake_quantize_fp8_groups(x.data() + t * K, K, xq.data() + t * K);
  std::vector<float> ref(static_cast<size_t>(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(xq[static_cast<size_t>(t * K + k)]) * wd[static_cast<size_t>(n * K + k)];
      ref[static_cast<size_t>(t * N + n)] = static_cast<float>(acc);
    }
  return ref;
}

TEST(CudaFp8Kernels, ScaleLayoutProbe) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const int64_t T = 48, N = 384, K = 512, nb = fp8_blocks(N), kb = fp8_blocks(K);  // T: fp8_padded_rows
  const Fp8Weight f = make_fp8_weight(N, K, 31);
  const std::vector<float> x = make_x(T, K, 32);
  const std::vector<float> ref = oracle_product(f, x, T, N, K);
  const std::vector<uint16_t> xb = bf16_bits(x);
  std::vector<float> wst(static_cast<size_t>(nb * kb));
  for (int64_t i = 0; i < nb; ++i)
    for (int64_t j = 0; j < kb; ++j) wst[static_cast<size_t>(j * nb + i)] = f.scale[static_cast<size_t>(i * kb + j)];
  DevBuf dx(xb.size() * 2), dxq(static_cast<size_t>(T * K)), dxs(static_cast<size_t>(kb * 40) * sizeof(float)),
      dw(f.q.size()), dws(f.scale.size() * sizeof(float)), dwst(wst.size() * sizeof(float)),
      dout(static_cast<size_t>(T * N) * sizeof(float));
  CUDA_OK(cudaMemcpy(dx.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dw.p, f.q.data(), f.q.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dws.p, f.scale.data(), f.scale.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dwst.p, wst.data(), wst.size() * sizeof(float), cudaMemcpyHostToDevice));
  kernels::GemmLt gemm;
  bool production_matches = false, any_ran = false;
  int matches = 0;
  for (kernels::Fp8Roles roles : {kernels::Fp8Roles::kWeightAsA, kernels::Fp8Roles::kActivationsAsA}) {
    const bool x_as_a = roles == kernels::Fp8Roles::kActivationsAsA;
    for (bool wt : {false, true})
      for (const auto& [outer, align] : {std::pair{false, 1}, std::pair{true, 1}, std::pair{true, 4}}) {
        const kernels::Fp8ScaleLayouts l{wt, outer, align, roles};
        const int64_t ld = (T + l.act_ld_align - 1) / l.act_ld_align * l.act_ld_align;
        kernels::quantize_fp8_groups_bf16(dx.as<__nv_bfloat16>(), dxq.as<uint8_t>(), dxs.as<float>(), T, K,
                                          kernels::Fp8ActScaleLayout{l.act_outer_major, ld}, nullptr);
        const float* ws = l.weight_transposed ? dwst.as<float>() : dws.as<float>();
        const bool ran = gemm.matmul_fp8(dxq.as<uint8_t>(), dxs.as<float>(), dw.as<uint8_t>(), ws, dout.p,
                                         kernels::GemmOut::kBF16, T, N, K, false, nullptr, roles);
        if (!ran) {
          std::printf("[probe] roles %s: cuBLASLt has no algorithm (bf16 out)\n", x_as_a ? "x as A" : "w as A");
          break;
        }
        any_ran = true;
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<uint16_t> gb(ref.size());
        CUDA_OK(cudaMemcpy(gb.data(), dout.p, gb.size() * 2, cudaMemcpyDeviceToHost));
        std::vector<float> got(ref.size());
        for (int64_t t = 0; t < T; ++t)  // x as A writes outᵀ [N, T]
          for (int64_t n = 0; n < N; ++n)
            got[static_cast<size_t>(t * N + n)] = bf16_to_f32(gb[static_cast<size_t>(x_as_a ? n * T + t : t * N + n)]);
        const double err = test::rel_max_err(got, ref);
        const bool ok = err <= test::kBf16OpRelTol;
        std::printf("[probe] roles %s, weight scales %s, activation scales %s (ld align %d): rel max err %.3g %s\n",
                    x_as_a ? "x as A" : "w as A", wt ? "transposed" : "as stored", outer ? "outer-major" : "k-major",
                    align, err, ok ? "MATCH" : "");
        matches += ok ? 1 : 0;
        const kernels::Fp8ScaleLayouts& P = kernels::kCublasFp8Scales;
        if (wt == P.weight_transposed && outer == P.act_outer_major && align == P.act_ld_align && roles == P.roles)
          production_matches = ok;
      }
    // f32 out: reported only (the twins above check both outputs through the backend)
    const bool f32 = gemm.matmul_fp8(dxq.as<uint8_t>(), dxs.as<float>(), dw.as<uint8_t>(), dws.as<float>(), dout.p,
                                     kernels::GemmOut::kF32, T, N, K, false, nullptr, roles);
    std::printf("[probe] roles %s: f32 out %s\n", x_as_a ? "x as A" : "w as A", f32 ? "has an algorithm" : "refused");
  }
  if (!any_ran) GTEST_SKIP() << "cuBLASLt has no block-scaled FP8 GEMM on this GPU (the dequantising route serves it)";
  EXPECT_GT(matches, 0) << "no candidate layout reproduces the oracle";
  EXPECT_TRUE(production_matches) << "kernels::kCublasFp8Scales is not what cuBLASLt reads (see the [probe] lines)";
}

// The weight scales' row stride cuBLASLt reads, at ceil(K/128) = 3 (where the stored stride 3 and
// the stride rounded up to 4 differ; the layout probe above, at 4 blocks, cannot tell them apart):
// kCublasFp8Scales.weight_ld_align must be the one that reproduces the oracle.
TEST(CudaFp8Kernels, WeightScaleStrideProbe) {
  if (!gpu_present()) GTEST_SKIP() << "no CUDA device";
  const int64_t T = 16, N = 256, K = 384, nb = fp8_blocks(N), kb = fp8_blocks(K);
  const Fp8Weight f = make_fp8_weight(N, K, 41);
  const std::vector<float> x = make_x(T, K, 42);
  const std::vector<float> ref = oracle_product(f, x, T, N, K);
  const std::vector<uint16_t> xb = bf16_bits(x);
  DevBuf dx(xb.size() * 2), dxq(static_cast<size_t>(T * K)), dxs(static_cast<size_t>(kb * T) * sizeof(float)),
      dw(f.q.size()), dws(static_cast<size_t>(nb * 4) * sizeof(float)), dout(static_cast<size_t>(T * N) * 2);
  CUDA_OK(cudaMemcpy(dx.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dw.p, f.q.data(), f.q.size(), cudaMemcpyHostToDevice));
  const kernels::Fp8ScaleLayouts& P = kernels::kCublasFp8Scales;
  kernels::quantize_fp8_groups_bf16(dx.as<__nv_bfloat16>(), dxq.as<uint8_t>(), dxs.as<float>(), T, K,
                                    kernels::Fp8ActScaleLayout{P.act_outer_major, T}, nullptr);
  kernels::GemmLt gemm;
  bool production_matches = false;
  for (int align : {1, 4}) {
    const int64_t ld = (kb + align - 1) / align * align;
    std::vector<float> padded(static_cast<size_t>(nb * ld), 0.0f);
    for (int64_t i = 0; i < nb; ++i)
      for (int64_t j = 0; j < kb; ++j)
        padded[static_cast<size_t>(i * ld + j)] = f.scale[static_cast<size_t>(i * kb + j)];
    CUDA_OK(cudaMemcpy(dws.p, padded.data(), padded.size() * sizeof(float), cudaMemcpyHostToDevice));
    if (!gemm.matmul_fp8(dxq.as<uint8_t>(), dxs.as<float>(), dw.as<uint8_t>(), dws.as<float>(), dout.p,
                         kernels::GemmOut::kBF16, T, N, K, false, nullptr))
      GTEST_SKIP() << "cuBLASLt has no block-scaled FP8 GEMM on this GPU (the dequantising route serves it)";
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> gb(ref.size());
    CUDA_OK(cudaMemcpy(gb.data(), dout.p, gb.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<float> got(ref.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_f32(gb[i]);
    const double err = test::rel_max_err(got, ref);
    std::printf("[probe] weight scale rows every %lld floats (ceil(K/128) = %lld, align %d): rel max err %.3g %s\n",
                static_cast<long long>(ld), static_cast<long long>(kb), align, err,
                err <= test::kBf16OpRelTol ? "MATCH" : "");
    if (align == P.weight_ld_align) production_matches = err <= test::kBf16OpRelTol;
  }
  EXPECT_TRUE(production_matches) << "kCublasFp8Scales.weight_ld_align is not the stride cuBLASLt reads";
}

#endif  // FLASHDLLM_HAVE_CUDA

}  // namespace
}  // namespace flashdllm
