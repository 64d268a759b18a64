// The qkv_rope_store twin check shared by the GQA / bias (test_cuda_gqa.cpp) and QK-norm
// (test_cuda_moe.cpp) tests: one call on the CPU oracle and one on the twin, same bf16 inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda_twin.h"
#include "model/model.h"
#include "model/model_config.h"

namespace flashdllm::twin {

/// One qkv_rope_store case: T rows of width D into H query / Hkv K/V heads of head_dim dh; the
/// fused weight [(H + 2 Hkv)·dh, D] (seed + 1, scale 1/16), x (seed), the q|k|v bias (seed + 2,
/// scale 0.5) passed only when `bias`; QK-norm weights [dh] when q_norm / k_norm are not empty;
/// positions in [0, P) and distinct K/V store rows in [0, N) drawn from rows_seed.
struct QkvTwinCase {
  int h = 0, kv = 0;
  int64_t dh = 0;
  int64_t T = 37, D = 256, N = 64, P = 128;
  double rope_theta = 1e6;
  uint64_t seed = 0;
  uint32_t rows_seed = 0;
  bool bias = false;
  std::vector<float> q_norm, k_norm;
  float eps = 0.0f;
};

/// Runs `c` on `cpu` and `twin` (the twin's q poisoned first) and expects q, the K store and the V
/// store within the bf16 op tolerance (each output rounds to bf16 once per step).
inline void expect_qkv_rope_store_twin(Backend& cpu, Backend& twin_be, const QkvTwinCase& c) {
  const int64_t HD = c.h * c.dh, KD = c.kv * c.dh, W = HD + 2 * KD;
  const std::vector<float> xn = randn_bf16(static_cast<size_t>(c.T * c.D), c.seed);
  const std::vector<float> w = randn_bf16(static_cast<size_t>(W * c.D), c.seed + 1, 1.0f / 16.0f);
  const std::vector<float> bias = randn_bf16(static_cast<size_t>(W), c.seed + 2, 0.5f);
  std::mt19937 rng(c.rows_seed);
  std::vector<int32_t> pos(static_cast<size_t>(c.T)), rows(static_cast<size_t>(c.N));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.P));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(static_cast<size_t>(c.T));
  ModelConfig rc;
  rc.head_dim = c.dh;
  rc.rope_theta = c.rope_theta;
  const bool qk_norm = !c.q_norm.empty();
  struct Res {
    std::vector<float> q, k, v;
  };
  auto run = [&](Backend& be) {
    const DType at = be.activation_dtype(), wt = be.weight_dtype();
    Dev xd = make(be, at, c.T, c.D), wd = make(be, wt, W, c.D), bd = make(be, wt, W);
    Dev qnd = make(be, wt, c.dh), knd = make(be, wt, c.dh);
    Dev pd = make(be, DType::kI32, c.T), rd = make(be, DType::kI32, c.T), scratch = make(be, at, c.T, W);
    Dev qd = make(be, at, c.T, HD), ks = make(be, at, c.N, KD), vs = make(be, at, c.N, KD);
    const RopeTables rope = make_rope_tables(be, rc, c.P);
    put(be, xd.t, xn);
    put(be, wd.t, w);
    put(be, bd.t, bias);
    if (qk_norm) {
      put(be, qnd.t, c.q_norm);
      put(be, knd.t, c.k_norm);
    }
    put_i32(be, pd.t, pos);
    put_i32(be, rd.t, rows);
    be.fill_zero(ks.t);
    be.fill_zero(vs.t);
    poison(be, qd.t);
    QkvExtras extra;
    extra.bias = c.bias ? bd.t : Tensor{};
    extra.q_norm = qk_norm ? qnd.t : Tensor{};
    extra.k_norm = qk_norm ? knd.t : Tensor{};
    extra.norm_eps = c.eps;
    be.qkv_rope_store(xd.t, wd.t, extra, pd.t, rd.t, rope.table, c.h, qd.t, ks.t, vs.t, scratch.t);
    return Res{get(be, qd.t), get(be, ks.t), get(be, vs.t)};
  };
  const Res ref = run(cpu), got = run(twin_be);
  EXPECT_TRUE(close("q_out", got.q, ref.q, HD, test::kBf16OpRelTol));
  EXPECT_TRUE(close("k_store", got.k, ref.k, KD, test::kBf16OpRelTol));
  EXPECT_TRUE(close("v_store", got.v, ref.v, KD, test::kBf16OpRelTol));
}

}  // namespace flashdllm::twin
