// Flash-Verify on a shifted-logit model (Dream: position p is predicted by output row p − 1,
// logits_source in denoise/block_decoding.h), on the tiny Dream checkpoint tests/data/golden/dream_a
// (fp32, CPU). The verify tile gets one source row R_i per candidate (flash_verify.h): position
// c_i − 1 with its token in mask row M_i's view ("view i": the drafts of candidates k < i filled in,
// the others undecoded), attending like M_i. Properties that fail when the shift is handled wrong:
//  * SourceRowTokens / BatchLayout: R_i's token is draft_k when c_i − 1 is candidate c_k with k < i,
//    x[c_i − 1] otherwise (a later candidate's [MASK], a decoded or prompt token); tile n_src = S,
//    positions c_i − 1, the logit rows are the R rows; without the shift the batch is the released
//    layout (no source rows, logit rows = the M rows);
//  * VerifyPassEqualsTheFullForwardOfEachView: on the checkpoint's first layer (K/V depend on token
//    and position only, so a full forward's cache is exact for every view), the verify pass's
//    logits of candidate i equal a full forward (no cache) of the view-i canvas read at row c_i − 1
//    — with c_i − 1 a kept prompt position, a kept or cached decoded one, a cached [MASK], an
//    earlier candidate (its draft) and a later one (its [MASK]), over two tiles of two slots — and
//    differ from the full forward's rows c_i (unshifted) and, where c_i − 1 is an earlier
//    candidate, from the all-masked canvas's row c_i − 1 (view ignored) by far more than the
//    tolerance; unshifted (no source rows) the same pass gives the view-i canvas's row c_i;
//  * DenoiserRunsWithVerify: generate with --cache flash --verify decodes every canvas, accepts
//    some candidates, and its tiles keep 2·bm rows (T = 2·bm − 3S) as the released rule.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "common/golden_fixture.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "core/check.h"
#include "denoise/flash_cache.h"
#include "denoise/flash_verify.h"

namespace flashdllm::test {
namespace {

CpuCheckpoint& dream() { return cpu_checkpoint(test_data_dir() / "golden" / "dream_a", 1); }

/// The checkpoint's first layer only, for its lifetime (as tests/model/test_dream_forward.cpp runs
/// the first i layers): with one layer a position's K/V depend on its token and position alone, so
/// a full forward's cache is exact for every view of the verify tile (with two, the second layer's
/// K/V of a cached position would depend on the candidates' tokens, which differ between views).
struct OneLayer {
  Model& m;
  int64_t saved;
  explicit OneLayer(Model& model) : m(model), saved(model.config.n_layers) { m.config.n_layers = 1; }
  ~OneLayer() { m.config.n_layers = saved; }
  OneLayer(const OneLayer&) = delete;
  OneLayer& operator=(const OneLayer&) = delete;
};

/// One slot's canvas and tile: x (prompt + canvas, kMask where undecoded), kept positions,
/// candidates in order with their drafts.
struct SlotCase {
  std::vector<int32_t> x, kept, candidates, drafts;
};

constexpr int32_t kL = 21;  // positions per slot (= the store stride)

/// Slot 0: prompt of 5 tokens, canvas [5, 21) with decoded positions 6, 9, 10, 14, 17, 18.
/// Candidate (source c_i − 1): c0 = 11 (10: kept decoded), c1 = 8 (7: c2, later: [MASK]),
/// c2 = 7 (6: cached decoded), c3 = 12 (11: c0, earlier: draft_0), c4 = 5 (4: kept prompt),
/// c5 = 16 (15: cached [MASK]), c6 = 13 (12: c3, earlier: draft_3), c7 = 19 (18: cached decoded).
/// Slot 1: prompt of 17 tokens, canvas [17, 21) with 17 decoded, no kept rows:
/// c0 = 19 (18: c1, later), c1 = 18 (17: cached decoded), c2 = 20 (19: c0, earlier).
std::vector<SlotCase> slot_cases(int32_t mask) {
  const std::vector<std::vector<int32_t>> prompts = {
      {921, 264, 674, 744, 270},
      {424, 161, 104, 858, 256, 456, 536, 259, 791, 386, 527, 210, 141, 923, 622, 416, 1002}};
  std::vector<SlotCase> v(2);
  v[0].x = prompts[0];
  v[0].x.resize(kL, mask);
  for (const auto& [p, t] :
       std::vector<std::pair<int, int32_t>>{{6, 417}, {9, 88}, {10, 530}, {14, 61}, {17, 903}, {18, 240}})
    v[0].x[static_cast<size_t>(p)] = t;
  v[0].kept = {10, 4, 14, 9};
  v[0].candidates = {11, 8, 7, 12, 5, 16, 13, 19};
  v[0].drafts = {298, 537, 467, 161, 739, 472, 716, 132};
  v[1].x = prompts[1];
  v[1].x.resize(kL, mask);
  v[1].x[17] = 366;
  v[1].candidates = {19, 18, 20};
  v[1].drafts = {165, 191, 93};
  return v;
}

/// The slots and tiles of `cases` (store stride kL; keys = every position outside the tile).
void make_tiles(const std::vector<SlotCase>& cases, bool shifted, std::vector<FlashSlot>& slots,
                std::vector<FlashVerifyTile>& tiles) {
  slots.clear();
  tiles.clear();
  for (size_t j = 0; j < cases.size(); ++j) {
    FlashSlot s;
    s.request = static_cast<int64_t>(j);
    s.x = cases[j].x;
    s.seqlen_k = kL;
    s.logit_shift = shifted;
    slots.push_back(s);
    FlashVerifyTile v;
    v.slot = static_cast<int64_t>(j);
    v.kept = cases[j].kept;
    v.candidates = cases[j].candidates;
    v.drafts = cases[j].drafts;
    v.source_rows = shifted;
    for (int32_t p = 0; p < kL; ++p)
      if (std::count(v.kept.begin(), v.kept.end(), p) + std::count(v.candidates.begin(), v.candidates.end(), p) == 0)
        v.keys.push_back(p);
    tiles.push_back(v);
  }
}

TEST(DreamVerify, SourceRowTokensAreTheMaskRowsView) {
  const int32_t mask = dream().model.config.mask_token_id;
  std::vector<FlashSlot> slots;
  std::vector<FlashVerifyTile> tiles;
  make_tiles(slot_cases(mask), true, slots, tiles);
  const std::vector<int32_t> want0 = {530, mask, 417, 298, 270, mask, 161, 240};
  const std::vector<int32_t> want1 = {mask, 366, 165};
  for (size_t i = 0; i < want0.size(); ++i)
    EXPECT_EQ(flash_verify_source_token(slots[0], tiles[0], i), want0[i]) << "slot 0 candidate " << i;
  for (size_t i = 0; i < want1.size(); ++i)
    EXPECT_EQ(flash_verify_source_token(slots[1], tiles[1], i), want1[i]) << "slot 1 candidate " << i;
  EXPECT_THROW(flash_verify_source_token(slots[0], tiles[0], 8), Error);
  FlashVerifyTile at0 = tiles[0];
  at0.candidates[4] = 0;  // position 0 has no source position (a prompt has >= 1 token)
  try {
    flash_verify_batch(slots, {at0}, kL);
    ADD_FAILURE() << "a candidate at position 0 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("no source position"), std::string::npos) << e.what();
  }
}

TEST(DreamVerify, BatchLayoutWithAndWithoutSourceRows) {
  const int32_t mask = dream().model.config.mask_token_id;
  const std::vector<SlotCase> cases = slot_cases(mask);
  for (bool shifted : {false, true}) {
    SCOPED_TRACE(shifted ? "shifted" : "unshifted");
    std::vector<FlashSlot> slots;
    std::vector<FlashVerifyTile> tiles;
    make_tiles(cases, shifted, slots, tiles);
    const VerifyBatch vb = flash_verify_batch(slots, tiles, kL);
    ASSERT_EQ(vb.tiles.size(), 2u);
    int32_t q = 0;
    std::vector<int32_t> logit_rows;
    for (size_t j = 0; j < 2; ++j) {
      const SlotCase& c = cases[j];
      const auto T = static_cast<int32_t>(c.kept.size()), S = static_cast<int32_t>(c.candidates.size());
      const VerifyTile& t = vb.tiles[j];
      EXPECT_EQ(t.q_start, q);
      EXPECT_EQ(t.q_end, q + T + (shifted ? 3 : 2) * S);
      EXPECT_EQ(t.n_cand, S);
      EXPECT_EQ(t.n_src, shifted ? S : 0);
      EXPECT_EQ(t.n_kept(), T);
      EXPECT_EQ(static_cast<int64_t>(t.q_end - t.q_start), tiles[j].rows());
      for (int32_t i = 0; i < S; ++i) {
        const auto r = static_cast<size_t>(q + T + 2 * S + i), m = static_cast<size_t>(q + T + S + i);
        EXPECT_EQ(vb.positions[m], c.candidates[static_cast<size_t>(i)]);
        EXPECT_EQ(vb.token_ids[m], mask);
        if (shifted) {
          EXPECT_EQ(vb.positions[r], c.candidates[static_cast<size_t>(i)] - 1);
          EXPECT_EQ(vb.token_ids[r], flash_verify_source_token(slots[j], tiles[j], static_cast<size_t>(i)));
        }
        logit_rows.push_back(static_cast<int32_t>(shifted ? r : m));
      }
      q = t.q_end;
    }
    EXPECT_EQ(vb.n_tokens(), q);
    EXPECT_EQ(vb.logit_rows, logit_rows);
  }
}

/// Full-forward logits row `row` of canvas `x` (fresh, no cache).
std::vector<float> full_row(const std::vector<int32_t>& x, int64_t row) {
  CpuCheckpoint& g = dream();
  const std::vector<float> all = full_logits(*g.backend, g.model, {x});
  const int64_t V = g.model.config.embedding_size;
  return std::vector<float>(all.begin() + row * V, all.begin() + (row + 1) * V);
}

/// The verify pass over `cases` with every cached K/V from a full forward of the slots' canvases.
/// Returns its logits [Σ S, V].
std::vector<float> verify_logits(const std::vector<SlotCase>& cases, bool shifted) {
  CpuCheckpoint& g = dream();
  Backend& be = *g.backend;
  const ModelConfig& c = g.model.config;
  std::vector<std::vector<int32_t>> xs;
  for (const SlotCase& s : cases) xs.push_back(s.x);
  const auto n = static_cast<int64_t>(cases.size());
  KvStore kv = make_kv_store(be, c, n * kL, /*shared_across_layers=*/false);
  ForwardWorkspace ws = make_forward_workspace(be, c, n * kL, n * kL, n);
  model_forward(be, g.model, full_recompute_batch(xs), kv, ws);  // store row j·kL + p = slot j, position p
  std::vector<FlashSlot> slots;
  std::vector<FlashVerifyTile> tiles;
  make_tiles(cases, shifted, slots, tiles);
  const VerifyBatch vb = flash_verify_batch(slots, tiles, kL);
  ForwardWorkspace vws = make_forward_workspace(be, c, vb.n_tokens(), static_cast<int64_t>(vb.logit_rows.size()), n,
                                                static_cast<int64_t>(vb.key_rows.size()));
  const Tensor lg = model_verify_forward(be, g.model, vb, kv, vws);
  std::vector<float> out(static_cast<size_t>(lg.numel()));
  be.copy_to_host(out.data(), lg);
  return out;
}

TEST(DreamVerify, VerifyPassEqualsTheFullForwardOfEachView) {
  CpuCheckpoint& g = dream();
  ASSERT_TRUE(g.model.config.logit_shift);
  const OneLayer one(g.model);
  const int32_t mask = g.model.config.mask_token_id;
  const int64_t V = g.model.config.embedding_size;
  const std::vector<SlotCase> cases = slot_cases(mask);
  for (bool shifted : {true, false}) {
    const std::vector<float> got = verify_logits(cases, shifted);
    size_t r = 0;
    int earlier_sources = 0;
    for (size_t j = 0; j < cases.size(); ++j) {
      const SlotCase& c = cases[j];
      for (size_t i = 0; i < c.candidates.size(); ++i, ++r) {
        const std::string what = fmt::format("{} slot {} candidate {} (position {})", shifted ? "shifted" : "unshifted",
                                             j, i, c.candidates[i]);
        std::vector<int32_t> view = c.x;  // view i: the drafts of candidates k < i filled in
        for (size_t k = 0; k < i; ++k) view[static_cast<size_t>(c.candidates[k])] = c.drafts[k];
        const int64_t p = c.candidates[i], src = shifted ? p - 1 : p;
        const std::vector<float> want = full_row(view, src);
        const std::vector<float> row(got.begin() + static_cast<int64_t>(r) * V,
                                     got.begin() + static_cast<int64_t>(r + 1) * V);
        // The same keys and values as the full forward (the cache is a full forward's, exact for
        // every view outside the tile): only the order of the float ops differs.
        EXPECT_LE(rel_max_err(row, want), kFp32OpRelTol) << what;
        if (!shifted) continue;
        // Reading the wrong row, or ignoring the view, is far off (the test can tell them apart).
        EXPECT_GT(rel_max_err(row, full_row(view, p)), 100 * kFp32OpRelTol) << what << ": row c_i";
        // Where c_i − 1 is an earlier candidate its token differs between the views (draft vs
        // [MASK]): the all-masked canvas's row is far off there.
        if (std::find(c.candidates.begin(), c.candidates.begin() + static_cast<int64_t>(i), src) !=
            c.candidates.begin() + static_cast<int64_t>(i)) {
          EXPECT_GT(rel_max_err(row, full_row(c.x, src)), 100 * kFp32OpRelTol) << what << ": no view";
          ++earlier_sources;
        }
      }
    }
    EXPECT_EQ(r * static_cast<size_t>(V), got.size());
    EXPECT_EQ(earlier_sources, shifted ? 3 : 0);
  }
}

GenerateOptions verify_options() {
  GenerateOptions o;
  o.decode.cache = CacheMode::kFlash;
  o.decode.verify = true;
  o.decode.block_length = 8;
  o.sampling.gen_length = 32;
  o.sampling.threshold = 0.9;
  o.decode.gamma = 0.3;
  return o;
}

TEST(DreamVerify, DenoiserRunsWithVerify) {
  CpuCheckpoint& g = dream();
  const GenerateOptions o = verify_options();
  const int64_t bm = o.decode.effective_block_length();
  // The golden prompts (the tiny model often ends its answer early: several requests get no tile).
  std::vector<std::vector<int32_t>> prompts;
  const nlohmann::json j = load_json(test_data_dir() / "golden" / "dream_a" / "gen_dream.json");
  for (const char* set : {"main", "batch_pair"})
    for (const nlohmann::json& p : j["prompts"][set]) prompts.push_back(p.get<std::vector<int32_t>>());
  prompts.push_back({5, 6});
  FlashCacheDenoiser den(*g.backend, g.model, o);
  int64_t tiles = 0, full_tiles = 0;
  const FlashCacheResult res = den.generate(prompts, [&](FlashStep& st) {
    if (st.phase != 2) return;
    const FlashVerifyTile& v = *st.verification->tile;
    ASSERT_TRUE(v.source_rows);
    const auto S = static_cast<int64_t>(v.candidates.size());
    EXPECT_EQ(v.kept_budget, std::max<int64_t>(2 * bm - 3 * S, 0)) << "released kept rule with source rows";
    ++tiles;
    if (static_cast<int64_t>(v.kept.size()) == v.kept_budget) {
      EXPECT_EQ(v.rows(), 2 * bm);
      ++full_tiles;
    }
  });
  ASSERT_EQ(res.requests.size(), prompts.size());
  int64_t candidates = 0, accepted = 0;
  for (const FlashRequestResult& r : res.requests) {
    EXPECT_FALSE(r.output_ids.empty());
    EXPECT_EQ(std::count(r.output_ids.begin(), r.output_ids.end(), g.model.config.mask_token_id), 0);
    candidates += r.candidates;
    accepted += r.accepted;
  }
  EXPECT_GT(candidates, 10);
  EXPECT_GT(tiles, 5);
  EXPECT_GT(full_tiles, 0);
  EXPECT_GT(accepted, 0) << "no candidate was ever accepted: the verify pass proves nothing end to end";
  // The same run again (a fresh denoiser): deterministic.
  FlashCacheDenoiser again(*g.backend, g.model, o);
  const FlashCacheResult res2 = again.generate(prompts);
  for (size_t j = 0; j < prompts.size(); ++j) EXPECT_EQ(res2.requests[j].output_ids, res.requests[j].output_ids);
}

}  // namespace
}  // namespace flashdllm::test
