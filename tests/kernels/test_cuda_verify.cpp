// Backend::attention_verify (Flash-Verify attention, reference §D.8):
//  * VerifyMask: verify_may_attend against the S = 3 table of §D.8 written out by hand (and with the
//    three source rows of a shifted-logit model), and the structural properties for S = 0..8 with
//    block_length 16 (T = 32 − 2S, or 32 − 3S with source rows): every row sees exactly one view of
//    each candidate, kept rows see the all-masked state, D_i / M_i never see each other, R_i sees
//    exactly what M_i sees and no row sees a source column; verify_tile_groups_valid.
//  * CpuVerifyAttention: the CPU oracle against a dense-mask softmax written naively in the test
//    (gathered cache keys + in-tile keys under the mask; several tiles, empty gather lists, S = 0,
//    T = 0, T odd, source rows), plus operand errors. Also: the in-tile logits may exceed every cache logit by
//    far more than fp32's exp range (the released kernel's running-max hazard, §F.8) and the
//    result stays exact.
//  * CudaVerify (twin): CUDA vs CPU on bf16-rounded inputs over Flash-Verify-like tiles (32 rows
//    per slot, keys ≈ seqlen_k gathered from a flat multi-slot store), 1–3 and 32 heads, head_dim
//    128 (the flash kernel's verify mode: also empty gathers, T = 0, and 96-row tiles spanning two
//    work items and two key tiles of in-tile columns) and 64 / 32 (the scalar kernel), tiles with
//    source rows (a shifted-logit model's, core/verify_mask.h) on both kernels; query rows
//    outside every tile stay untouched; invalid tiles and gather rows are reported. Skips without a GPU (kernels/cuda_twin.h; FLASHDLLM_TEST_TWIN=cpu runs the harness).
//  * CudaVerifyLaunch (CUDA builds with a GPU): every CTA shape of kernels::attention_verify_flash
//    against the CPU oracle, the two register budgets of one shape bit for bit, verify_cta_for.
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "kernels/cuda_twin.h"

#if FLASHDLLM_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <initializer_list>

#include "kernels/cuda/attention.h"
#endif

namespace flashdllm {
namespace {

using twin::close;
using twin::Dev;
using twin::get;
using twin::make;
using twin::put;
using twin::put_i32;
using twin::randn_bf16;

// ------------------------------------------------------------------------------ mask

TEST(VerifyMask, MatchesTheReferenceTableForThreeCandidates) {
  // reference-algorithms.md §D.8, S = 3, one kept row K (1 = attend); columns K D0 D1 D2 M0 M1 M2.
  const int table[7][7] = {
      {1, 0, 0, 0, 1, 1, 1},  // K
      {1, 1, 0, 0, 0, 1, 1},  // D0
      {1, 1, 1, 0, 0, 0, 1},  // D1
      {1, 1, 1, 1, 0, 0, 0},  // D2
      {1, 0, 0, 0, 1, 1, 1},  // M0
      {1, 1, 0, 0, 0, 1, 1},  // M1
      {1, 1, 1, 0, 0, 0, 1},  // M2
  };
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < 7; ++c) EXPECT_EQ(verify_may_attend(1, 3, r, c), table[r][c] == 1) << "row " << r << " col " << c;
  static_assert(!verify_may_attend(2, 1, 3, 2) && !verify_may_attend(2, 1, 2, 3), "D0 and M0 never see each other");
}

TEST(VerifyMask, SourceRowsForThreeCandidates) {
  // The table above with the source rows R0..R2 of a shifted-logit model (columns K D0 D1 D2 M0 M1 M2
  // R0 R1 R2): R_i's row is M_i's, and no row sees a source column.
  const int table[10][10] = {
      {1, 0, 0, 0, 1, 1, 1, 0, 0, 0},  // K
      {1, 1, 0, 0, 0, 1, 1, 0, 0, 0},  // D0
      {1, 1, 1, 0, 0, 0, 1, 0, 0, 0},  // D1
      {1, 1, 1, 1, 0, 0, 0, 0, 0, 0},  // D2
      {1, 0, 0, 0, 1, 1, 1, 0, 0, 0},  // M0
      {1, 1, 0, 0, 0, 1, 1, 0, 0, 0},  // M1
      {1, 1, 1, 0, 0, 0, 1, 0, 0, 0},  // M2
      {1, 0, 0, 0, 1, 1, 1, 0, 0, 0},  // R0
      {1, 1, 0, 0, 0, 1, 1, 0, 0, 0},  // R1
      {1, 1, 1, 0, 0, 0, 1, 0, 0, 0},  // R2
  };
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 10; ++c)
      EXPECT_EQ(verify_may_attend(1, 3, r, c), table[r][c] == 1) << "row " << r << " col " << c;
  static_assert(verify_tile_groups_valid(10, 3, 3) && verify_tile_groups_valid(9, 3, 3) &&
                    verify_tile_groups_valid(6, 3, 0) && verify_tile_groups_valid(0, 0, 0),
                "T >= 0");
  static_assert(!verify_tile_groups_valid(8, 3, 3) && !verify_tile_groups_valid(10, 3, 4) &&
                    !verify_tile_groups_valid(10, -1, 0) && !verify_tile_groups_valid(10, 2, -1),
                "2·S + n_src > rows, n_src > S or negative counts");
}

TEST(VerifyMask, SourceRowsSeeTheirMaskRowsViewForEveryCandidateCount) {
  const int64_t bm = 16;
  for (int64_t S = 0; S <= bm / 2; ++S) {
    const int64_t T = 2 * bm - 3 * S, n = T + 3 * S;
    SCOPED_TRACE("S = " + std::to_string(S));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < n; ++c) {
        if (c >= T + 2 * S) {
          EXPECT_FALSE(verify_may_attend(T, S, r, c)) << "row " << r << " sees source column " << c;
        }
        if (r >= T + 2 * S) {
          const int64_t Mi = r - S;  // M_i for R_i
          EXPECT_EQ(verify_may_attend(T, S, r, c), verify_may_attend(T, S, Mi, c))
              << "R" << r - T - 2 * S << " col " << c;
        }
      }
    for (int64_t i = 0; i < S; ++i) {
      const int64_t Ri = T + 2 * S + i;
      EXPECT_TRUE(verify_may_attend(T, S, Ri, T + S + i)) << "R" << i << " sees M" << i << " (a column of its tile)";
      for (int64_t k = 0; k < S; ++k) {  // exactly one view of each candidate: view i
        EXPECT_EQ(verify_may_attend(T, S, Ri, T + k), k < i);
        EXPECT_EQ(verify_may_attend(T, S, Ri, T + S + k), k >= i);
      }
    }
  }
}

TEST(VerifyMask, StructuralPropertiesForEveryCandidateCount) {
  const int64_t bm = 16;
  for (int64_t S = 0; S <= bm / 2; ++S) {
    const int64_t T = 2 * bm - 2 * S, n = T + 2 * S;
    SCOPED_TRACE("S = " + std::to_string(S));
    for (int64_t r = 0; r < n; ++r) {
      // Every row sees every kept column and itself.
      for (int64_t c = 0; c < T; ++c) EXPECT_TRUE(verify_may_attend(T, S, r, c));
      EXPECT_TRUE(verify_may_attend(T, S, r, r));
      // Exactly one view (draft or mask) of each candidate k.
      for (int64_t k = 0; k < S; ++k) {
        const bool d = verify_may_attend(T, S, r, T + k), m = verify_may_attend(T, S, r, T + S + k);
        EXPECT_NE(d, m) << "row " << r << " candidate " << k;
      }
    }
    for (int64_t i = 0; i < S; ++i) {
      const int64_t Di = T + i, Mi = T + S + i;
      EXPECT_FALSE(verify_may_attend(T, S, Di, Mi));  // a draft and the mask of the same position
      EXPECT_FALSE(verify_may_attend(T, S, Mi, Di));
      for (int64_t k = 0; k < S; ++k) {
        EXPECT_EQ(verify_may_attend(T, S, Mi, T + k), k < i) << "M" << i << " sees drafts of earlier candidates only";
        EXPECT_EQ(verify_may_attend(T, S, Di, T + k), k <= i) << "D" << i;
      }
    }
    for (int64_t r = 0; r < T; ++r)
      for (int64_t k = 0; k < S; ++k) {
        EXPECT_FALSE(verify_may_attend(T, S, r, T + k)) << "kept rows never see drafts";
        EXPECT_TRUE(verify_may_attend(T, S, r, T + S + k));
      }
  }
}

// ------------------------------------------------------------------------------ cases

struct VCase {
  std::string name;
  int64_t q_rows = 0, kv_rows = 0;
  int heads = 1;
  int head_dim = 128;
  std::vector<int32_t> key_rows;
  std::vector<VerifyTile> tiles;
};

/// Flash-Verify-like layout: slot j owns store rows [j·l_max, (j+1)·l_max); its tile has T + 2S rows
/// (S = cands[j], T = 2·bm − 2S, or kept[j] when given) and gathers every row < seqlen[j] of its slot
/// except `T + S` of them (those recomputed in the tile), in a shuffled order.
/// sources: every tile also has S source rows (a shifted-logit model's; T = max(0, 2·bm − 3S) by default).
VCase slots_case(const std::string& name, const std::vector<int32_t>& seqlens, const std::vector<int32_t>& cands,
                 int32_t l_max, int32_t bm, int heads, int head_dim = 128, std::vector<int32_t> kept = {},
                 bool sources = false) {
  VCase c;
  c.name = name;
  c.heads = heads;
  c.head_dim = head_dim;
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(name)));
  int32_t q = 3;  // rows before the first tile belong to no tile
  for (size_t j = 0; j < seqlens.size(); ++j) {
    const int32_t S = cands[j], R = sources ? S : 0;
    const int32_t T = kept.empty() ? std::max(0, 2 * bm - 2 * S - R) : kept[j];
    std::vector<int32_t> rows;
    for (int32_t t = 0; t < seqlens[j]; ++t) rows.push_back(static_cast<int32_t>(j) * l_max + t);
    std::shuffle(rows.begin(), rows.end(), rng);
    const int32_t drop = std::min<int32_t>(T + S, static_cast<int32_t>(rows.size()));
    const auto k0 = static_cast<int32_t>(c.key_rows.size());
    c.key_rows.insert(c.key_rows.end(), rows.begin() + drop, rows.end());
    c.tiles.push_back({q, q + T + 2 * S + R, k0, static_cast<int32_t>(c.key_rows.size()), S, R});
    q += T + 2 * S + R;
  }
  c.q_rows = q + 2;
  c.kv_rows = static_cast<int64_t>(seqlens.size()) * l_max;
  return c;
}

/// The I32 table rows of c.tiles.
std::vector<int32_t> table_of(const VCase& c) {
  std::vector<int32_t> table;
  for (const VerifyTile& t : c.tiles)
    table.insert(table.end(), {t.q_start, t.q_end, t.k_start, t.k_end, t.n_cand, t.n_src});
  return table;
}

struct Inputs {
  std::vector<float> q, k, v, kt, vt;
};
Inputs inputs(const VCase& c, float q_scale = 0.5f) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const uint64_t seed = std::hash<std::string>()(c.name);
  Inputs in;
  in.q = randn_bf16(static_cast<size_t>(c.q_rows * HD), seed, q_scale);
  in.k = randn_bf16(static_cast<size_t>(c.kv_rows * HD), seed + 1, 0.5f);
  in.v = randn_bf16(static_cast<size_t>(c.kv_rows * HD), seed + 2, 1.0f);
  in.kt = randn_bf16(static_cast<size_t>(c.q_rows * HD), seed + 3, 0.5f);
  in.vt = randn_bf16(static_cast<size_t>(c.q_rows * HD), seed + 4, 1.0f);
  return in;
}

/// The semantics of backend.h written out naively: per (tile, row, head) the list of allowed keys
/// (dense mask over the tile), one softmax in double. Rows outside every tile: NaN (not compared).
std::vector<double> naive(const VCase& c, const Inputs& in, float scale) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim, D = c.head_dim;
  std::vector<double> out(static_cast<size_t>(c.q_rows * HD), NAN);
  for (const VerifyTile& t : c.tiles) {
    const int64_t n = t.q_end - t.q_start, S = t.n_cand, T = n - 2 * S - t.n_src;
    // Dense mask of §D.8 built from the row/column categories (3: source rows, queries only, each
    // attending like the mask row of its candidate).
    std::vector<std::vector<bool>> mask(static_cast<size_t>(n), std::vector<bool>(static_cast<size_t>(n)));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t col = 0; col < n; ++col) {
        const auto kind = [&](int64_t x) { return x < T ? 0 : x < T + S ? 1 : x < T + 2 * S ? 2 : 3; };
        int rk = kind(r);
        const int ck = kind(col);
        int64_t i = rk == 1 ? r - T : r - T - S;
        if (rk == 3) {
          rk = 2;
          i = r - T - 2 * S;
        }
        const int64_t k = ck == 1 ? col - T : col - T - S;
        bool m;
        if (ck == 3)
          m = false;
        else if (ck == 0)
          m = true;
        else if (rk == 0) m = ck == 2;
        else if (rk == 1) m = ck == 1 ? k <= i : k > i;
        else m = ck == 1 ? k < i : k >= i;
        mask[static_cast<size_t>(r)][static_cast<size_t>(col)] = m;
      }
    for (int64_t r = 0; r < n; ++r)
      for (int h = 0; h < c.heads; ++h) {
        const float* qr = in.q.data() + (t.q_start + r) * HD + h * D;
        std::vector<std::pair<const float*, const float*>> kv;
        for (int32_t g = t.k_start; g < t.k_end; ++g)
          kv.emplace_back(in.k.data() + c.key_rows[static_cast<size_t>(g)] * HD + h * D,
                          in.v.data() + c.key_rows[static_cast<size_t>(g)] * HD + h * D);
        for (int64_t col = 0; col < n; ++col)
          if (mask[static_cast<size_t>(r)][static_cast<size_t>(col)])
            kv.emplace_back(in.kt.data() + (t.q_start + col) * HD + h * D, in.vt.data() + (t.q_start + col) * HD + h * D);
        std::vector<double> s;
        double m = -INFINITY;
        for (const auto& [kr, vr] : kv) {
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += static_cast<double>(qr[i]) * kr[i];
          s.push_back(d * scale);
          m = std::max(m, d * scale);
        }
        double z = 0;
        for (double x : s) z += std::exp(x - m);
        for (int64_t i = 0; i < D; ++i) {
          double acc = 0;
          for (size_t j = 0; j < kv.size(); ++j) acc += std::exp(s[j] - m) / z * kv[j].second[i];
          out[static_cast<size_t>((t.q_start + r) * HD + h * D + i)] = acc;
        }
      }
  }
  return out;
}

/// Runs the op on `be`; out starts poisoned (NaN) so untouched rows stay NaN. planned: the table is
/// planned first (plan_attention_verify) and the op runs twice on that plan, as two layers would.
std::vector<float> run(Backend& be, const VCase& c, const Inputs& in, float scale, bool planned = false) {
  const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
  const DType at = be.activation_dtype();
  Dev qd = make(be, at, c.q_rows, HD), kd = make(be, at, c.kv_rows, HD), vd = make(be, at, c.kv_rows, HD);
  Dev ktd = make(be, at, c.q_rows, HD), vtd = make(be, at, c.q_rows, HD), od = make(be, at, c.q_rows, HD);
  Dev gd = make(be, DType::kI32, std::max<int64_t>(1, static_cast<int64_t>(c.key_rows.size())));
  Dev td = make(be, DType::kI32, std::max<int64_t>(1, static_cast<int64_t>(c.tiles.size())), kVerifyTileInts);
  put(be, qd.t, in.q);
  put(be, kd.t, in.k);
  put(be, vd.t, in.v);
  put(be, ktd.t, in.kt);
  put(be, vtd.t, in.vt);
  twin::poison(be, od.t);
  std::vector<int32_t> g = c.key_rows;
  if (g.empty()) g.push_back(0);
  put_i32(be, gd.t, g);
  std::vector<int32_t> table = table_of(c);
  if (table.empty()) table.assign(kVerifyTileInts, 0);
  put_i32(be, td.t, table);
  const Tensor keys = gd.t.slice_rows(0, static_cast<int64_t>(c.key_rows.size()));
  const Tensor tiles = td.t.slice_rows(0, static_cast<int64_t>(c.tiles.size()));
  if (planned) {
    be.plan_attention_verify(tiles, c.q_rows, keys.numel());
    be.attention_verify(qd.t, kd.t, vd.t, keys, ktd.t, vtd.t, tiles, c.heads, scale, od.t);
    twin::poison(be, od.t);
  }
  be.attention_verify(qd.t, kd.t, vd.t, keys, ktd.t, vtd.t, tiles, c.heads, scale, od.t);
  return get(be, od.t);
}

std::vector<bool> covered_rows(const VCase& c) {
  std::vector<bool> cov(static_cast<size_t>(c.q_rows), false);
  for (const VerifyTile& t : c.tiles)
    for (int32_t r = t.q_start; r < t.q_end; ++r) cov[static_cast<size_t>(r)] = true;
  return cov;
}

std::vector<VCase> small_cases() {
  std::vector<VCase> v;
  v.push_back(slots_case("2 slots, bm 8", {64, 45}, {3, 4}, 64, 8, 2, 64));
  v.push_back(slots_case("S = 0 and S = bm/2, 1 head", {40, 50}, {0, 8}, 64, 16, 1, 32));
  v.push_back(slots_case("T = 0 (all candidates), odd T", {30, 30}, {5, 2}, 32, 4, 3, 32, {0, 3}));
  VCase e = slots_case("empty gather list", {12}, {3}, 16, 4, 2, 32);
  e.key_rows.clear();
  e.tiles[0].k_start = e.tiles[0].k_end = 0;
  v.push_back(e);
  // head_dim 128 runs the flash kernel's verify mode: the same shapes, and tiles of more than one
  // 64-row work item whose in-tile columns span several 64-key tiles.
  v.push_back(slots_case("T = 0 and odd T, head_dim 128", {30, 70}, {5, 2}, 96, 4, 2, 128, {0, 3}));
  VCase e128 = slots_case("empty gather list, head_dim 128", {12, 40}, {3, 0}, 64, 4, 2, 128);
  e128.tiles[0].k_end = e128.tiles[0].k_start;  // tile 0 sees only its own rows
  v.push_back(e128);
  v.push_back(slots_case("96-row tiles, S 40, head_dim 128", {150, 200}, {40, 33}, 256, 48, 2, 128));
  // Source rows (shifted-logit models): both kernels, T = 0, S = 0, tiles of several work items.
  v.push_back(slots_case("source rows, head_dim 32", {40, 50, 30}, {3, 0, 8}, 64, 8, 2, 32, {}, true));
  v.push_back(slots_case("source rows, T = 0, head_dim 64", {30, 30}, {5, 2}, 32, 4, 3, 64, {0, 1}, true));
  v.push_back(slots_case("source rows, head_dim 128", {60, 120, 90}, {4, 8, 0}, 128, 16, 2, 128, {}, true));
  v.push_back(slots_case("source rows, 112-row tiles, head_dim 128", {150, 200}, {30, 33}, 256, 48, 2, 128, {}, true));
  return v;
}

std::vector<VCase> sweep_cases() {
  std::vector<VCase> v;
  v.push_back(slots_case("8 slots x 32 rows, 32 heads", std::vector<int32_t>(8, 256), {0, 1, 2, 3, 5, 8, 8, 4}, 384,
                         16, 32));
  v.push_back(slots_case("odd seqlens", {1, 33, 129, 255, 300}, {1, 0, 8, 7, 2}, 384, 16, 3));
  v.push_back(slots_case("head_dim 64, bm 32", {200, 90}, {16, 11}, 256, 32, 2, 64));
  v.push_back(slots_case("source rows, 8 slots x 32 rows, 28 heads", std::vector<int32_t>(8, 256),
                         {0, 1, 2, 3, 5, 8, 8, 4}, 384, 16, 28, 128, {}, true));
  return v;
}

// ------------------------------------------------------------------------------ CPU semantics

TEST(CpuVerifyAttention, MatchesTheDenseMaskFormula) {
  auto cpu = make_cpu_backend(1);
  for (const VCase& c : small_cases()) {
    SCOPED_TRACE(c.name);
    const Inputs in = inputs(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const std::vector<float> got = run(*cpu, c, in, scale);
    const std::vector<double> want = naive(c, in, scale);
    const std::vector<bool> cov = covered_rows(c);
    const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t row = i / static_cast<size_t>(HD);
      if (!cov[row]) {
        EXPECT_TRUE(std::isnan(got[i])) << "row " << row << " is outside every tile but was written";
        continue;
      }
      ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::abs(want[i]))) << "row " << row << " col " << i % HD;
    }
  }
}

// The released kernel folds the in-tile block in with the cache part's maximum (§F.8): when an
// in-tile logit exceeds every cache logit by more than ~88, exp overflows in fp32. A proper running
// maximum gives the exact result: the row's own key dominates and out ≈ its value.
struct DominantCase {
  VCase c;
  Inputs in;
  int32_t row = 0;
};
DominantCase dominant_case() {
  DominantCase dc;
  dc.c = slots_case("dominant in-tile key", {20}, {1}, 32, 2, 1, 32);
  VCase& c = dc.c;
  Inputs& in = dc.in;
  in = inputs(c, 0.0f);  // q = 0 except row M0
  const int64_t D = c.head_dim;
  const int32_t q0 = c.tiles[0].q_start, T = c.tiles[0].q_end - q0 - 2;  // rows: T kept, D0, M0
  dc.row = q0 + T + 1;
  for (int64_t i = 0; i < D; ++i) {
    in.q[static_cast<size_t>(dc.row * D + i)] = 8.0f;
    in.kt[static_cast<size_t>(dc.row * D + i)] = 8.0f;  // own key: logit 8·8·32 / sqrt(32) ≈ 362
    for (int32_t r = q0; r < dc.row; ++r) in.kt[static_cast<size_t>(r * D + i)] = 0.0f;
  }
  return dc;
}

TEST(CpuVerifyAttention, InTileLogitsFarAboveTheCacheAreExact) {
  auto cpu = make_cpu_backend(1);
  const DominantCase dc = dominant_case();
  const int64_t D = dc.c.head_dim;
  const int32_t m0 = dc.row;
  const std::vector<float> got = run(*cpu, dc.c, dc.in, 1.0f / std::sqrt(static_cast<float>(D)));
  for (int64_t i = 0; i < D; ++i) {
    ASSERT_TRUE(std::isfinite(got[static_cast<size_t>(m0 * D + i)]));
    EXPECT_NEAR(got[static_cast<size_t>(m0 * D + i)], dc.in.vt[static_cast<size_t>(m0 * D + i)], 1e-6);
  }
}

TEST(CpuVerifyAttention, RejectsBadOperands) {
  auto cpu = make_cpu_backend(1);
  const VCase c = slots_case("bad", {20}, {2}, 32, 4, 2, 32);
  const Inputs in = inputs(c);
  auto expect_error = [&](const VCase& bad, const std::string& needle) {
    try {
      run(*cpu, bad, in, 0.1f);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  VCase t = c;
  t.tiles[0].n_cand = 5;  // 2·5 > 8 rows
  expect_error(t, "tile 0");
  t = c;
  t.tiles[0].n_src = 3;  // more source rows than candidates
  expect_error(t, "tile 0");
  t = c;
  t.tiles[0].n_src = 2;  // fits: T = 8 − 6 = 2 (valid)
  EXPECT_NO_THROW(run(*cpu, t, in, 0.1f));
  t = c;
  t.tiles[0].k_end = static_cast<int32_t>(t.key_rows.size()) + 1;
  expect_error(t, "tile 0");
  t = c;
  t.key_rows[3] = static_cast<int32_t>(c.kv_rows);
  expect_error(t, "key_rows[3]");
}

// ------------------------------------------------------------------------------ CUDA twin

enum class Size { kSmall, kSweep };
void PrintTo(Size s, std::ostream* os) { *os << (s == Size::kSmall ? "small" : "sweep"); }
class CudaVerify : public twin::TwinTest, public ::testing::WithParamInterface<Size> {};

TEST_P(CudaVerify, MatchesCpu) {
  for (const VCase& c : GetParam() == Size::kSmall ? small_cases() : sweep_cases()) {
    SCOPED_TRACE(c.name + ", heads " + std::to_string(c.heads) + ", head_dim " + std::to_string(c.head_dim));
    const Inputs in = inputs(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    const std::vector<float> ref = run(*cpu_, c, in, scale);
    const std::vector<float> got = run(*twin_, c, in, scale);
    const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
    const std::vector<bool> cov = covered_rows(c);
    std::vector<float> g, r;
    int64_t written_outside = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (cov[i / static_cast<size_t>(HD)]) {
        g.push_back(got[i]);
        r.push_back(ref[i]);
      } else {
        written_outside += !std::isnan(got[i]);
      }
    }
    EXPECT_TRUE(close(c.name, g, r, HD, test::kBf16OpRelTol));
    EXPECT_EQ(written_outside, 0) << "query rows outside every tile were written";
    // Over a plan made once (the verify forward's), every call gives the same output as planning itself.
    const std::vector<float> planned = run(*twin_, c, in, scale, /*planned=*/true);
    ASSERT_EQ(planned.size(), got.size());
    EXPECT_EQ(0, std::memcmp(planned.data(), got.data(), got.size() * sizeof(float))) << "planned call differs";
  }
}

TEST_P(CudaVerify, InvalidTileAndKeyRowAreReported) {
  if (GetParam() == Size::kSweep) GTEST_SKIP() << "small only";
  const VCase c = slots_case("bad tile", {20}, {2}, 32, 4, 2, 32);
  const Inputs in = inputs(c);
  VCase t = c;
  t.tiles[0].n_cand = 5;
  EXPECT_TRUE(twin::throws_error(*twin_, [&] { run(*twin_, t, in, 0.1f); }, ErrorCode::kInvalidArgument, "tile"));
  t = c;
  t.tiles[0].n_src = 3;  // more source rows than candidates
  EXPECT_TRUE(twin::throws_error(
      *twin_, [&] { run(*twin_, t, in, 0.1f); }, ErrorCode::kInvalidArgument, "tile"));
  t = c;
  t.key_rows[0] = static_cast<int32_t>(c.kv_rows) + 7;
  EXPECT_TRUE(twin::throws_error(*twin_, [&] { run(*twin_, t, in, 0.1f); }, ErrorCode::kInvalidArgument, ""));
  // A bad row in a later key tile (the flash kernel reads those rows one tile ahead, in its loop).
  const VCase l = slots_case("bad later key row", {200}, {2}, 256, 4, 2, 128);
  ASSERT_GT(l.key_rows.size(), 150u);
  const Inputs lin = inputs(l);
  EXPECT_NO_THROW(run(*twin_, l, lin, 0.1f));
  for (const size_t i : {size_t{150}, l.key_rows.size() - 1}) {
    VCase u = l;
    u.key_rows[i] = -3;
    EXPECT_TRUE(twin::throws_error(
        *twin_, [&] { run(*twin_, u, lin, 0.1f); }, ErrorCode::kInvalidArgument, ""))
        << "key row " << i;
  }
}

// Proper running maximum on the device: an in-tile logit ~360 above the cache logits stays finite.
TEST_P(CudaVerify, InTileLogitsFarAboveTheCacheStayFinite) {
  if (GetParam() == Size::kSweep) GTEST_SKIP() << "small only";
  const DominantCase dc = dominant_case();
  const float scale = 1.0f / std::sqrt(static_cast<float>(dc.c.head_dim));
  const std::vector<float> ref = run(*cpu_, dc.c, dc.in, scale);
  const std::vector<float> got = run(*twin_, dc.c, dc.in, scale);
  const int64_t D = dc.c.head_dim;
  std::vector<float> g(got.begin() + dc.row * D, got.begin() + (dc.row + 1) * D);
  std::vector<float> r(ref.begin() + dc.row * D, ref.begin() + (dc.row + 1) * D);
  EXPECT_TRUE(close("dominant row", g, r, D, test::kBf16OpRelTol));
}

#if FLASHDLLM_HAVE_CUDA
// kernels::attention_verify_flash's CTA shapes (VerifyCta: key_split 1, 64 rows per CTA; 2, 32 rows
// and two key groups merged at the end, at 2 or 3 CTAs per SM, which must agree bit for bit)
// against the CPU oracle, over tiles of one, two and many 64-key tiles, tiles spanning several work
// items, fewer than 32 keys in all (key group 1 sees none of a row's keys) and an empty gather
// list; an unknown shape is refused; verify_cta_for's wave rule.
TEST(CudaVerifyLaunch, BothCtaShapesMatchCpu) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device (built without CUDA or no GPU)";
  std::vector<VCase> cases;
  cases.push_back(slots_case("96-row tiles, S 40", {150, 200}, {40, 33}, 256, 48, 2, 128));
  cases.push_back(slots_case("8 slots x 32 rows", std::vector<int32_t>(8, 300), {0, 1, 2, 3, 5, 8, 8, 4}, 384, 16, 4));
  VCase e = slots_case("empty gather list", {12, 40}, {3, 0}, 64, 4, 2, 128);
  e.tiles[0].k_end = e.tiles[0].k_start;
  cases.push_back(e);
  VCase few = slots_case("20 rows, 4 gathered keys", {16}, {8}, 32, 10, 2, 128, {4});
  cases.push_back(few);
  cases.push_back(slots_case("source rows, 112-row tiles", {150, 200}, {30, 33}, 256, 48, 2, 128, {}, true));
  const std::unique_ptr<Backend> cpu = make_cpu_backend(0);
  for (const VCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Inputs in = inputs(c);
    const float scale = 1.0f / std::sqrt(128.0f);
    const std::vector<float> want = run(*cpu, c, in, scale);
    const int64_t HD = static_cast<int64_t>(c.heads) * c.head_dim;
    auto upload = [](const std::vector<float>& f) {
      std::vector<__nv_bfloat16> h(f.size());
      for (size_t i = 0; i < f.size(); ++i) h[i] = __float2bfloat16_rn(f[i]);
      void* d = nullptr;
      EXPECT_EQ(cudaMalloc(&d, std::max<size_t>(h.size(), 1) * 2), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      return static_cast<__nv_bfloat16*>(d);
    };
    auto upload_i32 = [](std::vector<int32_t> v) {
      if (v.empty()) v.push_back(0);
      void* d = nullptr;
      EXPECT_EQ(cudaMalloc(&d, v.size() * 4), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      return static_cast<int32_t*>(d);
    };
    const std::vector<int32_t> table = table_of(c);
    __nv_bfloat16 *q = upload(in.q), *k = upload(in.k), *v = upload(in.v), *kt = upload(in.kt), *vt = upload(in.vt);
    __nv_bfloat16* out = upload(std::vector<float>(static_cast<size_t>(c.q_rows * HD), NAN));
    int32_t *table_d = upload_i32(table), *rows_d = upload_i32(c.key_rows), *flags = upload_i32({0});
    const int64_t n_tiles = static_cast<int64_t>(c.tiles.size());
    const int64_t max_capacity = kernels::attention_work_capacity(c.q_rows, n_tiles, 32);
    kernels::AttentionWorkItem* work = nullptr;
    int32_t* count = nullptr;
    ASSERT_EQ(cudaMalloc(&work, static_cast<size_t>(max_capacity) * sizeof(kernels::AttentionWorkItem)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&count, 4), cudaSuccess);
    kernels::AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.out = out;
    a.q_rows = c.q_rows;
    a.kv_rows = c.kv_rows;
    a.n_heads = c.heads;
    a.head_dim = c.head_dim;
    a.scale = scale;
    kernels::VerifyKeys vk;
    vk.table = table_d;
    vk.key_rows = rows_d;
    vk.k_tile = kt;
    vk.v_tile = vt;
    vk.error_flags = flags;
    const std::vector<bool> cov = covered_rows(c);
    int64_t capacity = 0;
    std::vector<__nv_bfloat16> split2;  // the first key-split-2 output
    for (const kernels::VerifyCta cta :
         {kernels::VerifyCta{1, 1}, kernels::VerifyCta{2, 2}, kernels::VerifyCta{2, 3}}) {
      SCOPED_TRACE("key_split " + std::to_string(cta.key_split) + ", " + std::to_string(cta.min_ctas_per_sm) +
                   " CTAs per SM");
      const int block_m = kernels::verify_block_m(cta);
      capacity = kernels::attention_work_capacity(c.q_rows, n_tiles, block_m);
      kernels::attention_plan_verify(table_d, n_tiles, c.q_rows, static_cast<int64_t>(c.key_rows.size()), block_m, work,
                                     count, capacity, flags, nullptr);
      ASSERT_EQ(cudaMemset(out, 0xFF, static_cast<size_t>(c.q_rows * HD) * 2), cudaSuccess);  // NaN: unwritten
      kernels::attention_verify_flash(a, vk, work, count, capacity, nullptr, cta);
      std::vector<__nv_bfloat16> h(static_cast<size_t>(c.q_rows * HD));
      ASSERT_EQ(cudaMemcpy(h.data(), out, h.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      std::vector<float> g, r;
      for (size_t i = 0; i < h.size(); ++i)
        if (cov[i / static_cast<size_t>(HD)]) {
          g.push_back(__bfloat162float(h[i]));
          r.push_back(want[i]);
        }
      EXPECT_TRUE(close(c.name, g, r, HD, test::kBf16OpRelTol));
      // The engine picks 2 or 3 CTAs per SM by the batch's size: one sequence's result must not
      // depend on it (batch invariance), so both compile the same arithmetic.
      if (cta.key_split != 2) continue;
      if (split2.empty()) {
        split2 = h;
      } else {
        EXPECT_EQ(0, std::memcmp(split2.data(), h.data(), h.size() * 2)) << "2 vs 3 CTAs per SM differ";
      }
    }
    int flag_value = -1;
    ASSERT_EQ(cudaMemcpy(&flag_value, flags, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(flag_value, 0);
    EXPECT_THROW(kernels::attention_verify_flash(a, vk, work, count, capacity, nullptr, kernels::VerifyCta{3, 1}),
                 Error);
    EXPECT_THROW(kernels::attention_verify_flash(a, vk, work, count, capacity, nullptr, kernels::VerifyCta{1, 3}),
                 Error);
    for (void* p : std::initializer_list<void*>{q, k, v, kt, vt, out, table_d, rows_d, flags, work, count}) cudaFree(p);
  }
  // The engine's choice: 3 CTAs per SM where that saves more than a quarter of the 2-per-SM waves.
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(kernels::verify_cta_for(6 * sms).min_ctas_per_sm, 3);   // 3 waves of 2 vs 2 of 3
  EXPECT_EQ(kernels::verify_cta_for(2 * sms).min_ctas_per_sm, 2);   // 1 wave either way
  EXPECT_EQ(kernels::verify_cta_for(4 * sms).min_ctas_per_sm, 2);   // 2 waves either way
  EXPECT_EQ(kernels::verify_cta_for(12 * sms).min_ctas_per_sm, 3);  // 6 vs 4
  EXPECT_EQ(kernels::verify_cta_for(12 * sms).key_split, 2);
}
#endif

INSTANTIATE_TEST_SUITE_P(Sizes, CudaVerify, ::testing::Values(Size::kSmall, Size::kSweep),
                         [](const ::testing::TestParamInfo<Size>& i) {
                           return std::string(i.param == Size::kSmall ? "Small" : "Sweep");
                         });

}  // namespace
}  // namespace flashdllm
