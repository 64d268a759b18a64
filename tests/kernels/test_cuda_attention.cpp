// CUDA attention vs the CPU backend (and vs the CUDA reference kernel, the second oracle):
// every shipped flash variant (m64n64, and wgmma128 / wgmma64 on sm_90), the automatic choice
// (on sm_90: tiles of > 64 rows on wgmma128, the others on m64n64, two work lists) and the reference
// kernel, over block tables with odd lengths, lengths off the 64/128 tiles, several tiles of very
// different lengths in one launch, Flash-dLLM-style small query tiles over long key ranges, key
// ranges not starting at 0, rows not covered by any tile (must stay untouched), 1–3 and 32 heads.
//
// Small/... cases are the compute-sanitizer set; Sweep/... the full sweep.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

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

struct AttnCase {
  std::string name;
  int64_t q_rows = 0, kv_rows = 0;
  int heads = 1;
  int head_dim = 128;
  std::vector<AttentionTile> tiles;
  bool vs_cpu = true;  // false: too large for the CPU oracle; compared with the CUDA reference kernel
  // Store rows no tile reads (K/V rows outside every key range, Q rows outside every tile) hold
  // NaN, as never-written cache rows may: a kernel that reads past a tile's end (the wgmma kernel's
  // bulk copies load whole 64-key tiles) must keep them out of the result.
  bool nan_outside = false;
};

/// Sets the rows of `x` ([rows, hd]) that no [begin, end) range of `ranges` covers to NaN.
void nan_rows_outside(std::vector<float>& x, int64_t hd, const std::vector<std::pair<int32_t, int32_t>>& ranges) {
  const int64_t rows = static_cast<int64_t>(x.size()) / hd;
  std::vector<bool> used(static_cast<size_t>(rows), false);
  for (const auto& [b, e] : ranges)
    for (int32_t r = b; r < e; ++r) used[static_cast<size_t>(r)] = true;
  for (int64_t r = 0; r < rows; ++r)
    if (!used[static_cast<size_t>(r)])
      std::fill(x.begin() + r * hd, x.begin() + (r + 1) * hd, std::numeric_limits<float>::quiet_NaN());
}

/// A case's q, k, v ([rows, heads·head_dim], bf16-exact, seeded by the case's name; q scaled by 2
/// sharpens the softmax: some rows nearly one-hot, some flat), with NaN in the rows no tile covers
/// when c.nan_outside.
struct Inputs {
  std::vector<float> q, k, v;
};
Inputs inputs(const AttnCase& c) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const uint64_t seed = std::hash<std::string>()(c.name);
  Inputs in{randn_bf16(static_cast<size_t>(c.q_rows * HD), seed, 2.0f),
            randn_bf16(static_cast<size_t>(c.kv_rows * HD), seed + 1),
            randn_bf16(static_cast<size_t>(c.kv_rows * HD), seed + 2)};
  if (c.nan_outside) {
    std::vector<std::pair<int32_t, int32_t>> q_ranges, k_ranges;
    for (const AttentionTile& t : c.tiles) {
      q_ranges.emplace_back(t.q_start, t.q_end);
      k_ranges.emplace_back(t.k_start, t.k_end);
    }
    nan_rows_outside(in.q, HD, q_ranges);
    nan_rows_outside(in.k, HD, k_ranges);
    nan_rows_outside(in.v, HD, k_ranges);
  }
  return in;
}

/// Packed sequences (full recompute): tile b covers rows [off_b, off_b + len_b) as queries and keys.
AttnCase packed(const std::string& name, const std::vector<int32_t>& lens, int heads, bool vs_cpu = true) {
  AttnCase c;
  c.name = name;
  c.heads = heads;
  c.vs_cpu = vs_cpu;
  int32_t off = 0;
  for (int32_t l : lens) {
    c.tiles.push_back({off, off + l, off, off + l});
    off += l;
  }
  c.q_rows = c.kv_rows = off;
  return c;
}

/// Flash-dLLM-style step: per slot j, query tiles of <= 16 rows (a window and tracked rows) over
/// the slot's key range [j·L_max, j·L_max + seqlen_j) of a larger store; plus `uncovered` query
/// rows at the end that no tile covers.
AttnCase dllm_step(const std::string& name, const std::vector<int32_t>& seqlens,
                   const std::vector<int32_t>& rows_per_slot, int32_t l_max, int heads, int32_t uncovered) {
  AttnCase c;
  c.name = name;
  c.heads = heads;
  int32_t q = 0;
  for (size_t j = 0; j < seqlens.size(); ++j) {
    const int32_t k0 = static_cast<int32_t>(j) * l_max;
    for (int32_t r = 0; r < rows_per_slot[j]; r += 16) {
      const int32_t n = std::min(16, rows_per_slot[j] - r);
      c.tiles.push_back({q, q + n, k0, k0 + seqlens[j]});
      q += n;
    }
  }
  c.q_rows = q + uncovered;
  c.kv_rows = static_cast<int64_t>(seqlens.size()) * l_max;
  return c;
}

std::vector<AttnCase> small_cases() {
  std::vector<AttnCase> v;
  v.push_back(packed("one tile L=70", {70}, 2));
  v.push_back(packed("three tiles 1/17/130", {1, 17, 130}, 1));
  v.push_back(dllm_step("dllm 2 slots", {129, 64}, {20, 16}, 192, 2, 3));
  AttnCase k = packed("keys offset", {33}, 1);
  k.kv_rows = 200;
  k.tiles = {{0, 20, 37, 170}, {20, 33, 100, 101}};  // a single key, too
  v.push_back(k);
  AttnCase stale = dllm_step("stale NaN store rows", {129, 70, 64}, {20, 16, 130}, 256, 2, 3);
  stale.nan_outside = true;  // key ranges end 127 / 186 / 192 rows short of the next slot
  v.push_back(stale);
  return v;
}

std::vector<AttnCase> sweep_cases() {
  std::vector<AttnCase> v;
  for (int32_t L : {1, 2, 15, 63, 64, 65, 127, 128, 129, 255, 257, 1000})
    v.push_back(packed("one tile L=" + std::to_string(L), {L}, L % 3 + 1));
  v.push_back(packed("batch 1/130/517/64", {1, 130, 517, 64}, 3));
  v.push_back(packed("batch 2048/1000 32 heads", {2048, 1000}, 32, /*vs_cpu=*/false));
  v.push_back(packed("batch 300/77 32 heads", {300, 77}, 32));
  v.push_back(packed("batch 4 x 1024 2 heads", {1024, 1024, 1024, 1024}, 2));
  v.push_back(dllm_step("dllm 3 slots, 16-row tiles", {256, 384, 129}, {64, 48, 16}, 512, 3, 5));
  v.push_back(dllm_step("dllm 32 slots x 64 rows, 32 heads", std::vector<int32_t>(32, 640),
                        std::vector<int32_t>(32, 64), 768, 32, 0));
  AttnCase k = packed("keys offset", {200}, 2);
  k.kv_rows = 3000;
  k.tiles = {{0, 100, 1000, 2999}, {100, 150, 5, 70}, {150, 200, 2999, 3000}};
  v.push_back(k);
  return v;
}

class CudaAttention : public twin::TwinTest {
 protected:
  // Runs `c` on `be` (out poisoned first); returns the output downloaded as floats.
  std::vector<float> run(Backend& be, const AttnCase& c, const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, bool poison_out) {
    const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
    const DType at = be.activation_dtype();
    Dev qd = make(be, at, c.q_rows, HD), kd = make(be, at, c.kv_rows, HD), vd = make(be, at, c.kv_rows, HD);
    Dev od = make(be, at, c.q_rows, HD), td = make(be, DType::kI32, static_cast<int64_t>(c.tiles.size()), 4);
    put(be, qd.t, q);
    put(be, kd.t, k);
    put(be, vd.t, v);
    std::vector<int32_t> table;
    for (const AttentionTile& t : c.tiles) table.insert(table.end(), {t.q_start, t.q_end, t.k_start, t.k_end});
    put_i32(be, td.t, table);
    if (poison_out) twin::poison(be, od.t); else be.fill_zero(od.t);
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    be.attention(qd.t, kd.t, vd.t, td.t, c.heads, scale, od.t);
    return get(be, od.t);
  }

  // Compares the covered rows with `ref` and checks that uncovered rows are still poison.
  void check(const AttnCase& c, const std::string& impl, const std::vector<float>& got, const std::vector<float>& ref) {
    const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
    std::vector<bool> covered(static_cast<size_t>(c.q_rows), false);
    for (const AttentionTile& t : c.tiles)
      for (int32_t r = t.q_start; r < t.q_end; ++r) covered[static_cast<size_t>(r)] = true;
    std::vector<float> g, r;
    int64_t modified_uncovered = 0;
    for (int64_t row = 0; row < c.q_rows; ++row) {
      const auto gb = got.begin() + row * HD;
      if (covered[static_cast<size_t>(row)]) {
        g.insert(g.end(), gb, gb + HD);
        r.insert(r.end(), ref.begin() + row * HD, ref.begin() + (row + 1) * HD);
      } else {
        for (int64_t j = 0; j < HD; ++j) modified_uncovered += std::isnan(gb[j]) ? 0 : 1;
      }
    }
    EXPECT_TRUE(close(c.name + " [" + impl + "]", g, r, HD, test::kBf16OpRelTol));
    EXPECT_EQ(modified_uncovered, 0) << c.name << " [" << impl << "]: rows outside every tile were written";
  }

  void run_cases(const std::vector<AttnCase>& cases) {
    // Implementations under test: the twin's default (auto on CUDA) and, on CUDA, each forced variant.
    std::vector<std::pair<std::string, std::unique_ptr<Backend>>> impls;
    if (is_cuda_) {
      impls.emplace_back("m64n64", cuda_with_attention("m64n64"));
      for (const char* m : {"wgmma128", "wgmma64"})
        if (auto wgmma = cuda_wgmma_or_null(m)) impls.emplace_back(m, std::move(wgmma));
      impls.emplace_back("reference", cuda_with_attention("reference"));  // last: the second oracle
    }
    for (const AttnCase& c : cases) {
      SCOPED_TRACE(c.name + ": q_rows " + std::to_string(c.q_rows) + ", kv_rows " + std::to_string(c.kv_rows) +
                   ", heads " + std::to_string(c.heads) + ", tiles " + std::to_string(c.tiles.size()));
      const auto [q, k, v] = inputs(c);
      std::vector<float> ref;
      std::string ref_name;
      if (c.vs_cpu) {
        ref = run(*cpu_, c, q, k, v, false);
        ref_name = "cpu";
      } else if (is_cuda_) {
        ref = run(*impls.back().second, c, q, k, v, false);  // the CUDA reference kernel
        ref_name = "cuda reference";
      } else {
        continue;  // CPU-twin harness mode: too large for the CPU
      }
      SCOPED_TRACE("oracle: " + ref_name);
      check(c, "default", run(*twin_, c, q, k, v, true), ref);
      for (auto& [name, be] : impls) {
        if (!c.vs_cpu && name == "reference") continue;
        check(c, name, run(*be, c, q, k, v, true), ref);
      }
    }
  }
};

TEST_F(CudaAttention, Small) { run_cases(small_cases()); }
TEST_F(CudaAttention, Sweep) { run_cases(sweep_cases()); }

// wgmma64 (one consumer warpgroup, 64-row work items) gives the bits of wgmma128 (two consumers,
// 128-row items), so that the backend may take it for small calls without a request's output
// depending on the batch (small_call_variant): Flash-Cache-like slots of 128 query rows (with a
// NaN store row past each slot's keys) and tiles of 65-200 rows, 1 and 32 heads.
TEST_F(CudaAttention, SmallWgmma64GivesTheBitsOfWgmma128) {
  if (!is_cuda_) GTEST_SKIP() << "CUDA kernels only (the twin is the CPU backend here)";
  auto w128 = cuda_wgmma_or_null("wgmma128");
  auto w64 = cuda_wgmma_or_null("wgmma64");
  if (!w128 || !w64) GTEST_SKIP() << "no Hopper attention kernel here";
  AttnCase slots = dllm_step("2 slots of 128 rows", {700, 389}, {128, 128}, 768, 32, 0);
  slots.tiles = {{0, 128, 0, 700}, {128, 256, 768, 768 + 389}};
  slots.nan_outside = true;
  const std::vector<AttnCase> cases = {slots, packed("tiles 65/129/200", {65, 129, 200}, 1)};
  for (const AttnCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto [q, k, v] = inputs(c);
    const std::vector<float> a = run(*w128, c, q, k, v, true), b = run(*w64, c, q, k, v, true);
    const std::vector<float> d = run(*twin_, c, q, k, v, true);  // the default: wgmma64 for these small calls
    ASSERT_EQ(a.size(), b.size());
    int64_t differ = 0, differ_default = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool nan_a = std::isnan(a[i]);
      differ += nan_a != std::isnan(b[i]) || (!nan_a && a[i] != b[i]);
      differ_default += nan_a != std::isnan(d[i]) || (!nan_a && a[i] != d[i]);
    }
    EXPECT_EQ(differ, 0) << "elements where wgmma64 differs from wgmma128";
    EXPECT_EQ(differ_default, 0) << "elements where the default differs from wgmma128";
  }
}

TEST_F(CudaAttention, SmallHeadDim64RunsOnReferenceOnly) {
  AttnCase c = packed("head_dim 64", {40}, 2);
  c.head_dim = 64;
  const int64_t HD = 128;
  const std::vector<float> q = randn_bf16(static_cast<size_t>(c.q_rows * HD), 1, 2.0f);
  const std::vector<float> k = randn_bf16(static_cast<size_t>(c.kv_rows * HD), 2);
  const std::vector<float> v = randn_bf16(static_cast<size_t>(c.kv_rows * HD), 3);
  const std::vector<float> ref = run(*cpu_, c, q, k, v, false);
  if (!is_cuda_) {
    check(c, "twin", run(*twin_, c, q, k, v, true), ref);
    return;
  }
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { run(*twin_, c, q, k, v, true); }, ErrorCode::kUnsupported, "head_dim 64"));
  auto reference = cuda_with_attention("reference");
  check(c, "reference", run(*reference, c, q, k, v, true), ref);
}

// plan_attention: the layers after one plan reuse it; a write into the planned table, a call over
// another table and a new plan each give correct results for the table as it is at the call.
TEST_F(CudaAttention, SmallPlanOnceIsReusedAndDroppedWhenTheTableChanges) {
  const int64_t HD = 2 * 128, Tq = 90, N = 300;
  const int heads = 2;
  const float scale = 0.0883883f;
  const std::vector<float> q = randn_bf16(static_cast<size_t>(Tq * HD), 11, 2.0f);
  const std::vector<float> k = randn_bf16(static_cast<size_t>(N * HD), 12);
  const std::vector<float> v = randn_bf16(static_cast<size_t>(N * HD), 13);
  // Three tables of the same shape (3 tiles) and different contents.
  const std::vector<int32_t> ta = {0, 16, 0, 140, 16, 80, 0, 140, 80, 90, 150, 300};
  const std::vector<int32_t> tb = {0, 30, 10, 300, 30, 31, 0, 1, 31, 90, 100, 229};
  const std::vector<int32_t> tc = {0, 90, 0, 300, 0, 0, 0, 0, 0, 0, 0, 0};  // one tile, then two empty ranges
  auto oracle = [&](const std::vector<int32_t>& table, int64_t n_tiles) {
    Dev qd = make(*cpu_, DType::kF32, Tq, HD), kd = make(*cpu_, DType::kF32, N, HD),
        vd = make(*cpu_, DType::kF32, N, HD), od = make(*cpu_, DType::kF32, Tq, HD),
        td = make(*cpu_, DType::kI32, n_tiles, 4);
    put(*cpu_, qd.t, q);
    put(*cpu_, kd.t, k);
    put(*cpu_, vd.t, v);
    put_i32(*cpu_, td.t, std::vector<int32_t>(table.begin(), table.begin() + 4 * n_tiles));
    cpu_->fill_zero(od.t);
    cpu_->attention(qd.t, kd.t, vd.t, td.t, heads, scale, od.t);
    return get(*cpu_, od.t);
  };
  const std::vector<float> ref_a = oracle(ta, 3), ref_b = oracle(tb, 3), ref_c = oracle(tc, 1);
  Backend& be = *twin_;
  const DType at = be.activation_dtype();
  Dev qd = make(be, at, Tq, HD), kd = make(be, at, N, HD), vd = make(be, at, N, HD), od = make(be, at, Tq, HD),
      td = make(be, DType::kI32, 3, 4), tcd = make(be, DType::kI32, 1, 4);
  put(be, qd.t, q);
  put(be, kd.t, k);
  put(be, vd.t, v);
  put_i32(be, td.t, ta);
  put_i32(be, tcd.t, std::vector<int32_t>(tc.begin(), tc.begin() + 4));
  auto attend = [&](const Tensor& table, const std::vector<float>& ref, const std::string& what) {
    be.fill_zero(od.t);
    be.attention(qd.t, kd.t, vd.t, table, heads, scale, od.t);
    EXPECT_TRUE(close(what, get(be, od.t), ref, HD, test::kBf16OpRelTol));
  };
  be.plan_attention(td.t, Tq, N, heads);
  attend(td.t, ref_a, "planned, layer 1");
  attend(td.t, ref_a, "planned, layer 2");
  put_i32(be, td.t, tb);  // the planned table rewritten: the plan is dropped
  attend(td.t, ref_b, "table rewritten after the plan");
  be.plan_attention(td.t, Tq, N, heads);
  attend(tcd.t, ref_c, "another table while a plan stands");
  attend(td.t, ref_b, "the planned table after another table's call");
  be.plan_attention(td.t, Tq, N, heads);
  attend(td.t, ref_b, "planned again");
  // With the host copy of the table, as a forward plans: on sm_90 a table without tiles of <= 64
  // rows (here one 90-row tile) plans and launches no small-tile list, one with them (tb) does.
  auto host_tiles = [](const std::vector<int32_t>& t, size_t n) {
    std::vector<AttentionTile> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = AttentionTile{t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]};
    return out;
  };
  const std::vector<AttentionTile> host_c = host_tiles(tc, 1), host_b = host_tiles(tb, 3);
  be.plan_attention(tcd.t, Tq, N, heads, HostAttentionPlan{host_c.data(), 1, nullptr, 0, 128, scale});
  attend(tcd.t, ref_c, "planned from the host copy, no small tile, layer 1");
  attend(tcd.t, ref_c, "planned from the host copy, no small tile, layer 2");
  be.plan_attention(td.t, Tq, N, heads, HostAttentionPlan{host_b.data(), 3, nullptr, 0, 128, scale});
  attend(td.t, ref_b, "planned from the host copy, small tiles");
  be.plan_attention(tcd.t, Tq, N, heads, HostAttentionPlan{host_c.data(), 1, nullptr, 0, 128, scale});
  put_i32(be, tcd.t, std::vector<int32_t>(tb.begin(), tb.begin() + 4));  // a 30-row tile: the plan is dropped
  attend(tcd.t, oracle(tb, 1), "a small tile written over a table planned without one");
  // Arguments.
  Dev f32 = make(be, DType::kF32, 3, 4);
  EXPECT_TRUE(twin::throws_error(
      be, [&] { be.plan_attention(f32.t, Tq, N, heads); }, ErrorCode::kInvalidArgument, "plan_attention"));
  EXPECT_TRUE(twin::throws_error(
      be, [&] { be.plan_attention(td.t, Tq, N, 0); }, ErrorCode::kInvalidArgument, "plan_attention"));
  EXPECT_TRUE(twin::throws_error(
      be, [&] { be.plan_attention_verify(tcd.t, Tq, N); }, ErrorCode::kInvalidArgument,
      "plan_attention_verify"));  // 4 ints are no [n_tiles, kVerifyTileInts = 6] table
}

TEST_F(CudaAttention, SmallInvalidTilesAreReported) {
  const int64_t HD = 128;
  Dev q = make(*twin_, twin_act(), 8, HD), k = make(*twin_, twin_act(), 10, HD), v = make(*twin_, twin_act(), 10, HD),
      o = make(*twin_, twin_act(), 8, HD), t = make(*twin_, DType::kI32, 1, 4);
  put(*twin_, q.t, randn_bf16(8 * HD, 1));
  put(*twin_, k.t, randn_bf16(10 * HD, 2));
  put(*twin_, v.t, randn_bf16(10 * HD, 3));
  const float scale = 0.0883883f;
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{0, 8, 0, 11},    // keys past the store
                                          std::vector<int32_t>{0, 9, 0, 10},    // queries past q
                                          std::vector<int32_t>{4, 2, 0, 10},    // reversed
                                          std::vector<int32_t>{0, 8, 5, 5}}) {  // no keys
    SCOPED_TRACE("tile " + std::to_string(bad[0]) + "," + std::to_string(bad[1]) + "," + std::to_string(bad[2]) +
                 "," + std::to_string(bad[3]));
    put_i32(*twin_, t.t, bad);
    EXPECT_TRUE(twin::throws_error(
        *twin_, [&] { twin_->attention(q.t, k.t, v.t, t.t, 1, scale, o.t); }, ErrorCode::kInvalidArgument,
        "attention"));
  }
  // After the report the backend keeps working.
  put_i32(*twin_, t.t, {0, 8, 0, 10});
  twin_->attention(q.t, k.t, v.t, t.t, 1, scale, o.t);
  EXPECT_NO_THROW(twin_->synchronize());
}

}  // namespace
}  // namespace flashdllm
