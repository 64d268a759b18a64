// CUDA backend vs CPU backend (the oracle), op by op: memory, upload_weight, embedding, rmsnorm,
// matmul, qkv_rope_store, swiglu, gather_rows, gather_columns, and the validation / device-side error paths.
// Attention is in test_cuda_attention.cpp, cfg_combine / select_tokens in test_cuda_select.cpp.
//
// Every test runs twice: Small/... (tiny shapes; the set compute-sanitizer runs) and Sweep/...
// (odd sizes, sizes off the tile multiples, LLaDA-8B widths). See kernels/cuda_twin.h for the
// harness (poisoning, bf16-rounded inputs, skip without a GPU).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <ostream>
#include <random>

#include "common/test_paths.h"
#include "kernels/cuda_twin.h"

namespace flashdllm {
namespace {

using twin::close;
using twin::Dev;
using twin::get;
using twin::make;
using twin::put;
using twin::put_i32;
using twin::randn_bf16;

enum class Size { kSmall, kSweep };
void PrintTo(Size s, std::ostream* os) { *os << (s == Size::kSmall ? "small" : "sweep"); }
std::string size_name(const ::testing::TestParamInfo<Size>& i) { return i.param == Size::kSmall ? "small" : "sweep"; }

class CudaOps : public twin::TwinTest, public ::testing::WithParamInterface<Size> {
 protected:
  bool small() const { return GetParam() == Size::kSmall; }
};

std::string shape_name(int64_t a, int64_t b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + "]"; }

// ------------------------------------------------------------------------------------- memory

TEST_P(CudaOps, MemoryRoundTripAndFillZero) {
  EXPECT_FALSE(twin_->name().empty());
  EXPECT_GT(twin_->free_memory(), 0u);
  if (is_cuda_) {
    EXPECT_NE(twin_->name().find("cuda"), std::string::npos) << twin_->name();
    EXPECT_EQ(twin_->activation_dtype(), DType::kBF16);
    EXPECT_EQ(twin_->weight_dtype(), DType::kBF16);
  }
  for (int64_t n : small() ? std::vector<int64_t>{1, 37} : std::vector<int64_t>{1, 4099, 1 << 20}) {
    Dev d = make(*twin_, DType::kI32, n);
    std::vector<int32_t> v(static_cast<size_t>(n));
    std::iota(v.begin(), v.end(), -7);
    put_i32(*twin_, d.t, v);
    std::vector<int32_t> back(v.size(), 0);
    twin_->copy_to_host(back.data(), d.t);
    EXPECT_EQ(back, v) << "round trip of " << n << " I32";
    twin_->fill_zero(d.t);
    twin_->copy_to_host(back.data(), d.t);
    EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](int32_t x) { return x == 0; })) << "fill_zero of " << n;
  }
}

// Host copies on the CUDA backend go through pinned staging buffers (up to 4 MiB each; their upload
// buffer is reused only after a synchronisation, 16 MiB at most) or pageable memory
// (BackendOptions::pinned_staging false, larger copies, or a staging buffer still in flight). Many uploads
// between two synchronisations, of sizes around the limit, must each land intact, also when the
// host source is overwritten right after its copy_from_host returns.
TEST_P(CudaOps, UploadsBetweenSynchronisationsLandIntact) {
  const std::vector<int64_t> sizes =
      small() ? std::vector<int64_t>{1, 37, 4096, 70000}
              : std::vector<int64_t>{(4 << 20) / 4, (4 << 20) / 4 + 1, 1 << 20, 3 << 20, 123457, 1, 262144};
  const int rounds = small() ? 3 : 4;  // Sweep: well past the 16 MiB of staging between two syncs
  auto run = [&](Backend& be, const char* mode) {
    std::vector<Dev> devs;
    std::vector<std::vector<int32_t>> want;
    std::vector<int32_t> src;
    for (int r = 0; r < rounds; ++r) {
      for (int64_t n : sizes) {
        devs.push_back(make(be, DType::kI32, n));
        want.emplace_back(static_cast<size_t>(n));
        std::iota(want.back().begin(), want.back().end(), static_cast<int32_t>(1000 * devs.size()));
        src = want.back();
        be.copy_from_host(devs.back().t, src.data());
        std::fill(src.begin(), src.end(), -1);  // the copy must not read the source later
      }
    }
    for (size_t i = 0; i < devs.size(); ++i) {
      std::vector<int32_t> back(want[i].size(), 0);
      be.copy_to_host(back.data(), devs[i].t);
      ASSERT_EQ(back, want[i]) << mode << ": upload " << i << " of " << want[i].size() << " I32";
    }
  };
  run(*twin_, "default");
  if (!is_cuda_) return;
  BackendOptions pageable_options;
  pageable_options.pinned_staging = false;
  auto pageable = cuda_with(pageable_options);
  run(*pageable, "pinned_staging false");
}

// ------------------------------------------------------------------------------ upload_weight

// Expected device contents of a weight uploaded from `src_dtype` bits: the value rounded to the
// twin's weight dtype (RNE), as float.
TEST_P(CudaOps, UploadWeightConvertsF32F16BF16) {
  const DType wt = twin_->weight_dtype();
  // The sweep crosses the 64 MiB staging chunk of the CUDA upload (16M F32 elements).
  const std::vector<int64_t> sizes = small() ? std::vector<int64_t>{1, 1001} : std::vector<int64_t>{7, (1 << 24) + 3};
  for (int64_t n : sizes) {
    std::vector<float> f = randn_bf16(static_cast<size_t>(n), 11 + n, 3.0f);
    // Make the F32 source not bf16-representable, so rounding is exercised.
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> jitter(-0.004f, 0.004f);
    for (float& x : f) x = x * (1.0f + jitter(rng));
    std::vector<uint16_t> h(f.size()), b(f.size());
    for (size_t i = 0; i < f.size(); ++i) {
      h[i] = f32_to_f16(f[i]);
      b[i] = f32_to_bf16(f[i]);
    }
    struct Src {
      DType dt;
      const void* p;
    };
    for (Src s : {Src{DType::kF32, f.data()}, Src{DType::kF16, h.data()}, Src{DType::kBF16, b.data()}}) {
      Dev d = make(*twin_, wt, n);
      twin::poison(*twin_, d.t);
      twin_->upload_weight(d.t, s.dt, s.p);
      const std::vector<float> got = get(*twin_, d.t);
      size_t bad = 0, first_bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        float src = s.dt == DType::kF32 ? f[i] : s.dt == DType::kF16 ? f16_to_f32(h[i]) : bf16_to_f32(b[i]);
        const float want = wt == DType::kBF16 ? bf16_to_f32(f32_to_bf16(src)) : src;
        if (!(got[i] == want)) {
          if (bad++ == 0) first_bad = i;
        }
      }
      EXPECT_EQ(bad, 0u) << "upload_weight from " << dtype_name(s.dt) << ", n=" << n << ": " << bad
                         << " elements differ, first at " << first_bad;
    }
  }
}

// ---------------------------------------------------------------------------------- embedding

TEST_P(CudaOps, EmbeddingGathersExactRows) {
  struct Case {
    int64_t V, D, T;
  };
  const std::vector<Case> cases = small() ? std::vector<Case>{{50, 64, 7}}
                                          : std::vector<Case>{{1024, 256, 1}, {1024, 256, 333}, {126464, 64, 77},
                                                              {8192, 4096, 300}, {1000, 130, 9}};
  for (const Case& c : cases) {
    SCOPED_TRACE("embedding V=" + std::to_string(c.V) + " D=" + std::to_string(c.D) + " T=" + std::to_string(c.T));
    const std::vector<float> table = randn_bf16(static_cast<size_t>(c.V * c.D), 3 + c.V);
    std::vector<int32_t> ids(static_cast<size_t>(c.T));
    std::mt19937 rng(static_cast<uint32_t>(c.T));
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.V));
    ids.front() = 0;
    ids.back() = static_cast<int32_t>(c.V - 1);

    Dev tc = make(*cpu_, cpu_->weight_dtype(), c.V, c.D), ic = make(*cpu_, DType::kI32, c.T),
        oc = make(*cpu_, cpu_act(), c.T, c.D);
    Dev tt = make(*twin_, twin_->weight_dtype(), c.V, c.D), it = make(*twin_, DType::kI32, c.T),
        ot = make(*twin_, twin_act(), c.T, c.D);
    put(*cpu_, tc.t, table);
    put(*twin_, tt.t, table);
    put_i32(*cpu_, ic.t, ids);
    put_i32(*twin_, it.t, ids);
    twin::poison(*twin_, ot.t);
    cpu_->embedding(tc.t, ic.t, oc.t);
    twin_->embedding(tt.t, it.t, ot.t);
    // A gather is exact.
    EXPECT_TRUE(close("embedding", get(*twin_, ot.t), get(*cpu_, oc.t), c.D, 0.0));
  }
}

TEST_P(CudaOps, EmbeddingOutOfRangeIdIsReported) {
  Dev tt = make(*twin_, twin_->weight_dtype(), 10, 32), it = make(*twin_, DType::kI32, 3),
      ot = make(*twin_, twin_act(), 3, 32);
  put(*twin_, tt.t, randn_bf16(320, 5));
  put_i32(*twin_, it.t, {1, 10, 2});  // 10 is outside [0, 10)
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->embedding(tt.t, it.t, ot.t); }, ErrorCode::kInvalidArgument, "embedding"));
  // The error is reported once; the backend keeps working.
  put_i32(*twin_, it.t, {1, 9, 2});
  twin_->embedding(tt.t, it.t, ot.t);
  EXPECT_NO_THROW(twin_->synchronize());
}

// ------------------------------------------------------------------------------------ rmsnorm

TEST_P(CudaOps, RmsnormMatchesCpu) {
  struct Case {
    int64_t T, D;
    bool in_place;
  };
  const std::vector<Case> cases = small() ? std::vector<Case>{{3, 96, false}, {2, 64, true}}
                                          : std::vector<Case>{{1, 4096, false}, {77, 4096, true}, {5, 257, false},
                                                              {300, 256, false}, {3, 1, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE("rmsnorm " + shape_name(c.T, c.D) + (c.in_place ? " in place" : ""));
    const std::vector<float> x = randn_bf16(static_cast<size_t>(c.T * c.D), 100 + c.D, 2.0f);
    std::vector<float> w = randn_bf16(static_cast<size_t>(c.D), 200 + c.D, 0.05f);
    for (float& v : w) v = bf16_to_f32(f32_to_bf16(1.0f + v));
    Dev xc = make(*cpu_, cpu_act(), c.T, c.D), wc = make(*cpu_, cpu_->weight_dtype(), c.D),
        oc = make(*cpu_, cpu_act(), c.T, c.D);
    Dev xt = make(*twin_, twin_act(), c.T, c.D), wt = make(*twin_, twin_->weight_dtype(), c.D),
        ot = make(*twin_, twin_act(), c.T, c.D);
    put(*cpu_, xc.t, x);
    put(*cpu_, wc.t, w);
    put(*twin_, xt.t, x);
    put(*twin_, wt.t, w);
    cpu_->rmsnorm(xc.t, wc.t, 1e-5f, oc.t);
    Tensor out = c.in_place ? xt.t : ot.t;
    if (!c.in_place) twin::poison(*twin_, ot.t);
    twin_->rmsnorm(xt.t, wt.t, 1e-5f, out);
    EXPECT_TRUE(close("rmsnorm", get(*twin_, out), get(*cpu_, oc.t), c.D, test::kBf16OpRelTol));
  }
}

// ------------------------------------------------------------------------------------- matmul

TEST_P(CudaOps, MatmulMatchesCpu) {
  struct Case {
    int64_t T, N, K;
  };
  const std::vector<Case> cases =
      small() ? std::vector<Case>{{3, 40, 64}}
              : std::vector<Case>{{1, 256, 256}, {7, 1000, 256}, {33, 4096, 4096}, {130, 1024, 4096}, {5, 24, 12288},
                                  {65, 1027, 256}};
  for (const Case& c : cases) {
    for (DType out_dt : {twin_act(), DType::kF32}) {
      for (bool acc : {false, true}) {
        SCOPED_TRACE("matmul T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
                     " out " + dtype_name(out_dt) + (acc ? " accumulate" : ""));
        const std::vector<float> x = randn_bf16(static_cast<size_t>(c.T * c.K), 7 + c.K);
        const std::vector<float> w = randn_bf16(static_cast<size_t>(c.N * c.K), 9 + c.N, 0.05f);
        const std::vector<float> o0 = randn_bf16(static_cast<size_t>(c.T * c.N), 13 + c.T);
        Dev xc = make(*cpu_, cpu_act(), c.T, c.K), wc = make(*cpu_, cpu_->weight_dtype(), c.N, c.K),
            oc = make(*cpu_, DType::kF32, c.T, c.N);
        Dev xt = make(*twin_, twin_act(), c.T, c.K), wt = make(*twin_, twin_->weight_dtype(), c.N, c.K),
            ot = make(*twin_, out_dt, c.T, c.N);
        put(*cpu_, xc.t, x);
        put(*cpu_, wc.t, w);
        put(*twin_, xt.t, x);
        put(*twin_, wt.t, w);
        if (acc) {
          put(*cpu_, oc.t, o0);
          put(*twin_, ot.t, o0);
        } else {
          twin::poison(*twin_, ot.t);  // beta = 0 must not read the NaNs
        }
        cpu_->matmul(xc.t, wc.t, oc.t, acc);
        twin_->matmul(xt.t, wt.t, ot.t, acc);
        const double tol = out_dt == DType::kF32 ? twin::kF32GemmRelTol : test::kBf16OpRelTol;
        EXPECT_TRUE(close("matmul", get(*twin_, ot.t), get(*cpu_, oc.t), c.N, is_cuda_ ? tol : 0.0));
      }
    }
  }
}

TEST_P(CudaOps, MatmulValidatesOperands) {
  Dev x = make(*twin_, twin_act(), 4, 32), w = make(*twin_, twin_->weight_dtype(), 8, 31),
      o = make(*twin_, twin_act(), 4, 8);
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->matmul(x.t, w.t, o.t, false); }, ErrorCode::kInvalidArgument, "matmul"));
  if (is_cuda_) {
    // A host tensor handed to a device op is named.
    std::vector<float> host(4 * 32);
    Tensor hx(host.data(), twin_act(), DeviceKind::kCPU, {4, 32});
    Dev w2 = make(*twin_, twin_->weight_dtype(), 8, 32);
    EXPECT_TRUE(twin::throws_error(
        *twin_, [&] { twin_->matmul(hx, w2.t, o.t, false); }, ErrorCode::kInvalidArgument, "'x'"));
    // Wrong dtype is named.
    Dev xf = make(*twin_, DType::kF32, 4, 32);
    EXPECT_TRUE(twin::throws_error(
        *twin_, [&] { twin_->matmul(xf.t, w2.t, o.t, false); }, ErrorCode::kInvalidArgument, "BF16"));
  }
}

// ----------------------------------------------------------------------------- qkv_rope_store

// RoPE tables as upstream: inv_freq_i = 1 / theta^(2i/Dh) in fp32, angle = fp32(p) * inv_freq_i.
void rope_tables(int64_t positions, int64_t head_dim, double theta, std::vector<float>& cos_t,
                 std::vector<float>& sin_t) {
  const int64_t half = head_dim / 2;
  cos_t.resize(static_cast<size_t>(positions * half));
  sin_t.resize(cos_t.size());
  for (int64_t i = 0; i < half; ++i) {
    const float inv = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(head_dim));
    for (int64_t p = 0; p < positions; ++p) {
      const float a = static_cast<float>(p) * inv;
      cos_t[static_cast<size_t>(p * half + i)] = std::cos(a);
      sin_t[static_cast<size_t>(p * half + i)] = std::sin(a);
    }
  }
}

TEST_P(CudaOps, QkvRopeStoreMatchesCpu) {
  struct Case {
    int64_t T, D;
    int H;
    int64_t Dh, N, P;
  };
  const std::vector<Case> cases =
      small() ? std::vector<Case>{{5, 64, 2, 32, 9, 16}, {70, 64, 1, 64, 80, 16}, {9, 64, 2, 20, 30, 16}}
              // Dh/2 = 10: rope_store's scalar path
              : std::vector<Case>{{1, 256, 2, 128, 4, 64},
                                  {37, 256, 2, 128, 100, 4096},
                                  {129, 512, 3, 128, 300, 512},
                                  {65, 4096, 32, 128, 70, 4096},
                                  {17, 256, 4, 64, 40, 128},
                                  // > 512 rows: the fused kernel's automatic 128x256 tiles, one straddling q | k
                                  {1100, 256, 3, 128, 1200, 2048},
                                  // more output tiles than an H200 has SMs (141 at 128x256, 235 at 128x128):
                                  // the persistent fused kernel's CTAs reuse their staged tile; tiles
                                  // straddling q | k and k | v (3·64 columns per section)
                                  {6000, 64, 3, 64, 6100, 8192}};
  for (const Case& c : cases) {
    SCOPED_TRACE("qkv_rope_store T=" + std::to_string(c.T) + " D=" + std::to_string(c.D) + " H=" +
                 std::to_string(c.H) + " Dh=" + std::to_string(c.Dh) + " N=" + std::to_string(c.N));
    const int64_t HD = c.H * c.Dh;
    const std::vector<float> xn = randn_bf16(static_cast<size_t>(c.T * c.D), 21 + c.T);
    const std::vector<float> w = randn_bf16(static_cast<size_t>(3 * HD * c.D), 22 + c.D, 1.0f / std::sqrt(c.D));
    std::vector<float> cs, sn;
    rope_tables(c.P, c.Dh, 500000.0, cs, sn);
    std::mt19937 rng(static_cast<uint32_t>(c.T * 31 + c.N));
    std::vector<int32_t> pos(static_cast<size_t>(c.T)), rows(static_cast<size_t>(c.N));
    for (auto& p : pos) p = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.P));
    pos.back() = static_cast<int32_t>(c.P - 1);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(static_cast<size_t>(c.T));  // distinct store rows, scattered

    auto run = [&](Backend& be, Dev& q, Dev& ks, Dev& vs, bool poison) {
      Dev xd = make(be, be.activation_dtype(), c.T, c.D), wd = make(be, be.weight_dtype(), 3 * HD, c.D);
      Dev pd = make(be, DType::kI32, c.T), rd = make(be, DType::kI32, c.T);
      Dev cd = make(be, DType::kF32, c.P, c.Dh / 2), sd = make(be, DType::kF32, c.P, c.Dh / 2);
      Dev scratch = make(be, be.activation_dtype(), c.T + 3, 3 * HD);  // larger than needed, as the model's
      q = make(be, be.activation_dtype(), c.T, HD);
      ks = make(be, be.activation_dtype(), c.N, HD);
      vs = make(be, be.activation_dtype(), c.N, HD);
      put(be, xd.t, xn);
      put(be, wd.t, w);
      put_i32(be, pd.t, pos);
      put_i32(be, rd.t, rows);
      put(be, cd.t, cs);
      put(be, sd.t, sn);
      if (poison) {
        twin::poison(be, q.t);
        twin::poison(be, ks.t);
        twin::poison(be, vs.t);
      } else {
        be.fill_zero(ks.t);
        be.fill_zero(vs.t);
      }
      be.qkv_rope_store(xd.t, wd.t, QkvExtras{}, pd.t, rd.t, RopeTable{cd.t, sd.t}, c.H, q.t, ks.t, vs.t, scratch.t);
      be.synchronize();
    };
    Dev qc, kc, vc;
    run(*cpu_, qc, kc, vc, false);
    // The twin: on CUDA the cuBLASLt GEMM + rope_store (the fused kernel, never faster, is a bench
    // kernel now: bench/kernels/, checked against this path by bench/qkv_bench).
    std::vector<std::pair<std::string, std::unique_ptr<Backend>>> twins;
    twins.emplace_back("default", nullptr);
    for (auto& [mode, owned] : twins) {
      SCOPED_TRACE(mode);
      Backend& tb = owned ? *owned : *twin_;
      Dev qt, kt, vt;
      run(tb, qt, kt, vt, true);
      EXPECT_TRUE(close("q_out", get(tb, qt.t), get(*cpu_, qc.t), HD, test::kBf16OpRelTol));
      // Written store rows match; every other store row is untouched (still poison).
      const std::vector<float> kt_h = get(tb, kt.t), vt_h = get(tb, vt.t);
      const std::vector<float> kc_h = get(*cpu_, kc.t), vc_h = get(*cpu_, vc.t);
      std::vector<float> kg, kr, vg, vr;
      std::vector<bool> written(static_cast<size_t>(c.N), false);
      for (int32_t r : rows) written[static_cast<size_t>(r)] = true;
      int64_t touched_unwritten = 0;
      for (int64_t r = 0; r < c.N; ++r) {
        const auto b = kt_h.begin() + r * HD, vb = vt_h.begin() + r * HD;
        if (written[static_cast<size_t>(r)]) {
          kg.insert(kg.end(), b, b + HD);
          kr.insert(kr.end(), kc_h.begin() + r * HD, kc_h.begin() + (r + 1) * HD);
          vg.insert(vg.end(), vb, vb + HD);
          vr.insert(vr.end(), vc_h.begin() + r * HD, vc_h.begin() + (r + 1) * HD);
        } else {
          for (int64_t j = 0; j < HD; ++j)
            if (!std::isnan(b[j]) || !std::isnan(vb[j])) ++touched_unwritten;
        }
      }
      EXPECT_TRUE(close("k_store rows", kg, kr, HD, test::kBf16OpRelTol));
      // v is a copy of the GEMM output: one bf16 rounding on the twin.
      EXPECT_TRUE(close("v_store rows", vg, vr, HD, test::kBf16OpRelTol));
      EXPECT_EQ(touched_unwritten, 0) << "store elements outside `rows` were modified";
    }
  }
}

TEST_P(CudaOps, QkvRopeStoreReportsBadPositionAndRow) {
  const int64_t T = 2, D = 32, H = 1, Dh = 32, N = 4, P = 8;
  Dev xd = make(*twin_, twin_act(), T, D), wd = make(*twin_, twin_->weight_dtype(), 3 * H * Dh, D);
  Dev pd = make(*twin_, DType::kI32, T), rd = make(*twin_, DType::kI32, T);
  Dev cd = make(*twin_, DType::kF32, P, Dh / 2), sd = make(*twin_, DType::kF32, P, Dh / 2);
  Dev q = make(*twin_, twin_act(), T, H * Dh), ks = make(*twin_, twin_act(), N, H * Dh),
      vs = make(*twin_, twin_act(), N, H * Dh), scratch = make(*twin_, twin_act(), T, 3 * H * Dh);
  put(*twin_, xd.t, randn_bf16(T * D, 1));
  put(*twin_, wd.t, randn_bf16(3 * H * Dh * D, 2));
  std::vector<float> cs, sn;
  rope_tables(P, Dh, 10000.0, cs, sn);
  put(*twin_, cd.t, cs);
  put(*twin_, sd.t, sn);
  put_i32(*twin_, rd.t, {0, 1});
  put_i32(*twin_, pd.t, {0, 8});  // position 8 outside [0, 8)
  auto call = [&] {
    twin_->qkv_rope_store(xd.t, wd.t, QkvExtras{}, pd.t, rd.t, RopeTable{cd.t, sd.t}, H, q.t, ks.t, vs.t, scratch.t);
  };
  EXPECT_TRUE(twin::throws_error(*twin_, call, ErrorCode::kInvalidArgument, "position"));
  put_i32(*twin_, pd.t, {0, 7});
  put_i32(*twin_, rd.t, {0, 4});  // store row 4 outside [0, 4)
  EXPECT_TRUE(twin::throws_error(*twin_, call, ErrorCode::kInvalidArgument, "row"));
}

TEST_P(CudaOps, SwigluMatchesCpu) {
  struct Case {
    int64_t T, F;
  };
  const std::vector<Case> cases = small() ? std::vector<Case>{{3, 40}}
                                          : std::vector<Case>{{1, 1}, {5, 7}, {33, 512}, {17, 12288}, {300, 257}};
  for (const Case& c : cases) {
    SCOPED_TRACE("swiglu " + shape_name(c.T, c.F));
    std::vector<float> gu = randn_bf16(static_cast<size_t>(c.T * 2 * c.F), 31 + c.F, 3.0f);
    if (!gu.empty()) gu[0] = -120.0f;  // exp overflow path: silu -> -0
    Dev gc = make(*cpu_, cpu_act(), c.T, 2 * c.F), oc = make(*cpu_, cpu_act(), c.T, c.F);
    Dev gt = make(*twin_, twin_act(), c.T, 2 * c.F), ot = make(*twin_, twin_act(), c.T, c.F);
    put(*cpu_, gc.t, gu);
    put(*twin_, gt.t, gu);
    twin::poison(*twin_, ot.t);
    cpu_->swiglu(gc.t, oc.t);
    twin_->swiglu(gt.t, ot.t);
    EXPECT_TRUE(close("swiglu", get(*twin_, ot.t), get(*cpu_, oc.t), c.F, test::kBf16OpRelTol));
  }
}

// -------------------------------------------------------------------------------- gather_rows

TEST_P(CudaOps, GatherRowsExact) {
  struct Case {
    int64_t T, D, R;
    bool f32;
  };
  const std::vector<Case> cases = small() ? std::vector<Case>{{6, 24, 4, false}, {5, 3, 2, true}}
                                          : std::vector<Case>{{1, 4096, 1, false},   {300, 4096, 33, false},
                                                              {77, 7, 100, false},    {64, 126464, 3, true},
                                                              {9, 5, 9, true}};
  for (const Case& c : cases) {
    const DType dc = c.f32 ? DType::kF32 : cpu_act(), dt = c.f32 ? DType::kF32 : twin_act();
    SCOPED_TRACE("gather_rows T=" + std::to_string(c.T) + " D=" + std::to_string(c.D) + " R=" + std::to_string(c.R) +
                 " " + dtype_name(dt));
    const std::vector<float> x = randn_bf16(static_cast<size_t>(c.T * c.D), 41 + c.D);
    std::vector<int32_t> idx(static_cast<size_t>(c.R));
    std::mt19937 rng(static_cast<uint32_t>(c.R));
    for (auto& i : idx) i = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.T));  // repeats allowed
    Dev xc = make(*cpu_, dc, c.T, c.D), ic = make(*cpu_, DType::kI32, c.R), oc = make(*cpu_, dc, c.R, c.D);
    Dev xt = make(*twin_, dt, c.T, c.D), it = make(*twin_, DType::kI32, c.R), ot = make(*twin_, dt, c.R, c.D);
    put(*cpu_, xc.t, x);
    put(*twin_, xt.t, x);
    put_i32(*cpu_, ic.t, idx);
    put_i32(*twin_, it.t, idx);
    twin::poison(*twin_, ot.t);
    cpu_->gather_rows(xc.t, ic.t, oc.t);
    twin_->gather_rows(xt.t, it.t, ot.t);
    EXPECT_TRUE(close("gather_rows", get(*twin_, ot.t), get(*cpu_, oc.t), c.D, 0.0));
  }
}

TEST_P(CudaOps, GatherRowsOutOfRangeIsReported) {
  Dev x = make(*twin_, twin_act(), 4, 16), i = make(*twin_, DType::kI32, 2), o = make(*twin_, twin_act(), 2, 16);
  put(*twin_, x.t, randn_bf16(64, 3));
  put_i32(*twin_, i.t, {3, -1});
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->gather_rows(x.t, i.t, o.t); }, ErrorCode::kInvalidArgument, "gather_rows"));
}

// ----------------------------------------------------------------------------- gather_columns

// One logit per row (Flash-Verify's ℓ_draft / ℓ_argmax): the same bits as the CPU backend, and NaN
// for a column outside the row (the poisoned output must be overwritten in every row).
TEST_P(CudaOps, GatherColumnsExact) {
  const std::vector<std::pair<int64_t, int64_t>> shapes =
      small() ? std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {1, 1}}
              : std::vector<std::pair<int64_t, int64_t>>{{640, 126464}, {257, 33}, {129, 1}};
  for (const auto& [R, V] : shapes) {
    SCOPED_TRACE("gather_columns R=" + std::to_string(R) + " V=" + std::to_string(V));
    const std::vector<float> x = randn_bf16(static_cast<size_t>(R * V), 7 + R);
    std::vector<int32_t> cols(static_cast<size_t>(R));
    std::mt19937 rng(static_cast<uint32_t>(V));
    for (auto& c : cols) c = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    cols[0] = static_cast<int32_t>(V - 1);
    if (R > 1) cols[1] = -1;  // outside: NaN
    if (R > 2) cols[2] = static_cast<int32_t>(V);
    Dev xc = make(*cpu_, DType::kF32, R, V), cc = make(*cpu_, DType::kI32, R), oc = make(*cpu_, DType::kF32, R);
    Dev xt = make(*twin_, DType::kF32, R, V), ct = make(*twin_, DType::kI32, R), ot = make(*twin_, DType::kF32, R);
    put(*cpu_, xc.t, x);
    put(*twin_, xt.t, x);
    put_i32(*cpu_, cc.t, cols);
    put_i32(*twin_, ct.t, cols);
    twin::poison(*twin_, ot.t);
    cpu_->gather_columns(xc.t, cc.t, oc.t);
    twin_->gather_columns(xt.t, ct.t, ot.t);
    const std::vector<float> got = get(*twin_, ot.t), want = get(*cpu_, oc.t);
    for (int64_t r = 0; r < R; ++r) {
      const auto i = static_cast<size_t>(r);
      const int32_t c = cols[i];
      if (c < 0 || c >= V) {
        EXPECT_TRUE(std::isnan(got[i]) && std::isnan(want[i])) << "row " << r << " column " << c;
      } else {
        EXPECT_EQ(got[i], x[i * static_cast<size_t>(V) + static_cast<size_t>(c)]) << "row " << r;
        EXPECT_EQ(want[i], got[i]) << "row " << r;
      }
    }
  }
}

TEST_P(CudaOps, GatherColumnsChecksOperands) {
  Dev x = make(*twin_, DType::kF32, 4, 8), c = make(*twin_, DType::kI32, 3), o = make(*twin_, DType::kF32, 4);
  Dev cb = make(*twin_, DType::kI32, 4), ob = make(*twin_, DType::kI32, 4);  // out must be F32
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->gather_columns(x.t, c.t, o.t); }, ErrorCode::kInvalidArgument, "gather_columns"));
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->gather_columns(x.t, cb.t, ob.t); }, ErrorCode::kInvalidArgument, "'out'"));
  if (!is_cuda_) return;
  // The CUDA kernel reads x while it writes out: an out inside x is refused.
  const Tensor inside_x(x.t.data, DType::kF32, twin_->device(), {4});
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { twin_->gather_columns(x.t, cb.t, inside_x); }, ErrorCode::kInvalidArgument, "overlap"));
}

// The CUDA backend applies BackendOptions::gemm_picks (backend/cuda/gemm_picks.h): a named table for
// another GPU is refused with the file and the field named; with kOff the backend starts.
TEST(GemmPicks, CudaBackendChecksTheNamedTable) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (built without CUDA or no GPU)";
  const std::string path = (test::temp_dir() / "picks.json").string();
  std::ofstream(path) << R"({"device": "Not This GPU", "sm_count": 1, "cublaslt_version": 1,
                             "workspace_bytes": 1, "buckets": "quarter", "picks": []})";
  BackendOptions o;
  o.gemm_picks = GemmPicks::kFile;
  o.gemm_picks_file = path;
  try {
    make_cuda_backend(0, o);
    ADD_FAILURE() << "a pick table of another GPU was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("FLASHDLLM_GEMM_PICKS=" + path + ": 'device' is 'Not This GPU'"),
              std::string::npos)
        << e.what();
  }
  o.gemm_picks = GemmPicks::kOff;
  o.gemm_picks_file.clear();
  EXPECT_NE(make_cuda_backend(0, o), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Small, CudaOps, ::testing::Values(Size::kSmall), size_name);
INSTANTIATE_TEST_SUITE_P(Sweep, CudaOps, ::testing::Values(Size::kSweep), size_name);

}  // namespace
}  // namespace flashdllm
