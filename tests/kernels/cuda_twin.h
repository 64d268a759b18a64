// Harness for the CUDA-vs-CPU twin tests (tests/kernels/test_cuda_*.cpp).
//
// The oracle is the CPU backend (fp32, double reductions). The "twin" is the CUDA backend, or,
// with FLASHDLLM_TEST_TWIN=cpu, a second CPU backend: that mode runs every comparison, poisoning
// and bookkeeping path of these tests on a machine without a GPU (it validates the harness, not
// the kernels). Without a GPU and without that variable every test skips with the reason.
//
// Inputs are generated in fp32 and rounded to bf16 before they reach either backend, so both sides
// compute on identical values; outputs the twin must write are poisoned (0xFF bytes = NaN in bf16
// and f32) before each run, so an element the kernel forgot shows up as NaN.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/gpu_test_options.h"
#include "common/numerics.h"
#include "core/dtype.h"

namespace flashdllm::twin {

// Bounds specific to these tests; proposed for tests/common/numerics.h (owned by the lead).
/// select_tokens with temperature > 0: when the two largest noised keys of a row differ by less
/// than this (float64 key units), CPU and CUDA may pick different tokens (their `log` differ by
/// up to 1 ulp); such rows are reported, not failed.
inline constexpr double kGumbelNearTie = 1e-9;
/// GEMM with fp32 output (logits): bf16 products are exact in fp32, only the accumulation order
/// differs (cuBLASLt tensor-core fp32 vs OpenBLAS fp32), a few ulp of the row sums for K <= 12288.
inline constexpr double kF32GemmRelTol = 10 * test::kFp32OpRelTol;
/// float64 softmax confidence of two implementations (different summation orders), relative.
inline constexpr double kConfidenceF64RelTol = test::kFp32OpRelTol;
/// float32 softmax confidence (confidence_f64 = false): the CPU sums up to 126464 terms
/// sequentially in fp32 (typical relative error ~ sqrt(V)·2^-24 ≈ 2e-5 at V = 126464), the GPU in
/// a tree; 10x that typical error.
inline constexpr double kConfidenceF32RelTol = 2e-4;

/// A device tensor with its storage.
struct Dev {
  Buffer buf;
  Tensor t;
};

/// [rows, cols] (cols == 0: a 1-D tensor of `rows` elements) of dtype `dt` on `be`.
inline Dev make(Backend& be, DType dt, int64_t rows, int64_t cols = 0) {
  Dev d;
  const size_t bytes = static_cast<size_t>(rows * (cols > 0 ? cols : 1)) * dtype_size(dt);
  d.buf = be.alloc(bytes > 0 ? bytes : 1, "twin test tensor");
  d.t = cols > 0 ? Tensor(d.buf.data(), dt, be.device(), {rows, cols}) : Tensor(d.buf.data(), dt, be.device(), {rows});
  return d;
}

/// Uploads floats into an F32 or BF16 tensor (BF16: round to nearest even).
inline void put(Backend& be, const Tensor& t, const std::vector<float>& v) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel()) << "put: size mismatch for " << t.describe();
  if (t.dtype == DType::kF32) {
    be.copy_from_host(t, v.data());
  } else if (t.dtype == DType::kBF16) {
    std::vector<uint16_t> b(v.size());
    convert_f32_to_bf16(v.data(), b.data(), v.size());
    be.copy_from_host(t, b.data());
  } else {
    ADD_FAILURE() << "put: unsupported dtype " << dtype_name(t.dtype);
  }
}

inline void put_i32(Backend& be, const Tensor& t, const std::vector<int32_t>& v) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel()) << "put_i32: size mismatch for " << t.describe();
  be.copy_from_host(t, v.data());
}

/// Downloads an F32 or BF16 tensor as floats.
inline std::vector<float> get(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::kF32) {
    be.copy_to_host(out.data(), t);
  } else if (t.dtype == DType::kBF16) {
    std::vector<uint16_t> b(out.size());
    be.copy_to_host(b.data(), t);
    for (size_t i = 0; i < b.size(); ++i) out[i] = bf16_to_f32(b[i]);
  } else {
    ADD_FAILURE() << "get: unsupported dtype " << dtype_name(t.dtype);
  }
  return out;
}

inline std::vector<uint8_t> get_bytes(Backend& be, const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  be.copy_to_host(out.data(), t);
  return out;
}

/// Fills a tensor with 0xFF bytes (NaN for bf16 / f32, -1 for integers).
inline void poison(Backend& be, const Tensor& t) {
  std::vector<uint8_t> p(t.nbytes(), 0xFF);
  be.copy_from_host(t, p.data());
}

/// n values ~ N(0, scale²) rounded to bf16 (exactly representable in both backends).
inline std::vector<float> randn_bf16(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(dist(rng)));
  return v;
}

/// Relative max error of `got` against `ref` (numerics.h policy) with a diagnostic naming the
/// worst element as (row, col) of a [*, cols] matrix.
inline ::testing::AssertionResult close(const std::string& what, const std::vector<float>& got,
                                        const std::vector<float>& ref, int64_t cols, double tol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": got " << got.size() << " values, expected " << ref.size();
  const double err = test::rel_max_err(got, ref);
  if (err <= tol) return ::testing::AssertionSuccess();
  size_t worst = 0;
  double wd = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(ref[i]));
    if (std::isnan(d)) d = INFINITY;
    if (d > wd) {
      wd = d;
      worst = i;
    }
  }
  const int64_t c = cols > 0 ? cols : 1;
  return ::testing::AssertionFailure() << what << ": rel max err " << err << " > " << tol << " (max|ref| "
                                       << test::max_abs(ref) << "); worst at [" << static_cast<int64_t>(worst) / c
                                       << ", " << static_cast<int64_t>(worst) % c << "]: got " << got[worst]
                                       << ", ref " << ref[worst];
}

/// The backends under test, created once per test.
class TwinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* mode = std::getenv("FLASHDLLM_TEST_TWIN");
    const bool cpu_twin = mode != nullptr && std::string(mode) == "cpu";
    if (!cpu_twin && !cuda_available())
      GTEST_SKIP() << "no CUDA device (cuda_available() is false: built without CUDA or no GPU); set "
                      "FLASHDLLM_TEST_TWIN=cpu to exercise the harness against a second CPU backend";
    cpu_ = make_cpu_backend(0);
    twin_ = cpu_twin ? make_cpu_backend(0) : make_cuda_backend(0, gpu_test_backend_options());
    is_cuda_ = twin_->device() == DeviceKind::kCUDA;
  }

  /// Activation dtype of the CPU oracle (F32) and of the twin (BF16 on CUDA).
  DType cpu_act() const { return cpu_->activation_dtype(); }
  DType twin_act() const { return twin_->activation_dtype(); }

  /// A CUDA backend made with `options` (backend choices are made at construction).
  static std::unique_ptr<Backend> cuda_with(const BackendOptions& options) { return make_cuda_backend(0, options); }

  /// cuda_with(options), or null where that choice cannot run here (the backend refuses it with
  /// kUnsupported: a device other than sm_90 or a build without CUTLASS for the Hopper kernels; said
  /// on stderr, naming `what`).
  static std::unique_ptr<Backend> cuda_with_or_null(const BackendOptions& options, const std::string& what) {
    try {
      return cuda_with(options);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnsupported) throw;
      std::fprintf(stderr, "[note] %s not run: %s\n", what.c_str(), e.what());
      return nullptr;
    }
  }

  /// BackendOptions with the attention kernel named `mode` (attention_kernel_name's names).
  static BackendOptions attention_options(const char* mode) {
    const auto k = attention_kernel_from_name(mode);
    if (!k) throw Error(ErrorCode::kInvalidArgument, std::string("no attention kernel '") + mode + "'");
    BackendOptions o;
    o.attention = *k;
    return o;
  }

  /// A twin backend with the attention kernel `mode` forced (CUDA only).
  static std::unique_ptr<Backend> cuda_with_attention(const char* mode) { return cuda_with(attention_options(mode)); }

  /// The CUDA backend with a Hopper attention kernel forced ("wgmma128" or "wgmma64"), or null where
  /// it cannot run.
  static std::unique_ptr<Backend> cuda_wgmma_or_null(const char* variant = "wgmma128") {
    return cuda_with_or_null(attention_options(variant), std::string("attention ") + variant);
  }

  std::unique_ptr<Backend> cpu_, twin_;
  bool is_cuda_ = false;
};

/// Runs `f` and expects it (or the synchronize after it, where device-side checks report) to
/// throw flashdllm::Error with `code` and a message containing `needle`.
template <class F>
::testing::AssertionResult throws_error(Backend& be, F&& f, ErrorCode code, const std::string& needle) {
  try {
    f();
    be.synchronize();
  } catch (const Error& e) {
    if (e.code() != code)
      return ::testing::AssertionFailure() << "threw " << error_code_name(e.code()) << " (" << e.what()
                                           << "), expected " << error_code_name(code);
    if (std::string(e.what()).find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message '" << e.what() << "' does not mention '" << needle << "'";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "did not throw (expected " << error_code_name(code) << " mentioning '"
                                       << needle << "')";
}

}  // namespace flashdllm::twin
