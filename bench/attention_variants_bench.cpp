// attention_variants_bench: the flash attention tile shapes that no policy picks (bench/kernels/,
// attention_variants.h: mma.sync m128n64 / m128n128, wgmma with 64-key tiles) against the shipped
// variant of the same kernel (m64n64, wgmma128), on the same inputs, same GPU, one run.
//
// 1. Check (always first; exit code 1 on a failure): the cases of the CUDA attention twin tests
//    (tests/kernels/test_cuda_attention.cpp, test_cuda_importance.cpp, which exercised these shapes
//    while they shipped): packed sequences of odd lengths, Flash-dLLM small query tiles over long key
//    ranges, key ranges not starting at 0, rows no tile covers (must stay untouched: the output is
//    poisoned with NaN first), NaN in every store row no tile reads (the wgmma bulk copies read whole
//    key tiles), and Flash-Cache slots with the fused raw importance of their window rows. Per case:
//    max |variant − shipped| / max |shipped| and the same against the scalar reference kernel over the
//    covered rows (bound 1.6e-2, the twin tests' bf16 op tolerance: two bf16 roundings of outputs of
//    fp32 sums in different orders), the importance against the shipped kernel's (bound 1e-3 of the
//    largest score: fp32 sums and atomics in another order) and untouched keys / rows.
// 2. Time: Flash-Cache window shapes S:Q:K (one tile of Q rows per slot over its K keys, without and
//    with the importance of a --window-rows window; bench/attention_bench's window mode) and packed
//    prefills B x L. Variant and shipped twin alternate over --rounds rounds of --iters event-timed
//    measurements (bench::time_launches); the median round is reported.
//
// Output: markdown tables on stdout, all numbers as JSON (--json).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bench/attention_bench_util.h"
#include "bench/cuda_bench_util.h"
#include "bench/kernels/attention_variants.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"

using namespace flashdllm;
using namespace flashdllm::kernels;
using bench::BenchFlashVariant;
using bench::DeviceBuffer;

namespace {

constexpr int kHeadDim = bench::kHeadDim;
constexpr double kOutTol = 1.6e-2, kScoreTol = 1e-3;

struct Tile {
  int32_t q0, q1, k0, k1;
};

/// A check case: attention tiles over [q_rows] x [kv_rows] stores, optional score tiles (the leading
/// tiles' scored rows), NaN in the store rows no tile reads when nan_outside.
struct Case {
  std::string name;
  int64_t q_rows = 0, kv_rows = 0;
  int heads = 1;
  std::vector<Tile> tiles, scored;
  bool nan_outside = false;
};

Case packed(const std::string& name, const std::vector<int32_t>& lens, int heads) {
  Case c{name, 0, 0, heads, {}, {}, false};
  int32_t off = 0;
  for (const int32_t l : lens) {
    c.tiles.push_back({off, off + l, off, off + l});
    off += l;
  }
  c.q_rows = c.kv_rows = off;
  return c;
}

/// Per slot j, query tiles of <= 16 rows over keys [j·l_max, j·l_max + seqlen_j); `uncovered` rows at the end.
Case dllm_step(const std::string& name, const std::vector<int32_t>& seqlens, const std::vector<int32_t>& rows,
               int32_t l_max, int heads, int32_t uncovered) {
  Case c{name, 0, static_cast<int64_t>(seqlens.size()) * l_max, heads, {}, {}, false};
  int32_t q = 0;
  for (size_t j = 0; j < seqlens.size(); ++j)
    for (int32_t r = 0; r < rows[j]; r += 16) {
      const int32_t n = std::min(16, rows[j] - r), k0 = static_cast<int32_t>(j) * l_max;
      c.tiles.push_back({q, q + n, k0, k0 + seqlens[j]});
      q += n;
    }
  c.q_rows = q + uncovered;
  return c;
}

/// Flash-Cache's layout: per slot one tile [window | tracked] over its keys, the window rows scored;
/// then 7 unscored rows over the whole store.
Case slots(const std::string& name, const std::vector<int32_t>& seqlens, const std::vector<int32_t>& window,
           const std::vector<int32_t>& tracked, int32_t l_max, int heads) {
  Case c{name, 0, static_cast<int64_t>(seqlens.size()) * l_max, heads, {}, {}, false};
  int32_t q = 0;
  for (size_t j = 0; j < seqlens.size(); ++j) {
    const int32_t k0 = static_cast<int32_t>(j) * l_max;
    c.scored.push_back({q, q + window[j], k0, k0 + seqlens[j]});
    c.tiles.push_back({q, q + window[j] + tracked[j], k0, k0 + seqlens[j]});
    q += window[j] + tracked[j];
  }
  c.tiles.push_back({q, q + 7, 0, static_cast<int32_t>(c.kv_rows)});
  c.q_rows = q + 7;
  return c;
}

std::vector<Case> check_cases() {
  std::vector<Case> v;
  for (const int32_t L : {1, 2, 15, 63, 64, 65, 127, 128, 129, 255, 257, 1000})
    v.push_back(packed("one tile L=" + std::to_string(L), {L}, L % 3 + 1));
  v.push_back(packed("three tiles 1/17/130", {1, 17, 130}, 1));
  v.push_back(packed("batch 1/130/517/64", {1, 130, 517, 64}, 3));
  v.push_back(packed("batch 2048/1000 32 heads", {2048, 1000}, 32));
  v.push_back(packed("batch 4 x 1024 2 heads", {1024, 1024, 1024, 1024}, 2));
  v.push_back(dllm_step("dllm 2 slots", {129, 64}, {20, 16}, 192, 2, 3));
  v.push_back(dllm_step("dllm 3 slots, 16-row tiles", {256, 384, 129}, {64, 48, 16}, 512, 3, 5));
  v.push_back(dllm_step("dllm 32 slots x 64 rows, 32 heads", std::vector<int32_t>(32, 640),
                        std::vector<int32_t>(32, 64), 768, 32, 0));
  Case stale = dllm_step("stale NaN store rows", {129, 70, 64}, {20, 16, 130}, 256, 2, 3);
  stale.nan_outside = true;
  v.push_back(stale);
  Case k = packed("keys offset", {200}, 2);
  k.kv_rows = 3000;
  k.tiles = {{0, 100, 1000, 2999}, {100, 150, 5, 70}, {150, 200, 2999, 3000}};
  v.push_back(k);
  v.push_back(slots("3 slots [16 | 112]", {129, 640, 64}, {16, 16, 16}, {112, 112, 48}, 640, 2));
  v.push_back(slots("8 slots x [16 | 112], 32 heads", std::vector<int32_t>(8, 768), std::vector<int32_t>(8, 16),
                    std::vector<int32_t>(8, 112), 800, 32));
  Case mid{"scored rows mid-tile",
           330,
           400,
           3,
           {{0, 100, 0, 150}, {100, 300, 150, 400}, {300, 330, 10, 20}},
           {{10, 40, 0, 150}, {150, 250, 150, 400}},
           false};
  v.push_back(mid);
  // The twins' Flash-Cache case: NaN in the store rows past each slot's keys (read by whole key tiles).
  v.push_back(Case{"2 slots of 128 rows, NaN past the keys",
                   256,
                   1536,
                   32,
                   {{0, 128, 0, 700}, {128, 256, 768, 1157}},
                   {{0, 16, 0, 700}, {128, 144, 768, 1157}},
                   true});
  return v;
}

/// Round to nearest even bf16 (finite inputs).
uint16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// The case's device buffers: q, k, v (normal, q scaled by 2 for some near one-hot rows), out, the
/// table (tiles, then score tiles), work list, flags and scores.
struct CaseBuffers {
  const Case& c;
  int64_t width;
  DeviceBuffer q, k, v, out, table, flags, count, scores;

  explicit CaseBuffers(const Case& cs)
      : c(cs),
        width(static_cast<int64_t>(cs.heads) * kHeadDim),
        q(static_cast<size_t>(cs.q_rows * width) * 2),
        k(static_cast<size_t>(cs.kv_rows * width) * 2),
        v(static_cast<size_t>(cs.kv_rows * width) * 2),
        out(static_cast<size_t>(cs.q_rows * width) * 2),
        table((cs.tiles.size() + cs.scored.size()) * 16),
        flags(sizeof(int)),
        count(sizeof(int32_t)),
        scores(static_cast<size_t>(cs.kv_rows) * sizeof(float)) {
    std::mt19937_64 rng(std::hash<std::string>()(c.name));
    std::normal_distribution<float> normal(0.f, 1.f);
    auto upload = [&](DeviceBuffer& b, int64_t rows, float scale, bool is_q) {
      std::vector<bool> used(static_cast<size_t>(rows), !c.nan_outside);
      for (const Tile& t : c.tiles)
        for (int32_t r = is_q ? t.q0 : t.k0; r < (is_q ? t.q1 : t.k1); ++r) used[static_cast<size_t>(r)] = true;
      std::vector<uint16_t> h(static_cast<size_t>(rows * width));
      for (size_t i = 0; i < h.size(); ++i)
        h[i] = used[i / static_cast<size_t>(width)] ? to_bf16(scale * normal(rng)) : uint16_t{0x7fc0};  // NaN
      CUDA_CHECK(cudaMemcpy(b.p, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    };
    upload(q, c.q_rows, 2.f, true);
    upload(k, c.kv_rows, 1.f, false);
    upload(v, c.kv_rows, 1.f, false);
    std::vector<int32_t> t;
    for (const auto* list : {&c.tiles, &c.scored})
      for (const Tile& x : *list) t.insert(t.end(), {x.q0, x.q1, x.k0, x.k1});
    CUDA_CHECK(cudaMemcpy(table.p, t.data(), t.size() * 4, cudaMemcpyHostToDevice));
  }

  AttentionArgs args() const {
    AttentionArgs a;
    a.q = q.as<__nv_bfloat16>();
    a.k = k.as<__nv_bfloat16>();
    a.v = v.as<__nv_bfloat16>();
    a.out = out.as<__nv_bfloat16>();
    a.q_rows = c.q_rows;
    a.kv_rows = c.kv_rows;
    a.n_heads = c.heads;
    a.head_dim = kHeadDim;
    a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kHeadDim)));
    a.error_flags = flags.as<int>();
    if (!c.scored.empty()) {
      a.importance = scores.as<float>();
      a.importance_weight = 1.0f / (16.0f * static_cast<float>(c.heads));
      a.table = table.as<int32_t>();
      a.score_tiles = table.as<int32_t>() + 4 * c.tiles.size();
      a.n_score_tiles = static_cast<int32_t>(c.scored.size());
    }
    return a;
  }

  /// Runs `kernel` (block_m-row work items; nullptr: the reference kernel) on poisoned outputs and
  /// zeroed scores; returns {output, scores} as floats.
  std::pair<std::vector<float>, std::vector<float>> run(
      const std::function<void(const AttentionArgs&, const AttentionWorkItem*, const int32_t*, int64_t)>& kernel,
      int block_m) {
    CUDA_CHECK(cudaMemset(out.p, 0xff, static_cast<size_t>(c.q_rows * width) * 2));  // NaN
    CUDA_CHECK(cudaMemset(scores.p, 0, static_cast<size_t>(c.kv_rows) * sizeof(float)));
    CUDA_CHECK(cudaMemset(flags.p, 0, sizeof(int)));
    const auto n_tiles = static_cast<int64_t>(c.tiles.size());
    if (kernel) {
      const int64_t capacity = attention_work_capacity(c.q_rows, n_tiles, block_m);
      DeviceBuffer work(static_cast<size_t>(capacity) * sizeof(AttentionWorkItem));
      attention_plan(table.as<int32_t>(), n_tiles, c.q_rows, c.kv_rows, block_m, work.as<AttentionWorkItem>(),
                     count.as<int32_t>(), capacity, flags.as<int>(), nullptr);
      kernel(args(), work.as<AttentionWorkItem>(), count.as<int32_t>(), capacity);
      CUDA_CHECK(cudaDeviceSynchronize());
    } else {
      attention_reference(args(), table.as<int32_t>(), n_tiles, flags.as<int>(), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    bench::check_flags(flags);
    std::vector<float> s(static_cast<size_t>(c.kv_rows));
    CUDA_CHECK(cudaMemcpy(s.data(), scores.p, s.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return {bench::to_float(out, static_cast<size_t>(c.q_rows * width)), s};
  }
};

/// max |got − ref| / max |ref| over the rows some tile covers (NaN counts as infinite); *written:
/// elements of the other rows that are no longer NaN.
double covered_rel_err(const Case& c, const std::vector<float>& got, const std::vector<float>& ref, int64_t* written) {
  const int64_t width = static_cast<int64_t>(c.heads) * kHeadDim;
  std::vector<bool> cov(static_cast<size_t>(c.q_rows), false);
  for (const Tile& t : c.tiles)
    for (int32_t r = t.q0; r < t.q1; ++r) cov[static_cast<size_t>(r)] = true;
  std::vector<float> g, r;
  *written = 0;
  for (int64_t row = 0; row < c.q_rows; ++row)
    for (int64_t j = row * width; j < (row + 1) * width; ++j) {
      const auto i = static_cast<size_t>(j);
      if (cov[static_cast<size_t>(row)]) {
        g.push_back(got[i]);
        r.push_back(ref[i]);
      } else {
        *written += std::isnan(got[i]) ? 0 : 1;
      }
    }
  return bench::max_rel_err(g, r);
}

/// max |got − ref| / max |ref| of the importance; *outside: keys no score tile reads that changed.
double score_rel_err(const Case& c, const std::vector<float>& got, const std::vector<float>& ref, int64_t* outside) {
  std::vector<bool> cov(got.size(), false);
  for (const Tile& t : c.scored)
    for (int32_t k = t.k0; k < t.k1; ++k) cov[static_cast<size_t>(k)] = true;
  std::vector<float> g, r;
  *outside = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (cov[i]) {
      g.push_back(got[i]);
      r.push_back(ref[i]);
    } else {
      *outside += got[i] != 0.f;
    }
  }
  return bench::max_rel_err(g, r);
}

/// Step 1 for one variant: every check case; returns false on a failure.
bool check_variant(BenchFlashVariant var, nlohmann::json& out) {
  const FlashVariant twin = bench::bench_variant_shipped_twin(var);
  const char* name = bench::bench_variant_name(var);
  bool ok = true;
  for (const Case& c : check_cases()) {
    CaseBuffers b(c);
    const auto [got, got_s] = b.run([&](const AttentionArgs& a, const AttentionWorkItem* w, const int32_t* n,
                                        int64_t cap) { bench::attention_flash_bench(a, var, w, n, cap, nullptr); },
                                    bench::bench_variant_block_m(var));
    const auto [ship, ship_s] = b.run([&](const AttentionArgs& a, const AttentionWorkItem* w, const int32_t* n,
                                          int64_t cap) { attention_flash(a, twin, w, n, cap, nullptr); },
                                      flash_block_m(twin));
    const auto ref = b.run(nullptr, 0).first;
    int64_t written = 0, written_ref = 0, outside = 0;
    const double e_ship = covered_rel_err(c, got, ship, &written), e_ref = covered_rel_err(c, got, ref, &written_ref);
    const double e_score = c.scored.empty() ? 0.0 : score_rel_err(c, got_s, ship_s, &outside);
    const bool pass = e_ship <= kOutTol && e_ref <= kOutTol && e_score <= kScoreTol && written == 0 && outside == 0;
    ok = ok && pass;
    std::printf("| %s | %s | %.2e | %.2e | %s | %lld | %lld | %s |\n", name, c.name.c_str(), e_ship, e_ref,
                c.scored.empty() ? "-" : std::to_string(e_score).c_str(), static_cast<long long>(written),
                static_cast<long long>(outside), pass ? "ok" : "FAIL");
    std::fflush(stdout);
    out["check"].push_back({{"variant", name},
                            {"shipped", flash_variant_name(twin)},
                            {"case", c.name},
                            {"rel_err_vs_shipped", e_ship},
                            {"rel_err_vs_reference", e_ref},
                            {"importance_rel_err_vs_shipped", e_score},
                            {"uncovered_elements_written", written},
                            {"unscored_keys_changed", outside},
                            {"pass", pass}});
  }
  return ok;
}

/// One timed shape: the attention table (+ score tiles) over input sets of q_rows / kv_rows.
struct Shape {
  std::string label;
  int64_t q_rows = 0, kv_rows = 0, n_tiles = 0, n_scored = 0, window_rows = 0;
  std::vector<int32_t> table;
  double flops = 0;
};

/// Step 2 for one variant and shape: variant and shipped twin alternate over `rounds` rounds.
void time_shape(BenchFlashVariant var, const Shape& s, int heads, int warmup, int iters, int rounds,
                cudaStream_t stream, nlohmann::json& out) {
  const FlashVariant twin = bench::bench_variant_shipped_twin(var);
  const int64_t width = static_cast<int64_t>(heads) * kHeadDim;
  const size_t set_bytes = static_cast<size_t>((2 * s.q_rows + 2 * s.kv_rows) * width) * 2;
  const bench::InputSets in(static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / set_bytes + 1, 1, 8)), s.q_rows,
                            s.kv_rows, heads, stream);
  DeviceBuffer table(s.table.size() * 4), flags(sizeof(int)), scores(static_cast<size_t>(s.kv_rows) * 4);
  CUDA_CHECK(cudaMemcpyAsync(table.p, s.table.data(), s.table.size() * 4, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemsetAsync(flags.p, 0, sizeof(int), stream));
  CUDA_CHECK(cudaMemsetAsync(scores.p, 0, static_cast<size_t>(s.kv_rows) * 4, stream));
  for (const bool importance : {false, true}) {
    if (importance && s.n_scored == 0) continue;
    std::vector<double> t_var, t_ship;
    for (int r = 0; r < rounds; ++r)
      for (const bool shipped : {false, true}) {
        const int block_m = shipped ? flash_block_m(twin) : bench::bench_variant_block_m(var);
        const int64_t capacity = attention_work_capacity(s.q_rows, s.n_tiles, block_m);
        DeviceBuffer work(static_cast<size_t>(capacity) * sizeof(AttentionWorkItem)), count(sizeof(int32_t));
        attention_plan(table.as<int32_t>(), s.n_tiles, s.q_rows, s.kv_rows, block_m, work.as<AttentionWorkItem>(),
                       count.as<int32_t>(), capacity, flags.as<int>(), stream);
        const bench::Timing t = bench::time_launches(
            [&](int i) {
              AttentionArgs a = in.args(i % in.size());
              if (importance) {
                a.importance = scores.as<float>();
                a.importance_weight = 1.0f / static_cast<float>(s.window_rows * heads);
                a.table = table.as<int32_t>();
                a.score_tiles = table.as<int32_t>() + 4 * s.n_tiles;
                a.n_score_tiles = static_cast<int32_t>(s.n_scored);
                a.error_flags = flags.as<int>();
              }
              if (shipped)
                attention_flash(a, twin, work.as<AttentionWorkItem>(), count.as<int32_t>(), capacity, stream);
              else
                bench::attention_flash_bench(a, var, work.as<AttentionWorkItem>(), count.as<int32_t>(), capacity,
                                             stream);
            },
            stream, warmup, iters);
        (shipped ? t_ship : t_var).push_back(t.median_us);
      }
    bench::check_flags(flags);
    std::sort(t_var.begin(), t_var.end());
    std::sort(t_ship.begin(), t_ship.end());
    const double v_us = t_var[t_var.size() / 2], s_us = t_ship[t_ship.size() / 2];
    std::printf("| %s | %s | %s | %.1f | %s %.1f | %.3f | %.1f |\n", bench::bench_variant_name(var), s.label.c_str(),
                importance ? "yes" : "no", v_us, flash_variant_name(twin), s_us, v_us / s_us,
                s.flops / (v_us * 1e-6) / 1e12);
    std::fflush(stdout);
    out["timing"].push_back({{"variant", bench::bench_variant_name(var)},
                             {"shipped", flash_variant_name(twin)},
                             {"shape", s.label},
                             {"importance", importance},
                             {"median_us", v_us},
                             {"shipped_median_us", s_us},
                             {"ratio", v_us / s_us},
                             {"rounds_us", t_var},
                             {"shipped_rounds_us", t_ship}});
  }
}

std::vector<Shape> timed_shapes(const std::string& window_shapes, int64_t window_rows, const std::string& batches,
                                const std::string& seqlens, int heads) {
  std::vector<Shape> v;
  for (const bench::WindowShape& w : bench::parse_window_shapes(window_shapes)) {
    Shape s;
    s.label = "window " + std::to_string(w.slots) + ":" + std::to_string(w.q) + ":" + std::to_string(w.k);
    s.q_rows = w.slots * w.q;
    s.kv_rows = w.slots * w.k;
    s.table = bench::window_table(w, window_rows, 0, s.n_tiles);
    s.n_scored = w.slots;
    s.window_rows = window_rows;
    s.flops = 4.0 * static_cast<double>(w.slots * w.q * w.k) * heads * kHeadDim;
    v.push_back(s);
  }
  for (const long long B : bench::parse_list(batches))
    for (const long long L : bench::parse_list(seqlens)) {
      Shape s;
      s.label = "prefill " + std::to_string(B) + " x " + std::to_string(L);
      s.q_rows = s.kv_rows = B * L;
      for (long long b = 0; b < B; ++b)
        s.table.insert(s.table.end(), {static_cast<int32_t>(b * L), static_cast<int32_t>((b + 1) * L),
                                       static_cast<int32_t>(b * L), static_cast<int32_t>((b + 1) * L)});
      s.n_tiles = B;
      s.flops = 4.0 * static_cast<double>(B * L * L) * heads * kHeadDim;
      v.push_back(s);
    }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flash attention tile shapes no policy picks (bench/kernels/) vs the shipped ones: check, then time"};
  std::string variants = "m128n64,m128n128,wgmma_m128n64",
              window_shapes = "1:128:768,16:128:768,32:128:768,32:128:1280";
  std::string batches = "8", seqlens = "1024,2048", json_path;
  int heads = 32, warmup = 5, iters = 20, rounds = 3;
  int64_t window_rows = 16;
  bool check_only = false;
  app.add_option("--variants", variants,
                 "bench variants (m128n64, m128n128, wgmma_m128n64; those that cannot run "
                 "on this device or build are skipped)");
  app.add_option("--window-shapes", window_shapes, "Flash-Cache shapes S:Q:K,... (slots, query rows, keys per slot)");
  app.add_option("--window-rows", window_rows, "rows of each slot's scored window")->check(CLI::PositiveNumber);
  app.add_option("--batches", batches, "prefill batch sizes B (empty: none)");
  app.add_option("--seqlens", seqlens, "prefill sequence lengths L");
  app.add_option("--heads", heads, "attention heads of the timed shapes")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "warm-up launches per measurement set");
  app.add_option("--iters", iters, "timed measurements per round (median)")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "alternating rounds of variant and shipped twin (median)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--check-only", check_only, "run the correctness check only");
  app.add_option("--json", json_path, "write results as JSON");
  CLI11_PARSE(app, argc, argv);

  try {
    const bench::DeviceInfo dev = bench::device_info();
    std::vector<BenchFlashVariant> vars;
    for (const std::string& n : bench::split(variants)) {
      bool found = false;
      for (const BenchFlashVariant v :
           {BenchFlashVariant::kM128N64, BenchFlashVariant::kM128N128, BenchFlashVariant::kWgmmaM128N64})
        if (n == bench::bench_variant_name(v)) {
          found = true;
          if (bench::bench_variant_runs_on(v, dev.cc_major, dev.cc_minor) &&
              flash_variant_runs_on(bench::bench_variant_shipped_twin(v), dev.cc_major, dev.cc_minor))
            vars.push_back(v);
          else
            std::printf("(%s skipped: not in this build or not for sm_%d%d)\n", n.c_str(), dev.cc_major, dev.cc_minor);
        }
      if (!found) throw std::runtime_error("--variants: unknown variant '" + n + "'");
    }
    nlohmann::json out = {{"bench", "attention_variants"},    {"device", dev.name},
                          {"sm_count", dev.sm_count},         {"commit", bench::commit_id()},
                          {"check", nlohmann::json::array()}, {"timing", nlohmann::json::array()}};
    std::printf("device: %s (%d SMs)\n\n", dev.name.c_str(), dev.sm_count);
    std::printf(
        "| variant | case | vs shipped | vs reference | importance vs shipped | uncovered written | "
        "unscored keys changed | |\n|---|---|---|---|---|---|---|---|\n");
    bool ok = true;
    for (const BenchFlashVariant v : vars) ok = check_variant(v, out) && ok;
    if (!ok) {
      bench::write_json(json_path, out);
      std::fprintf(stderr, "attention_variants_bench: check failed\n");
      return 1;
    }
    if (!check_only) {
      cudaStream_t stream;
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      std::printf(
          "\n| variant | shape (%d heads) | importance | median us | shipped us | variant / shipped | "
          "TFLOP/s |\n|---|---|---|---|---|---|---|\n",
          heads);
      for (const Shape& s : timed_shapes(window_shapes, window_rows, batches, seqlens, heads))
        for (const BenchFlashVariant v : vars) time_shape(v, s, heads, warmup, iters, rounds, stream, out);
      CUDA_CHECK(cudaStreamDestroy(stream));
    }
    bench::write_json(json_path, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_variants_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
