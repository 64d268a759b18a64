// Flash-Verify (src/denoise/flash_verify.*, the verify branch of FlashCacheDenoiser, and
// model_verify_forward) on the CPU backend:
//  * isolation property (exact cache): on random one-layer checkpoints (where a position's K/V does
//    not depend on its context, so a cache refreshed from the current state is exact) the verify
//    pass's mask-view logits for candidate i equal the logits of a separate full forward whose
//    context holds the drafts of candidates < i and masks for the others; draft row i likewise
//    (drafts <= i), kept rows the all-masked context. Cases include two slots (gather offsets), a
//    short prompt (nd < T: fewer kept rows) and several seeds / shapes. On the 3-layer golden model:
//    a tile without candidates reproduces a cached main pass over the kept rows, and the verify pass
//    leaves the K/V cache bit-identical.
//  * acceptance rules (product = released, paper) on hand-made probabilities; blocked candidates;
//    forced acceptance.
//  * planning: candidates / kept rows / keys in both modes, the short-prompt clamp, a window shorter
//    than block_length; the verify batch layout; the phase-2 commit (pinning, EOS rule, errors).
//  * golden parity: VILA-Lab/Flash-dLLM fp32 verify run (gen_flashdllm.json run 9: 12 requests, G 64,
//    1 slot), teacher-forced through 1 and 4 slots with reference_quirks: every phase-1 decision and
//    every acceptance must equal the recorded one unless a confidence / running product is within
//    1e-4 of ε / γ or the candidate order has a near-tie, and until the a_t ranking has a tie at a
//    cut that shapes the next state (decoded EOS padding past seqlen_k all scores exactly 0, ordered
//    by torch's unstable sort upstream; later decisions are reported, not failed); drafts must equal
//    the recorded tokens; counters (passes, query rows, n_steps, num_tokens) must match.
//    Free-running: whole trajectories up to the first near-tie.
//  * the released code's crash (fewer undecoded positions than a window) is handled: a forced run
//    into the end of the slot row completes with short windows and verify tiles, identically with 1
//    and 2 slots (the rows of a short window are its own); the configuration that crashed upstream
//    (fp32, G 128, verify, 1 slot, reference_quirks) runs free through short windows to the end.
//  * counters (forward passes, candidates, accepted, per request and in aggregate); a verify pass
//    whose acceptances are overridden to none leaves the Flash-Cache trajectory unchanged (the pass
//    has no side effect); options, presets and errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "backend/backend.h"
#include "common/golden_fixture.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "denoise/flash_cache.h"
#include "denoise/flash_verify.h"

namespace flashdllm::test {
namespace {

using nlohmann::json;

using Golden = GoldenFixture;
Golden& golden() { return golden_fixture(1); }

// ================================================================================ helpers

/// A random LLaDA checkpoint on the CPU backend with sharp, position-dependent attention (q/k
/// weights N(0, (3/sqrt(d))²) as in the golden G1 init), so that contexts matter.
Model random_model(Backend& be, uint64_t seed, int64_t n_layers, int64_t d_model, int64_t n_heads, int64_t vocab) {
  Model m;
  ModelConfig& c = m.config;
  c.d_model = d_model;
  c.n_layers = n_layers;
  c.n_heads = c.n_kv_heads = n_heads;
  c.head_dim = d_model / n_heads;
  c.mlp_hidden_size = 2 * d_model;
  c.vocab_size = c.embedding_size = vocab;
  c.max_sequence_length = 512;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5f;
  c.mask_token_id = static_cast<int32_t>(vocab - 3);
  c.eos_token_id = c.pad_token_id = static_cast<int32_t>(vocab - 2);
  c.model_type = "llada";
  c.block_type = "llama";
  m.weights = make_dummy_weights(be, c, seed);
  std::mt19937_64 rng(seed);
  auto fill = [&](Tensor& t, float mean, float sd) {
    std::normal_distribution<float> n(mean, sd);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = n(rng);
  };
  const float d = static_cast<float>(d_model);
  fill(m.weights.wte, 0.f, 1.f);
  for (auto& l : m.weights.layers) {
    fill(l.attn_norm, 1.f, 0.05f);
    fill(l.ff_norm, 1.f, 0.05f);
    Tensor qk = l.wqkv.slice_rows(0, 2 * d_model), v = l.wqkv.slice_rows(2 * d_model, 3 * d_model);
    fill(qk, 0.f, 3.f / std::sqrt(d));
    fill(v, 0.f, 1.f / std::sqrt(d));
    fill(l.attn_out, 0.f, 1.f / std::sqrt(d));
    fill(l.w_gate_up, 0.f, 1.f / std::sqrt(d));
    fill(l.ff_out, 0.f, 1.f / std::sqrt(static_cast<float>(c.mlp_hidden_size)));
  }
  fill(m.weights.ln_f, 1.f, 0.05f);
  fill(m.weights.lm_head, 0.f, 2.f / std::sqrt(d));
  m.rope = make_rope_tables(be, c, c.max_sequence_length);
  return m;
}

/// Writes the exact K/V of slot j's current row into the cache: one forward over [0, seqlen_k)
/// (each position its own query row and store row j·L + t).
void refresh_slot(Backend& be, const Model& m, const FlashSlot& s, int64_t j, int64_t L, KvStore& kv) {
  ForwardBatch fb;
  for (int32_t t = 0; t < static_cast<int32_t>(s.seqlen_k); ++t) {
    fb.token_ids.push_back(s.x[static_cast<size_t>(t)]);
    fb.positions.push_back(t);
    fb.kv_rows.push_back(static_cast<int32_t>(j * L) + t);
  }
  fb.tiles.push_back({0, static_cast<int32_t>(s.seqlen_k), static_cast<int32_t>(j * L),
                      static_cast<int32_t>(j * L + s.seqlen_k)});
  ForwardWorkspace ws = make_forward_workspace(be, m.config, s.seqlen_k, 1, 1);
  model_forward(be, m, fb, kv, ws);
}

std::vector<float> kv_bytes(const KvStore& kv) {
  std::vector<float> out;
  for (size_t l = 0; l < kv.k.size(); ++l) {
    out.insert(out.end(), kv.k[l].ptr<float>(), kv.k[l].ptr<float>() + kv.k[l].numel());
    out.insert(out.end(), kv.v[l].ptr<float>(), kv.v[l].ptr<float>() + kv.v[l].numel());
  }
  return out;
}

/// Commits `k` window entries of the slot with random tokens (never mask/eos), random order, then
/// re-ranks with random scores: a realistic mid-run state.
void advance(FlashSlot& s, const GenerateOptions& o, const ModelConfig& c, std::mt19937_64& rng, int64_t k) {
  const size_t w = s.window.size();
  std::vector<double> conf(w);
  std::uniform_real_distribution<double> u(0.0, 0.8);
  for (double& x : conf) x = u(rng);
  std::vector<int32_t> tok(w);
  std::uniform_int_distribution<int32_t> ti(0, static_cast<int32_t>(c.vocab_size) - 4);
  for (int32_t& t : tok) t = ti(rng);
  FlashDecision d = flash_decide(s, conf, tok, o);
  d.count = std::min<int64_t>(k, static_cast<int64_t>(w));
  ASSERT_TRUE(flash_commit(s, d, c.eos_token_id));
  std::vector<float> sc(s.full_pos.size());
  std::uniform_real_distribution<float> us(-1.f, 1.f);
  for (float& x : sc) x = us(rng);
  flash_rerank(s, sc, o);
}

/// Phase 1 on a slot: random confidences with `k1` of them >= ε, random drafts; returns the tile.
FlashVerifyTile phase1(FlashSlot& s, int64_t j, const GenerateOptions& o, const ModelConfig& c, std::mt19937_64& rng,
                       int64_t k1) {
  const size_t w = s.window.size();
  std::vector<double> conf(w);
  std::uniform_real_distribution<double> lo(0.05, 0.85);
  for (double& x : conf) x = lo(rng);
  for (int64_t i = 0; i < k1; ++i) conf[static_cast<size_t>(i) * 2 % w] = 0.91 + 0.01 * static_cast<double>(i);
  std::vector<int32_t> tok(w);
  std::uniform_int_distribution<int32_t> ti(0, static_cast<int32_t>(c.vocab_size) - 4);
  for (int32_t& t : tok) t = ti(rng);
  FlashDecision d = flash_decide(s, conf, tok, o);
  const int64_t n_valid = flash_verify_valid_count(s, d, o);
  flash_commit(s, d, c.eos_token_id);
  return flash_verify_plan_slot(s, j, d, n_valid, o);
}

// ================================================================================ isolation

struct IsoCase {
  std::string name;
  uint64_t seed = 1;
  int64_t d_model = 64, n_heads = 2;
  std::vector<int64_t> prompt_lens;  // one slot per prompt
  int64_t advance_by = 6;            // tokens committed before the verified iteration
  int64_t k1 = 2;
};

void PrintTo(const IsoCase& c, std::ostream* os) { *os << c.name; }

class VerifyIsolation : public ::testing::TestWithParam<IsoCase> {};

TEST_P(VerifyIsolation, MaskAndDraftRowsEqualSeparateFullForwards) {
  const IsoCase& ic = GetParam();
  auto be = make_cpu_backend(1);
  const Model m = random_model(*be, ic.seed, /*n_layers=*/1, ic.d_model, ic.n_heads, /*vocab=*/96);
  const ModelConfig& c = m.config;
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 24;
  o.decode.block_length = 8;
  const FlashTiling tiling{32};
  o.decode.verify = true;  // cap = 4 candidates, T = 16 − 2S kept rows
  std::mt19937_64 rng(ic.seed * 7919);
  std::uniform_int_distribution<int32_t> ti(0, static_cast<int32_t>(c.vocab_size) - 4);
  const int64_t max_p = *std::max_element(ic.prompt_lens.begin(), ic.prompt_lens.end());
  const int64_t L = flash_max_length(max_p, o.sampling.gen_length, o.decode.block_length, tiling.key_tile);
  std::vector<FlashSlot> slots;
  std::vector<FlashVerifyTile> tiles;
  for (size_t j = 0; j < ic.prompt_lens.size(); ++j) {
    std::vector<int32_t> prompt(static_cast<size_t>(ic.prompt_lens[j]));
    for (int32_t& t : prompt) t = ti(rng);
    slots.push_back(flash_init_slot(static_cast<int64_t>(j), prompt, L, o, c.mask_token_id, c.eos_token_id, tiling));
    advance(slots.back(), o, c, rng, ic.advance_by);
  }
  for (size_t j = 0; j < slots.size(); ++j) tiles.push_back(phase1(slots[j], static_cast<int64_t>(j), o, c, rng, ic.k1));
  for (const FlashVerifyTile& v : tiles) {
    ASSERT_EQ(v.candidates.size(), 4u) << "the case must exercise the full candidate cap";
    const FlashSlot& s = slots[static_cast<size_t>(v.slot)];
    EXPECT_EQ(static_cast<int64_t>(v.kept.size()), std::min(v.kept_budget, s.num_decoded));
  }
  // Exact cache (one layer: K/V depend only on token and position), then the verify pass.
  KvStore kv = make_kv_store(*be, c, static_cast<int64_t>(slots.size()) * L, false);
  for (size_t j = 0; j < slots.size(); ++j) refresh_slot(*be, m, slots[j], static_cast<int64_t>(j), L, kv);
  const std::vector<float> cache_before = kv_bytes(kv);
  VerifyBatch vb = flash_verify_batch(slots, tiles, L);
  vb.logit_rows.resize(static_cast<size_t>(vb.n_tokens()));
  std::iota(vb.logit_rows.begin(), vb.logit_rows.end(), 0);
  vb.row_keys.assign(vb.logit_rows.size(), 0);
  ForwardWorkspace ws = make_forward_workspace(*be, c, vb.n_tokens(), vb.n_tokens(), 4,
                                               static_cast<int64_t>(vb.key_rows.size()));
  Tensor lg = model_verify_forward(*be, m, vb, kv, ws);
  const int64_t V = c.embedding_size;
  std::vector<float> got(static_cast<size_t>(lg.numel()));
  be->copy_to_host(got.data(), lg);
  EXPECT_EQ(kv_bytes(kv), cache_before) << "the verify pass wrote the K/V cache";

  int rows_checked = 0;
  double worst = 0.0;
  int64_t row0 = 0;
  for (const FlashVerifyTile& v : tiles) {
    const FlashSlot& s = slots[static_cast<size_t>(v.slot)];
    const auto S = static_cast<int64_t>(v.candidates.size()), T = static_cast<int64_t>(v.kept.size());
    // ctx(n): the slot row [0, seqlen_k) with the first n candidates drafted, the others [MASK].
    std::vector<std::vector<float>> ctx_logits;
    for (int64_t n = 0; n <= S; ++n) {
      std::vector<int32_t> seq(s.x.begin(), s.x.begin() + s.seqlen_k);
      for (int64_t k = 0; k < n; ++k) seq[static_cast<size_t>(v.candidates[static_cast<size_t>(k)])] = v.drafts[static_cast<size_t>(k)];
      ctx_logits.push_back(full_logits(*be, m, {seq}));
    }
    auto check = [&](int64_t row, int64_t ctx, int32_t pos, const std::string& what) {
      const float* a = got.data() + (row0 + row) * V;
      const float* b = ctx_logits[static_cast<size_t>(ctx)].data() + static_cast<int64_t>(pos) * V;
      const double err = rel_max_err(std::span<const float>(a, static_cast<size_t>(V)),
                                     std::span<const float>(b, static_cast<size_t>(V)));
      worst = std::max(worst, err);
      EXPECT_LE(err, kFp32OpRelTol) << "slot " << v.slot << " " << what << " (position " << pos << ")";
      ++rows_checked;
    };
    for (int64_t r = 0; r < T; ++r) check(r, 0, v.kept[static_cast<size_t>(r)], fmt::format("kept row {}", r));
    for (int64_t i = 0; i < S; ++i) {
      check(T + i, i + 1, v.candidates[static_cast<size_t>(i)], fmt::format("draft row D{}", i));
      check(T + S + i, i, v.candidates[static_cast<size_t>(i)], fmt::format("mask row M{}", i));
    }
    // The views must actually differ (otherwise the test proves nothing): M_i vs D_i logits.
    const float* d0 = got.data() + (row0 + T) * V;
    const float* m0 = got.data() + (row0 + T + S) * V;
    EXPECT_GT(max_abs_diff(std::span<const float>(d0, static_cast<size_t>(V)), std::span<const float>(m0, static_cast<size_t>(V))),
              kDistinctLogitsMin);
    row0 += T + 2 * S;
  }
  std::cout << fmt::format("[verify isolation {}] {} rows checked, worst rel err {:.2e}\n", ic.name, rows_checked, worst);
}

INSTANTIATE_TEST_SUITE_P(
    RandomOneLayer, VerifyIsolation,
    ::testing::Values(IsoCase{"one_slot", 1, 64, 2, {20}, 6, 2}, IsoCase{"two_slots", 2, 64, 2, {17, 26}, 9, 1},
                      IsoCase{"short_prompt", 3, 64, 4, {4}, 1, 1}, IsoCase{"wide_heads", 4, 128, 2, {30, 9}, 5, 3}),
    [](const ::testing::TestParamInfo<IsoCase>& i) { return i.param.name; });

// Multi-layer (golden G1, 3 layers): a tile without candidates is a cached main pass over the kept
// rows (same context: the cache minus the kept positions, plus their fresh K/V).
TEST(VerifyForward, TileWithoutCandidatesEqualsACachedMainPassOverTheKeptRows) {
  Golden& g = golden();
  Backend& be = *g.backend;
  const ModelConfig& c = g.model.config;
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 32;
  o.decode.verify = true;
  const auto prompt = pick(g.flash["prompts"]["flash_verify"].get<std::vector<std::vector<int32_t>>>(), 2);
  const int64_t L = flash_max_length(static_cast<int64_t>(prompt.size()), o.sampling.gen_length, o.decode.block_length);
  std::vector<FlashSlot> slots = {flash_init_slot(0, prompt, L, o, c.mask_token_id, c.eos_token_id)};
  std::mt19937_64 rng(5);
  KvStore kv = make_kv_store(be, c, L, false);
  refresh_slot(be, g.model, slots[0], 0, L, kv);  // 3 layers: a stale but consistent cache
  advance(slots[0], o, c, rng, 5);
  // Phase 1 commits the whole window: S = 0, T = 2·bm kept rows.
  FlashSlot& s = slots[0];
  FlashDecision d = flash_decide(s, std::vector<double>(s.window.size(), 0.95), std::vector<int32_t>(s.window.size(), 7), o);
  ASSERT_EQ(d.count, o.decode.block_length);
  const int64_t n_valid = flash_verify_valid_count(s, d, o);
  flash_commit(s, d, c.eos_token_id);
  const FlashVerifyTile v = flash_verify_plan_slot(s, 0, d, n_valid, o);
  ASSERT_TRUE(v.candidates.empty());
  ASSERT_EQ(static_cast<int64_t>(v.kept.size()), 2 * o.decode.block_length);
  VerifyBatch vb = flash_verify_batch(slots, {v}, L);
  vb.logit_rows.resize(v.kept.size());
  std::iota(vb.logit_rows.begin(), vb.logit_rows.end(), 0);
  vb.row_keys.assign(vb.logit_rows.size(), 0);
  const std::vector<float> before = kv_bytes(kv);
  ForwardWorkspace ws = make_forward_workspace(be, c, vb.n_tokens(), vb.n_tokens(), 1, static_cast<int64_t>(vb.key_rows.size()));
  Tensor lg = model_verify_forward(be, g.model, vb, kv, ws);
  std::vector<float> got(static_cast<size_t>(lg.numel()));
  be.copy_to_host(got.data(), lg);
  EXPECT_EQ(kv_bytes(kv), before) << "the verify pass wrote the K/V cache";
  // Reference: a main-pass-style forward over the kept rows on a copy of the cache.
  KvStore kv2 = make_kv_store(be, c, L, false);
  for (size_t l = 0; l < kv.k.size(); ++l) {
    std::copy(kv.k[l].ptr<float>(), kv.k[l].ptr<float>() + kv.k[l].numel(), kv2.k[l].ptr<float>());
    std::copy(kv.v[l].ptr<float>(), kv.v[l].ptr<float>() + kv.v[l].numel(), kv2.v[l].ptr<float>());
  }
  ForwardBatch fb;
  for (size_t i = 0; i < v.kept.size(); ++i) {
    fb.token_ids.push_back(s.x[static_cast<size_t>(v.kept[i])]);
    fb.positions.push_back(v.kept[i]);
    fb.kv_rows.push_back(v.kept[i]);
    fb.logit_rows.push_back(static_cast<int32_t>(i));
    fb.row_keys.push_back(0);
  }
  fb.tiles.push_back({0, static_cast<int32_t>(v.kept.size()), 0, static_cast<int32_t>(s.seqlen_k)});
  ForwardWorkspace ws2 = make_forward_workspace(be, c, fb.n_tokens(), fb.n_tokens(), 1);
  Tensor lr = model_forward(be, g.model, fb, kv2, ws2);
  std::vector<float> want(static_cast<size_t>(lr.numel()));
  be.copy_to_host(want.data(), lr);
  EXPECT_LE(rel_max_err(got, want), kFp32OpRelTol);
}

TEST(VerifyForward, RejectsInconsistentBatches) {
  Golden& g = golden();
  Backend& be = *g.backend;
  const ModelConfig& c = g.model.config;
  KvStore kv = make_kv_store(be, c, 64, false);
  ForwardWorkspace ws = make_forward_workspace(be, c, 8, 8, 2, 64);
  auto base = [] {
    VerifyBatch vb;
    vb.token_ids = {1, 2, 3, 1000};
    vb.positions = {0, 5, 6, 6};
    vb.key_rows = {1, 2, 3, 4};
    vb.tiles = {{0, 4, 0, 4, 1, 0}};
    vb.logit_rows = {3};
    vb.row_keys = {0};
    return vb;
  };
  EXPECT_NO_THROW(model_verify_forward(be, g.model, base(), kv, ws));
  auto expect_error = [&](VerifyBatch vb, const std::string& needle) {
    try {
      model_verify_forward(be, g.model, vb, kv, ws);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  VerifyBatch vb = base();
  vb.tiles[0].n_cand = 3;
  expect_error(vb, "candidates");
  vb = base();
  vb.tiles[0].n_src = 2;  // more source rows than candidates
  expect_error(vb, "source rows");
  vb = base();
  vb.tiles[0].n_src = 1;  // 2·1 + 1 <= 4 rows: a valid tile with one source row
  EXPECT_NO_THROW(model_verify_forward(be, g.model, vb, kv, ws));
  vb = base();
  vb.key_rows[2] = 64;
  expect_error(vb, "key_rows[2]");
  vb = base();
  vb.key_rows[3] = -1;  // the first bad entry is named, whichever bound it breaks
  vb.key_rows[1] = 70;
  expect_error(vb, "key_rows[1] = 70");
  vb = base();
  vb.token_ids[2] = -5;
  expect_error(vb, "token id -5 (query row 2)");
  vb = base();
  vb.positions[1] = static_cast<int32_t>(g.model.rope.table.cos.rows());
  expect_error(vb, fmt::format("position {} (query row 1)", vb.positions[1]));
  vb = base();
  vb.tiles = {{0, 2, 0, 1, 0, 0}, {1, 4, 1, 4, 1, 0}};
  expect_error(vb, "overlap");
  vb = base();
  vb.positions.pop_back();
  expect_error(vb, "positions");
  ForwardWorkspace plain = make_forward_workspace(be, c, 8, 8, 2);
  try {
    model_verify_forward(be, g.model, base(), kv, plain);
    ADD_FAILURE() << "a workspace without verify buffers must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_verify_keys"), std::string::npos) << e.what();
  }
}

// ================================================================================ acceptance

TEST(VerifyAccept, ProductRuleIsTheRunningProduct) {
  const std::vector<int32_t> drafts = {5, 6, 7, 8};
  const std::vector<int32_t> argmax = {5, 6, 7, 8};
  const std::vector<uint8_t> none(4, 0);
  auto acc = [&](std::vector<double> p, double gamma, std::vector<uint8_t> blocked = {}) {
    if (blocked.empty()) blocked = none;
    return flash_verify_accept(p, p, argmax, drafts, blocked, VerifyRule::kProduct, gamma);
  };
  // README example: 0.9 · 0.9 = 0.81 < 0.85 rejects the 2nd candidate in the code.
  EXPECT_EQ(acc({0.9, 0.9, 0.99, 0.99}, 0.85), 1);
  EXPECT_EQ(acc({0.9, 0.9, 0.99, 0.99}, 0.8), 3);  // 0.9, 0.81, 0.8019 >= 0.8; 0.7939 < 0.8
  EXPECT_EQ(acc({0.999, 0.999, 0.999, 0.999}, 0.8), 4);
  EXPECT_EQ(acc({0.7, 1.0, 1.0, 1.0}, 0.8), 0);  // the first one fails: nothing
  EXPECT_EQ(acc({0.8, 1.0, 1.0, 1.0}, 0.8), 4);  // >= (inclusive)
  EXPECT_EQ(acc({0.99, 0.99, 0.99, 0.99}, 0.8, {0, 0, 1, 0}), 2);  // blocked: probability 0, stops
  EXPECT_EQ(flash_verify_accept({}, {}, {}, {}, {}, VerifyRule::kProduct, 0.8), 0) << "no candidates";
  // Uses p(draft), not the argmax: a draft that is not the mask view's argmax can be accepted when its
  // probability passes (impossible for γ > 0.5 in practice, but the rule is the product).
  EXPECT_EQ(flash_verify_accept(std::vector<double>{0.95}, std::vector<double>{0.96}, std::vector<int32_t>{1},
                                std::vector<int32_t>{2}, std::vector<uint8_t>{0}, VerifyRule::kProduct, 0.9),
            1);
}

TEST(VerifyAccept, PaperRuleWalksUntilTheFirstRejection) {
  const std::vector<int32_t> drafts = {5, 6, 7, 8};
  const std::vector<uint8_t> none(4, 0);
  auto acc = [&](std::vector<double> p_draft, std::vector<double> p_max, std::vector<int32_t> argmax, double gamma,
                 std::vector<uint8_t> blocked = {}) {
    if (blocked.empty()) blocked = none;
    return flash_verify_accept(p_draft, p_max, argmax, drafts, blocked, VerifyRule::kPaper, gamma);
  };
  const std::vector<int32_t> agree = {5, 6, 7, 8};
  // The README example: 0.9 and 0.9 pass individually (product would stop after one).
  EXPECT_EQ(acc({0.9, 0.9, 0.99, 0.5}, {0.9, 0.9, 0.99, 0.5}, agree, 0.85), 3);
  // Argmax disagreement rejects even with a confident mask view, and stops the walk.
  EXPECT_EQ(acc({0.95, 0.01, 0.99, 0.99}, {0.95, 0.97, 0.99, 0.99}, {5, 9, 7, 8}, 0.85), 1);
  EXPECT_EQ(acc({0.95, 0.95, 0.95, 0.95}, {0.95, 0.95, 0.95, 0.95}, agree, 0.85, {0, 1, 0, 0}), 1);
  EXPECT_EQ(acc({0.84, 0.99, 0.99, 0.99}, {0.84, 0.99, 0.99, 0.99}, agree, 0.85), 0);
  EXPECT_EQ(acc({0.85, 0.85, 0.85, 0.85}, {0.85, 0.85, 0.85, 0.85}, agree, 0.85), 4);
}

TEST(VerifyAccept, ForcedAcceptanceAndErrors) {
  const std::vector<double> low = {0.01, 0.01, 0.01};
  const std::vector<int32_t> t = {1, 2, 3};
  EXPECT_EQ(flash_verify_accept(low, low, t, t, std::vector<uint8_t>{0, 0, 0}, VerifyRule::kProduct, 0.8, 2), 2);
  EXPECT_EQ(flash_verify_accept(low, low, t, t, std::vector<uint8_t>{0, 0, 0}, VerifyRule::kPaper, 0.8, 9), 3);
  EXPECT_EQ(flash_verify_accept(low, low, t, t, std::vector<uint8_t>{0, 1, 0}, VerifyRule::kProduct, 0.8, 9), 1)
      << "forced acceptance stops at a candidate past the stop";
  EXPECT_THROW(flash_verify_accept(low, low, t, t, std::vector<uint8_t>{0, 0}, VerifyRule::kProduct, 0.8), Error);
  EXPECT_THROW(flash_verify_accept(low, low, t, t, std::vector<uint8_t>{0, 0, 0}, VerifyRule::kProduct, 0.0), Error);
  EXPECT_THROW(flash_verify_accept(low, low, t, t, std::vector<uint8_t>{0, 0, 0}, VerifyRule::kProduct, 1.5), Error);
  EXPECT_EQ(parse_verify_rule("product"), VerifyRule::kProduct);
  EXPECT_EQ(parse_verify_rule("paper"), VerifyRule::kPaper);
  EXPECT_STREQ(verify_rule_name(VerifyRule::kPaper), "paper");
  try {
    parse_verify_rule("cumprod");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cumprod"), std::string::npos);
  }
}

// ================================================================================ planning

/// A slot of prompt length P (tokens 1..P) in a 128-row layout, G = 40, bm = 16.
FlashSlot plan_slot(int64_t P, const GenerateOptions& o) {
  std::vector<int32_t> prompt(static_cast<size_t>(P));
  std::iota(prompt.begin(), prompt.end(), 1);
  return flash_init_slot(0, prompt, 128, o, 1000, 1001);
}

TEST(VerifyPlan, CandidatesKeptRowsAndKeys) {
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 40;
  o.decode.verify = true;
  FlashSlot s = plan_slot(40, o);  // window [40, 56), seqlen_k 128
  std::vector<double> conf(16);
  for (int i = 0; i < 16; ++i) conf[static_cast<size_t>(i)] = 0.5 + 0.01 * i;  // ascending: order = 15, 14, ...
  conf[2] = 0.95;                                                              // position 42 committed
  std::vector<int32_t> tok(16);
  std::iota(tok.begin(), tok.end(), 200);
  FlashDecision d = flash_decide(s, conf, tok, o);
  ASSERT_EQ(d.count, 1);
  const int64_t n_valid = flash_verify_valid_count(s, d, o);
  EXPECT_EQ(n_valid, 16);
  flash_commit(s, d, 1001);
  const FlashVerifyTile v = flash_verify_plan_slot(s, 0, d, n_valid, o);
  // S = min(16 − 1, 8) = 8 in draft-confidence order: positions 55, 54, ... 48; T = 32 − 16 = 16.
  EXPECT_EQ(v.candidates, (std::vector<int32_t>{55, 54, 53, 52, 51, 50, 49, 48}));
  EXPECT_EQ(v.drafts, (std::vector<int32_t>{215, 214, 213, 212, 211, 210, 209, 208}));
  EXPECT_EQ(v.kept_budget, 16);
  // Kept: the last 16 decoded entries of full_pos = prompt 26..39 (identity order) then 42.
  std::vector<int32_t> kept;
  for (int32_t t = 25; t < 40; ++t) kept.push_back(t);
  kept.push_back(42);
  EXPECT_EQ(v.kept, kept);
  // Keys (default): every position < seqlen_k outside the tile.
  std::set<int32_t> tile(v.kept.begin(), v.kept.end());
  tile.insert(v.candidates.begin(), v.candidates.end());
  ASSERT_EQ(v.keys.size(), static_cast<size_t>(s.seqlen_k) - tile.size());
  for (int32_t t : v.keys) EXPECT_FALSE(tile.count(t)) << t;
  // In ascending order, each once, the last one seqlen_k - 1 (no tile row there): the whole complement.
  EXPECT_TRUE(std::adjacent_find(v.keys.begin(), v.keys.end(), std::greater_equal<>()) == v.keys.end());
  EXPECT_EQ(v.keys.front(), 0);
  EXPECT_EQ(v.keys.back(), s.seqlen_k - 1);
  EXPECT_EQ(v.rows(), 32);
  // Cap and max_candidates.
  GenerateOptions o3 = o;
  o3.decode.max_candidates = 3;
  EXPECT_EQ(flash_verify_plan_slot(s, 0, d, n_valid, o3).candidates, (std::vector<int32_t>{55, 54, 53}));
  EXPECT_EQ(flash_verify_plan_slot(s, 0, d, n_valid, o3).kept_budget, 26);
  EXPECT_EQ(flash_verify_plan_slot(s, 0, d, 4, o).candidates.size(), 3u) << "S = n_valid − k1";
  EXPECT_TRUE(flash_verify_plan_slot(s, 0, d, 1, o).candidates.empty());
  EXPECT_EQ(flash_verify_plan_slot(s, 0, d, 1, o).kept.size(), 32u);
  EXPECT_THROW(flash_verify_plan_slot(s, 0, d, 17, o), Error);
  // Released gather list (reference_quirks): full_pos[0 : nd − T] ++ full_pos[nd + S : seqlen_k].
  auto released_keys = [&](GenerateOptions oq, int64_t T) {
    oq.decode.reference_quirks = true;
    const FlashVerifyTile vq = flash_verify_plan_slot(s, 0, d, n_valid, oq);
    std::vector<int32_t> want(s.full_pos.begin(), s.full_pos.begin() + (s.num_decoded - T));
    want.insert(want.end(), s.full_pos.begin() + s.num_decoded + 8, s.full_pos.begin() + s.seqlen_k);
    EXPECT_EQ(vq.keys, want) << "T = " << T;
    return vq;
  };
  const FlashVerifyTile vq = released_keys(o, 16);
  // Here both definitions are the same set.
  std::set<int32_t> a(v.keys.begin(), v.keys.end()), b(vq.keys.begin(), vq.keys.end());
  EXPECT_EQ(a, b);
  // verify_kept commits: T = k1 = 1, the phase-1 commit (position 42) only; the same candidates; every
  // other decoded position (25..39 above) is a cached key again.
  GenerateOptions oc = o;
  oc.decode.verify_kept = VerifyKept::kCommits;
  const FlashVerifyTile vc = flash_verify_plan_slot(s, 0, d, n_valid, oc);
  EXPECT_EQ(vc.kept_budget, 1);
  EXPECT_EQ(vc.kept, (std::vector<int32_t>{42}));
  EXPECT_EQ(vc.candidates, v.candidates);
  EXPECT_EQ(vc.drafts, v.drafts);
  EXPECT_EQ(vc.rows(), 1 + 16);
  std::set<int32_t> ctile(vc.kept.begin(), vc.kept.end());
  ctile.insert(vc.candidates.begin(), vc.candidates.end());
  ASSERT_EQ(vc.keys.size(), static_cast<size_t>(s.seqlen_k) - ctile.size());
  for (int32_t t : vc.keys) EXPECT_FALSE(ctile.count(t)) << t;
  for (int32_t t = 25; t < 40; ++t) EXPECT_TRUE(std::binary_search(vc.keys.begin(), vc.keys.end(), t)) << t;
  // No candidates: the tile would hold the commit alone (the denoiser plans no tile then).
  EXPECT_EQ(flash_verify_plan_slot(s, 0, d, 1, oc).rows(), 1);
  released_keys(oc, 1);  // the released gather list with T = k1
}

TEST(VerifyPlan, ShortPromptKeepsFewerRowsInsteadOfWrapping) {
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 40;
  o.decode.verify = true;
  FlashSlot s = plan_slot(5, o);  // nd = 5 < T
  std::vector<double> conf(16, 0.3);
  conf[0] = 0.99;
  FlashDecision d = flash_decide(s, conf, std::vector<int32_t>(16, 300), o);
  const int64_t n_valid = flash_verify_valid_count(s, d, o);
  flash_commit(s, d, 1001);
  const FlashVerifyTile v = flash_verify_plan_slot(s, 0, d, n_valid, o);
  EXPECT_EQ(v.candidates.size(), 8u);
  EXPECT_EQ(v.kept_budget, 16);
  EXPECT_EQ(v.kept, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));  // all 6 decoded positions
  EXPECT_EQ(v.rows(), 6 + 16);
  for (GenerateOptions oo : {o, [&] {
                               auto q = o;
                               q.decode.reference_quirks = true;
                               return q;
                             }()}) {
    const FlashVerifyTile w = flash_verify_plan_slot(s, 0, d, n_valid, oo);
    std::set<int32_t> tile(w.kept.begin(), w.kept.end());
    tile.insert(w.candidates.begin(), w.candidates.end());
    for (int32_t t : w.keys) EXPECT_FALSE(tile.count(t)) << "key " << t << " is also a tile row";
  }
}

TEST(VerifyPlan, EosStateBeforeTheCommitDecidesTheValidCount) {
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 40;
  o.decode.verify = true;
  FlashSlot s = plan_slot(40, o);
  s.eos_pos = 47;  // an earlier EOS: stop 48
  s.stop = 48;
  std::vector<double> conf(16, 0.2);
  conf[1] = 0.97;
  const FlashDecision d = flash_decide(s, conf, std::vector<int32_t>(16, 9), o);
  EXPECT_EQ(flash_verify_valid_count(s, d, o), 8);  // positions 40..47
  GenerateOptions oq = o;
  oq.decode.reference_quirks = true;
  EXPECT_EQ(flash_verify_valid_count(s, d, oq), 8);
  s.eos_pos = -1;
  s.stop = 80;
  EXPECT_EQ(flash_verify_valid_count(s, flash_decide(s, conf, std::vector<int32_t>(16, 9), oq), oq), 16);
}

TEST(VerifyPlan, BatchLayout) {
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 40;
  o.decode.verify = true;
  std::vector<FlashSlot> slots(3);
  slots[0] = plan_slot(40, o);
  slots[2] = plan_slot(40, o);
  slots[2].request = 1;
  FlashVerifyTile a;
  a.slot = 0;
  a.kept = {3, 4};
  a.candidates = {50, 41};
  a.drafts = {7, 8};
  a.keys = {0, 1, 2};
  FlashVerifyTile b;
  b.slot = 2;
  b.kept = {9};
  b.keys = {5};
  const VerifyBatch vb = flash_verify_batch(slots, {a, b}, 128);
  EXPECT_EQ(vb.token_ids, (std::vector<int32_t>{4, 5, 7, 8, 1000, 1000, 10}));
  EXPECT_EQ(vb.positions, (std::vector<int32_t>{3, 4, 50, 41, 50, 41, 9}));
  EXPECT_EQ(vb.key_rows, (std::vector<int32_t>{0, 1, 2, 261}));
  ASSERT_EQ(vb.tiles.size(), 2u);
  EXPECT_EQ(vb.tiles[0].q_start, 0);
  EXPECT_EQ(vb.tiles[0].q_end, 6);
  EXPECT_EQ(vb.tiles[0].k_end, 3);
  EXPECT_EQ(vb.tiles[0].n_cand, 2);
  EXPECT_EQ(vb.tiles[1].q_start, 6);
  EXPECT_EQ(vb.tiles[1].k_start, 3);
  EXPECT_EQ(vb.tiles[1].n_cand, 0);
  EXPECT_EQ(vb.logit_rows, (std::vector<int32_t>{4, 5}));
  FlashVerifyTile bad = b;
  bad.slot = 1;  // inactive
  EXPECT_THROW(flash_verify_batch(slots, {bad}, 128), Error);
  for (const int32_t key : {128, -1}) {
    FlashVerifyTile far = b;
    far.keys = {5, key, 6};
    try {
      flash_verify_batch(slots, {a, far}, 128);
      ADD_FAILURE() << "key " << key << " outside the slot's 128 store rows was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("key position {} outside", key)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(flash_verify_batch(slots, {}, 128), Error);
}

TEST(VerifyCommit, PinningEosRuleAndErrors) {
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 40;
  o.decode.verify = true;
  for (bool pin_all : {true, false}) {
    FlashSlot s = plan_slot(40, o);
    std::vector<double> conf(16);
    for (int i = 0; i < 16; ++i) conf[static_cast<size_t>(i)] = 0.5 + 0.01 * i;
    conf[2] = 0.95;
    conf[3] = 0.96;
    std::vector<int32_t> tok(16, 300);
    tok[14] = 1001;  // position 54's draft is EOS
    FlashDecision d = flash_decide(s, conf, tok, o);
    const int64_t n_valid = flash_verify_valid_count(s, d, o);
    flash_commit(s, d, 1001);
    const FlashVerifyTile v = flash_verify_plan_slot(s, 0, d, n_valid, o);
    ASSERT_EQ(v.candidates[0], 55);
    ASSERT_EQ(v.candidates[1], 54);
    const std::vector<int32_t> acc = {55, 54}, toks = {300, 1001};
    EXPECT_TRUE(flash_verify_commit(s, v, acc, toks, d.count, 1001, pin_all));
    EXPECT_EQ(s.num_decoded, 44);
    EXPECT_EQ(s.last_committed, pin_all ? 4 : 2);
    EXPECT_EQ(s.accepted, 2);
    EXPECT_EQ(s.eos_pos, 54);
    EXPECT_EQ(s.stop, 55);
    EXPECT_EQ(s.x[54], 1001);
    EXPECT_EQ(s.x[55], 300);
    // The newest entries of full_pos: phase 1 (43, 42), then the verified 55, 54.
    EXPECT_EQ(std::vector<int32_t>(s.full_pos.begin() + 40, s.full_pos.begin() + 44),
              (std::vector<int32_t>{43, 42, 55, 54}));
    flash_rerank(s, std::vector<float>(s.full_pos.size(), 0.f), o);
    // Pinned entries stay at the end of the decoded list (the tracked set's newest part).
    EXPECT_EQ(std::vector<int32_t>(s.full_pos.begin() + 44 - s.last_committed, s.full_pos.begin() + 44),
              pin_all ? (std::vector<int32_t>{43, 42, 55, 54}) : (std::vector<int32_t>{55, 54}));
  }
  FlashSlot s = plan_slot(40, o);
  std::vector<double> conf(16, 0.5);
  conf[0] = 0.99;
  FlashDecision d = flash_decide(s, conf, std::vector<int32_t>(16, 5), o);
  flash_commit(s, d, 1001);
  const FlashVerifyTile v = flash_verify_plan_slot(s, 0, d, 16, o);
  const std::vector<int32_t> one = {v.candidates[3]}, tok = {5};
  FlashSlot s2 = s;
  EXPECT_TRUE(flash_verify_commit(s2, v, one, tok, 1, 1001, true)) << "any candidate subset may be forced";
  EXPECT_EQ(s2.full_pos[static_cast<size_t>(s.num_decoded)], v.candidates[3]);
  const std::vector<int32_t> outside = {99}, twice = {v.candidates[0], v.candidates[0]}, two_tok = {5, 5};
  FlashSlot s3 = s;
  EXPECT_THROW(flash_verify_commit(s3, v, outside, tok, 1, 1001, true), Error);
  EXPECT_THROW(flash_verify_commit(s3, v, twice, two_tok, 1, 1001, true), Error);
  EXPECT_THROW(flash_verify_commit(s3, v, one, two_tok, 1, 1001, true), Error);
  FlashVerifyTile stale = v;
  std::swap(stale.candidates[0], stale.candidates[1]);
  EXPECT_THROW(flash_verify_commit(s3, stale, one, tok, 1, 1001, true), Error);
}

// ================================================================================ golden parity

std::vector<std::vector<int32_t>> prompts_of(const json& run) { return golden_prompt_set(golden().flash, run); }

GenerateOptions options_of(const json& run, int64_t slots, bool quirks) {
  GenerateOptions o = flash_run_options(run, slots, quirks);
  o.decode.verify = run["verify"];
  o.decode.gamma = run["gamma"];
  return o;
}

/// The fp32 verify-on runs of the golden file.
std::vector<size_t> fp32_verify_runs() {
  std::vector<size_t> out;
  const json& runs = golden().flash["runs"];
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i]["dtype"] == "float32" && runs[i]["verify"].get<bool>()) out.push_back(i);
  return out;
}

int32_t recorded_token(const json& req, int64_t rel) {
  const auto& out = req["output_ids"];
  const auto& xf = req["x_final_rel"];
  if (rel < static_cast<int64_t>(out.size())) return out[static_cast<size_t>(rel)].get<int32_t>();
  if (rel < static_cast<int64_t>(xf.size())) return xf[static_cast<size_t>(rel)].get<int32_t>();
  return -1;
}

/// The phase-1 threshold decision could flip within `tol` (see test_flash_cache_golden.cpp).
bool near_threshold(const FlashDecision& d, double eps, double tol) {
  std::vector<double> c;
  for (size_t r = 0; r < d.window.size(); ++r)
    if (d.eligible[r]) c.push_back(d.confidence[r]);
  std::sort(c.rbegin(), c.rend());
  for (double v : c)
    if (std::abs(v - eps) <= tol) return true;
  return !c.empty() && c[0] < eps && c.size() > 1 && c[0] - c[1] <= tol;
}

/// The candidate set / order could differ from the reference's within `tol`: near-equal draft
/// confidences among the entries after the phase-1 commit, up to one past the last candidate.
bool near_candidate_tie(const FlashDecision& d, int64_t S, double tol) {
  const int64_t k1 = d.count, w = static_cast<int64_t>(d.order.size());
  for (int64_t i = k1; i + 1 < w && i < k1 + S; ++i)
    if (std::abs(d.confidence[static_cast<size_t>(d.order[static_cast<size_t>(i)])] -
                 d.confidence[static_cast<size_t>(d.order[static_cast<size_t>(i + 1)])]) <= tol)
      return true;
  return false;
}

/// The acceptance could flip within `tol`: a running product (product rule) near γ.
bool near_gamma(const FlashVerification& v, double gamma, double tol) {
  double prod = 1.0;
  for (size_t i = 0; i < v.p_draft.size(); ++i) {
    prod *= v.blocked[i] ? 0.0 : v.p_draft[i];
    if (std::abs(prod - gamma) <= tol) return true;
  }
  return false;
}

std::vector<int32_t> rel_sorted(std::vector<int32_t> v, int64_t P) {
  for (int32_t& t : v) t -= static_cast<int32_t>(P);
  std::sort(v.begin(), v.end());
  return v;
}

/// An a_t ranking tie that can change the next state (reference_quirks pins only the k2 verified
/// tokens; every other decoded position is ranked by a_t): near-equal scores (kFp32RankNearTie of the
/// largest |a_t|) at the tracked-set boundary (rank β_t − k2 from the top) or within the top 2·bm
/// ranks (the kept rows of the next verify tile come from there). Decoded EOS padding at or past
/// seqlen_k is never a key in the main pass, so its a_t is exactly 0 for all of them: the released
/// code orders that group with an unstable torch.sort, we keep the previous order.
constexpr double kFp32RankNearTie = 1e-5;
struct Ranking {
  std::vector<float> desc;  // a_t of the ranked (not pinned) decoded positions, descending
  float scale = 0.f;        // max |a_t| of the slot
  /// Near-tie between the r-th and (r+1)-th largest (1-based r): the cut there is not determined.
  bool tie_at(int64_t r) const {
    return r >= 1 && r < static_cast<int64_t>(desc.size()) &&
           std::abs(desc[static_cast<size_t>(r - 1)] - desc[static_cast<size_t>(r)]) <= kFp32RankNearTie * scale;
  }
};
/// The ranking of phase 2's re-rank (state before the phase-2 commit: every decoded position is
/// ranked; the k2 verified ones will be pinned after them).
Ranking ranking_of(const FlashSlot& s, std::span<const float> a) {
  Ranking r;
  for (int64_t i = 0; i < s.num_decoded; ++i) r.desc.push_back(a[static_cast<size_t>(s.full_pos[static_cast<size_t>(i)])]);
  std::sort(r.desc.rbegin(), r.desc.rend());
  for (float v : a) r.scale = std::max(r.scale, std::abs(v));
  return r;
}
/// Tracked-set boundary of the next main pass: the top β_t − k2 of the ranking.
bool rank_tie_next_state(const FlashSlot& s, std::span<const float> a, int64_t k2, int64_t budget, int64_t /*bm*/) {
  return ranking_of(s, a).tie_at(budget - k2);
}

struct ReplayStats {
  int phase1_compared = 0, phase1_near = 0, phase1_mismatch = 0;
  int phase2_compared = 0, phase2_near = 0, phase2_mismatch = 0, phase2_with_candidates = 0;
  int after_rank_tie = 0, after_rank_tie_mismatch = 0, requests_with_rank_tie = 0;
  std::vector<std::string> ties;  // "request@iteration (tied a_t value)"
  int drafts_compared = 0, drafts_mismatch = 0, accepted_total = 0;
  std::vector<std::string> mismatches;
};

/// Teacher-forced replay of a golden verify run through `slots` slots (reference_quirks on).
ReplayStats replay(size_t run_index, int64_t slots) {
  Golden& g = golden();
  const json& run = g.flash["runs"][run_index];
  const json& reqs = run["requests"];
  const GenerateOptions o = options_of(run, slots, /*quirks=*/true);
  FlashCacheDenoiser den(*g.backend, g.model, o);
  ReplayStats st;
  std::map<int64_t, size_t> tie_from;  // request -> first iteration whose state may differ by a rank tie
  std::map<int64_t, std::pair<Ranking, int64_t>> prev;  // request -> last re-rank and its pinned count k2
  // A decision that differs after a rank tie is reported, not failed (the state is no longer the
  // recorded one); before it, every non-near decision must match.
  auto judge = [&](int64_t request, size_t k, bool same, const std::string& what) {
    const auto t = tie_from.find(request);
    if (t != tie_from.end() && k >= t->second) {
      ++st.after_rank_tie;
      st.after_rank_tie_mismatch += !same;
      return;
    }
    if (!same) st.mismatches.push_back(what);
  };
  auto observer = [&](FlashStep& step) {
    const FlashSlot& s = *step.state;
    const json& req = reqs[static_cast<size_t>(s.request)];
    const auto P = static_cast<int32_t>(s.prompt_len);
    if (step.phase == 1) {
      const auto k = static_cast<size_t>(s.iterations);
      ASSERT_LT(k, req["iterations"].size()) << "request " << s.request << " runs longer than recorded";
      const auto want = req["iterations"][k]["main"].get<std::vector<int32_t>>();
      const FlashDecision& d = *step.decision;
      if (near_threshold(d, *effective_threshold(o.decode, o.sampling), kFp32NearThreshold)) {
        ++st.phase1_near;
      } else {
        ++st.phase1_compared;
        std::vector<int32_t> have;
        for (int64_t i = 0; i < d.count; ++i) have.push_back(d.window[static_cast<size_t>(d.order[static_cast<size_t>(i)])]);
        const bool same = rel_sorted(have, P) == want;
        st.phase1_mismatch += !same && !(tie_from.count(s.request) && k >= tie_from[s.request]);
        judge(s.request, k, same,
              fmt::format("request {} iteration {} (main): ours {} recorded {}", s.request, k,
                          fmt::join(rel_sorted(have, P), ","), fmt::join(want, ",")));
      }
      for (int32_t rel : want) {
        const int32_t rec = recorded_token(req, rel);
        step.forced_positions.push_back(rel + P);
        step.forced_tokens.push_back(rec >= 0 ? rec : d.tokens[static_cast<size_t>(
                                                          std::find(d.window.begin(), d.window.end(), rel + P) -
                                                          d.window.begin())]);
      }
      return;
    }
    // Phase 2 (state after phase 1: iterations already counts this iteration).
    const auto k = static_cast<size_t>(s.iterations - 1);
    const auto want = req["iterations"][k]["verify"].get<std::vector<int32_t>>();
    const FlashVerification& v = *step.verification;
    const FlashVerifyTile& tile = *v.tile;
    step.override_acceptance = true;
    // Kept rows of this tile: the k1 + k2_prev newest entries, then the top of the last re-rank; a
    // tie at that cut makes this verification (and what follows) state-dependent.
    if (!tie_from.count(s.request) && prev.count(s.request)) {
      const auto& [rank, k2_prev] = prev[s.request];
      const int64_t cut = static_cast<int64_t>(tile.kept.size()) - step.decision->count - k2_prev;
      if (rank.tie_at(cut)) {
        tie_from[s.request] = k;
        ++st.requests_with_rank_tie;
        st.ties.push_back(fmt::format("{}@{} kept cut ({:g})", s.request, k, rank.desc[static_cast<size_t>(cut)]));
      }
    }
    const Ranking rank = ranking_of(s, step.importance);
    const auto k2 = static_cast<int64_t>(want.size());
    if (!tie_from.count(s.request) && rank.tie_at(o.decode.track_num * o.decode.block_length - k2)) {
      tie_from[s.request] = k + 1;
      ++st.requests_with_rank_tie;
      st.ties.push_back(fmt::format("{}@{} tracked cut ({:g})", s.request, k + 1,
                                    rank.desc[static_cast<size_t>(o.decode.track_num * o.decode.block_length - k2)]));
    }
    prev[s.request] = {rank, k2};
    if (!tile.candidates.empty()) {
      ++st.phase2_with_candidates;
      const bool near =
          near_gamma(v, o.decode.gamma, kFp32NearThreshold) ||
          near_candidate_tie(*step.decision, static_cast<int64_t>(tile.candidates.size()), kFp32NearThreshold);
      std::vector<int32_t> have(tile.candidates.begin(), tile.candidates.begin() + v.count);
      if (near) {
        ++st.phase2_near;
      } else {
        ++st.phase2_compared;
        const bool same = rel_sorted(have, P) == want;
        st.phase2_mismatch += !same && !(tie_from.count(s.request) && k >= tie_from[s.request]);
        judge(s.request, k, same,
              fmt::format("request {} iteration {} (verify): ours {} recorded {}", s.request, k,
                          fmt::join(rel_sorted(have, P), ","), fmt::join(want, ",")));
      }
    }
    for (int32_t rel : want) {
      const auto it = std::find(tile.candidates.begin(), tile.candidates.end(), rel + P);
      ASSERT_NE(it, tile.candidates.end()) << "request " << s.request << " iteration " << k << ": recorded verified "
                                           << rel << " is not among our candidates";
      const int32_t draft = tile.drafts[static_cast<size_t>(it - tile.candidates.begin())];
      const int32_t rec = recorded_token(req, rel);
      if (rec >= 0) {
        ++st.drafts_compared;
        if (rec != draft) {
          ++st.drafts_mismatch;
          st.mismatches.push_back(fmt::format("request {} iteration {} position {}: draft ours {} recorded {}", s.request,
                                              k, rel, draft, rec));
        }
      }
      step.forced_positions.push_back(rel + P);
      step.forced_tokens.push_back(rec >= 0 ? rec : draft);
      ++st.accepted_total;
    }
  };
  FlashCacheResult res = den.generate(prompts_of(run), observer);
  for (size_t r = 0; r < reqs.size(); ++r) {
    const json& req = reqs[r];
    const FlashRequestResult& rr = res.requests[r];
    SCOPED_TRACE(fmt::format("request {}", r));
    EXPECT_EQ(rr.nfe, req["n_steps"].get<int64_t>());
    EXPECT_EQ(rr.forward_passes, 2 * rr.nfe) << "reference_quirks: a verify pass in every iteration";
    EXPECT_EQ(rr.num_tokens_reference, req["generated_length"].get<int64_t>());
    EXPECT_EQ(rr.stop_rel, req["predicted_length_rel"].get<int64_t>());
    EXPECT_EQ(rr.eos_rel, req["decoded_eos_pos_rel"].is_null() ? -1 : req["decoded_eos_pos_rel"].get<int64_t>());
    EXPECT_EQ(rr.output_ids, req["output_ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(rr.canvas, req["x_final_rel"].get<std::vector<int32_t>>());
    EXPECT_EQ(rr.iterations.size(), req["iterations"].size());
    if (rr.iterations.size() != req["iterations"].size()) continue;
    int64_t acc = 0;
    for (size_t k = 0; k < rr.iterations.size(); ++k) {
      auto all = req["iterations"][k]["main"].get<std::vector<int32_t>>();
      const auto ver = req["iterations"][k]["verify"].get<std::vector<int32_t>>();
      all.insert(all.end(), ver.begin(), ver.end());
      std::sort(all.begin(), all.end());
      EXPECT_EQ(rr.iterations[k], all) << "iteration " << k;
      EXPECT_EQ(rr.verified[k], ver) << "iteration " << k;
      acc += static_cast<int64_t>(ver.size());
    }
    EXPECT_EQ(rr.accepted, acc);
  }
  EXPECT_EQ(res.stats.num_tokens_reference, run["num_tokens"].get<int64_t>());
  EXPECT_EQ(res.stats.max_length, run["max_length"].get<int64_t>());
  EXPECT_EQ(res.stats.query_rows, run["query_rows"]["main"].get<int64_t>());
  EXPECT_EQ(res.stats.accepted, st.accepted_total);
  if (slots == run["batch_size"].get<int64_t>()) {
    EXPECT_EQ(res.stats.forwards, run["passes"]["main"].get<int64_t>());
    EXPECT_EQ(res.stats.verify_forwards, run["passes"]["verify"].get<int64_t>());
    EXPECT_EQ(res.stats.verify_query_rows, run["query_rows"]["verify"].get<int64_t>());
  }
  return st;
}

class VerifyGolden : public ::testing::TestWithParam<std::tuple<size_t, int64_t>> {};

TEST_P(VerifyGolden, TeacherForcedDecisionsAndAcceptancesMatch) {
  const auto [run_index, slots] = GetParam();
  const auto t0 = std::chrono::steady_clock::now();
  const ReplayStats st = replay(run_index, slots);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const std::string& m : st.mismatches) ADD_FAILURE() << m;
  EXPECT_EQ(st.phase1_mismatch, 0);
  EXPECT_EQ(st.phase2_mismatch, 0);
  EXPECT_EQ(st.drafts_mismatch, 0);
  EXPECT_GT(st.phase1_compared, 0);
  EXPECT_GT(st.phase2_compared, 0);
  EXPECT_GT(st.accepted_total, 0) << "the run must exercise acceptances";
  EXPECT_LT(st.after_rank_tie, (st.phase1_compared + st.phase2_compared) / 4)
      << "most decisions must be compared before any a_t ranking tie";
  std::cout << fmt::format("[verify golden run {} slots {}] phase 1: {} compared, {} near ε; verification: {} with "
                           "candidates, {} compared, {} near γ / candidate tie; {} accepted drafts ({} tokens "
                           "compared); {} requests reach an a_t ranking tie, {} later decisions compared there with "
                           "{} differing (reported, not failed) [ties: {}]; {:.1f} s\n",
                           run_index, slots, st.phase1_compared, st.phase1_near, st.phase2_with_candidates,
                           st.phase2_compared, st.phase2_near, st.accepted_total, st.drafts_compared,
                           st.requests_with_rank_tie, st.after_rank_tie, st.after_rank_tie_mismatch,
                           fmt::join(st.ties, ", "), sec);
}

std::vector<std::tuple<size_t, int64_t>> golden_cases() {
  std::vector<std::tuple<size_t, int64_t>> v;
  for (size_t r : fp32_verify_runs())
    for (int64_t s : {1, 4}) v.emplace_back(r, s);
  return v;
}

// A fixture without recordings of this kind (make_golden_variant.py --layers: a truncated model matches
// none) has no cases here; its other tests still run.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(VerifyGolden);
INSTANTIATE_TEST_SUITE_P(Fp32VerifyOn, VerifyGolden, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<std::tuple<size_t, int64_t>>& i) {
                           const json& r = golden().flash["runs"][std::get<0>(i.param)];
                           return fmt::format("run{}_G{}_slots{}", std::get<0>(i.param), r["gen_length"].get<int>(),
                                              std::get<1>(i.param));
                         });

// Free-running with reference_quirks: trajectories equal the recorded ones up to the first iteration
// with a near-tie (ε, γ, the candidate order, or an a_t ranking tie that shapes the next state).
TEST(VerifyGoldenFreeRun, TrajectoriesMatchUpToFirstNearTie) {
  Golden& g = golden();
  for (size_t run_index : fp32_verify_runs()) {
    const json& run = g.flash["runs"][run_index];
    const json& reqs = run["requests"];
    const GenerateOptions o = options_of(run, run["batch_size"].get<int64_t>(), true);
    std::map<int64_t, int64_t> first_near;
    auto observer = [&](FlashStep& step) {
      const FlashSlot& s = *step.state;
      if (first_near.count(s.request)) return;
      if (step.phase == 1 &&
          near_threshold(*step.decision, *effective_threshold(o.decode, o.sampling), kFp32NearThreshold))
        first_near[s.request] = s.iterations;
      if (step.phase == 2 &&
          (near_gamma(*step.verification, o.decode.gamma, kFp32NearThreshold) ||
           near_candidate_tie(*step.decision, static_cast<int64_t>(step.verification->tile->candidates.size()),
                              kFp32NearThreshold)))
        first_near[s.request] = s.iterations - 1;
      else if (step.phase == 2 &&
               rank_tie_next_state(s, step.importance, step.verification->count,
                                   o.decode.track_num * o.decode.block_length, o.decode.block_length))
        first_near[s.request] = s.iterations;  // this iteration is still comparable, the next state may differ
    };
    FlashCacheDenoiser den(*g.backend, g.model, o);
    const FlashCacheResult res = den.generate(prompts_of(run), observer);
    int whole = 0;
    for (size_t r = 0; r < reqs.size(); ++r) {
      const json& req = reqs[r];
      const FlashRequestResult& rr = res.requests[r];
      SCOPED_TRACE(fmt::format("run {} request {}", run_index, r));
      const auto it = first_near.find(static_cast<int64_t>(r));
      const size_t limit = it == first_near.end() ? rr.iterations.size() : static_cast<size_t>(it->second);
      for (size_t k = 0; k < limit && k < req["iterations"].size(); ++k) {
        ASSERT_EQ(rr.verified[k], req["iterations"][k]["verify"].get<std::vector<int32_t>>()) << "iteration " << k;
      }
      if (it != first_near.end()) continue;
      ++whole;
      EXPECT_EQ(rr.output_ids, req["output_ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(rr.nfe, req["n_steps"].get<int64_t>());
    }
    std::cout << fmt::format("[verify golden free run {}] {} of {} requests compared whole\n", run_index, whole,
                             reqs.size());
    if (first_near.empty()) {
      EXPECT_EQ(res.stats.forwards, run["passes"]["main"].get<int64_t>());
      EXPECT_EQ(res.stats.verify_forwards, run["passes"]["verify"].get<int64_t>());
      EXPECT_EQ(res.stats.num_tokens_reference, run["num_tokens"].get<int64_t>());
    }
  }
}

// ================================================================================ crash case

/// The released code reads block_length logit rows per window; when fewer than block_length
/// undecoded positions remain in the slot row (decoding ran into the EOS padding up to L_max) it
/// crashes. Force that state (reference_quirks, no EOS ever committed, position P kept undecoded
/// while everything else is committed) and check that the run completes, with windows shorter than
/// block_length whose decisions and verifications do not depend on a second slot being present.
struct ShortWindowRun {
  std::vector<std::vector<double>> conf;  // per phase-1 step of request 0: window confidences
  std::vector<std::vector<double>> p_draft;
  FlashRequestResult result;
  int short_windows = 0, short_verifies = 0;
};

ShortWindowRun run_short_window(int64_t slots) {
  Golden& g = golden();
  const ModelConfig& c = g.model.config;
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 16;
  o.decode.block_length = 8;
  o.decode.verify = true;
  o.decode.reference_quirks = true;
  o.decode.n_slots = slots;
  const auto prompts = g.flash["prompts"]["flash_verify"].get<std::vector<std::vector<int32_t>>>();
  const std::vector<std::vector<int32_t>> ps = {pick(prompts, 0), pick(prompts, 3)};  // G1: P 32 and a longer one
  ShortWindowRun out;
  const auto P0 = static_cast<int32_t>(ps[0].size());
  auto observer = [&](FlashStep& step) {
    const FlashSlot& s = *step.state;
    if (s.request != 0) {
      // The other request: no EOS either, so it stays busy next to request 0.
      if (step.phase == 1) {
        const FlashDecision& d = *step.decision;
        for (int64_t i = 0; i < d.count; ++i) {
          const auto idx = static_cast<size_t>(d.order[static_cast<size_t>(i)]);
          step.forced_positions.push_back(d.window[idx]);
          step.forced_tokens.push_back(d.tokens[idx] == c.eos_token_id ? 5 : d.tokens[idx]);
        }
      } else {
        step.override_acceptance = true;  // accept nothing
      }
      return;
    }
    const bool short_window = static_cast<int64_t>(s.window.size()) < o.decode.block_length;
    if (step.phase == 1) {
      const FlashDecision& d = *step.decision;
      out.conf.push_back(d.confidence);
      out.short_windows += short_window;
      // Full window: commit everything but position P; short window: two entries other than P per
      // iteration; at most two entries left: all of them. Never an EOS (so the stop stays P + G and
      // the EOS padding up to L_max is decoded, as in the released run that crashed).
      const size_t w = d.window.size(), n = !short_window ? w - 1 : (w > 2 ? 2 : w);
      for (size_t r = 0; r < w && step.forced_positions.size() < n; ++r) {
        if (d.window[r] == P0 && w > 2) continue;
        step.forced_positions.push_back(d.window[r]);
        step.forced_tokens.push_back(d.tokens[r] == c.eos_token_id ? 5 : d.tokens[r]);
      }
    } else {
      out.p_draft.push_back(step.verification->p_draft);
      out.short_verifies += static_cast<int64_t>(step.decision->window.size()) < o.decode.block_length &&
                            !step.verification->tile->candidates.empty();
      step.override_acceptance = true;  // accept nothing: the schedule above stays in control
    }
  };
  FlashCacheDenoiser den(*g.backend, g.model, o, FlashTiling{16});
  const FlashCacheResult res = den.generate(ps, observer);
  out.result = res.requests[0];
  return out;
}


TEST(VerifyShortWindow, RunIntoTheEndOfTheSlotRowCompletes) {
  const ShortWindowRun one = run_short_window(1);
  const ShortWindowRun two = run_short_window(2);
  EXPECT_GE(one.short_windows, 3) << "the scenario must reach windows shorter than block_length";
  EXPECT_GE(one.short_verifies, 2) << "and verify their candidates";
  // Same decisions with a second, busy slot next to it: a short window uses its own logit rows.
  ASSERT_EQ(one.conf.size(), two.conf.size());
  for (size_t i = 0; i < one.conf.size(); ++i) {
    ASSERT_EQ(one.conf[i].size(), two.conf[i].size()) << "step " << i;
    for (size_t r = 0; r < one.conf[i].size(); ++r)
      EXPECT_NEAR(one.conf[i][r], two.conf[i][r], kFp32BatchConfTol) << "step " << i << " entry " << r;
  }
  ASSERT_EQ(one.p_draft.size(), two.p_draft.size());
  for (size_t i = 0; i < one.p_draft.size(); ++i)
    for (size_t r = 0; r < one.p_draft[i].size(); ++r)
      EXPECT_NEAR(one.p_draft[i][r], two.p_draft[i][r], kFp32BatchConfTol)
          << "verification " << i << " candidate " << r;
  const FlashRequestResult& r = one.result;
  EXPECT_EQ(r.canvas, two.result.canvas);
  // Everything up to the end of the slot row was decoded (the padding included, no EOS).
  EXPECT_EQ(std::count(r.canvas.begin(), r.canvas.end(), golden().model.config.mask_token_id), 0);
  EXPECT_EQ(r.nfe, static_cast<int64_t>(one.conf.size()));
  std::cout << fmt::format("[verify short window] {} iterations, {} with a short window, {} short-window "
                           "verifications, {} tokens\n",
                           r.nfe, one.short_windows, one.short_verifies, r.num_tokens_reference);
}

// The configuration the released code crashed on (golden `errors[]`: fp32, G 128, verify, 1 slot,
// "value tensor of shape [16] cannot be broadcast to indexing result of shape [11]"), free-running
// with reference_quirks: decoding runs into the EOS padding up to L_max, windows get shorter than
// block_length, and the run completes.
TEST(VerifyShortWindow, ReleasedCrashConfigurationCompletes) {
  Golden& g = golden();
  // The recorded crash of an fp32 verify run (the file's errors[]; their order is not fixed).
  static const json kNone = json::array();
  const json* found = nullptr;
  for (const json& e : g.flash.contains("errors") ? g.flash["errors"] : kNone)
    if (e["dtype"] == "float32" && e["verify"].get<bool>() &&
        e["error"].get<std::string>().find("shape mismatch") != std::string::npos)
      found = &e;
  if (found == nullptr) GTEST_SKIP() << "the fixture records no crash of an fp32 verify run";
  const json& err = *found;
  GenerateOptions o = flash_options();
  o.sampling.gen_length = err["gen_length"].get<int64_t>();
  o.decode.verify = true;
  o.decode.gamma = g.flash["fixed_args"]["gamma"].get<double>();
  o.decode.n_slots = err["batch_size"].get<int64_t>();
  o.decode.reference_quirks = true;
  const auto prompts = g.flash["prompts"]["flash_verify"].get<std::vector<std::vector<int32_t>>>();
  int short_windows = 0;
  size_t min_window = 16;
  auto observer = [&](FlashStep& step) {
    if (step.phase != 1) return;
    const size_t w = step.state->window.size();
    short_windows += w < static_cast<size_t>(o.decode.block_length);
    min_window = std::min(min_window, w);
  };
  FlashCacheDenoiser den(*g.backend, g.model, o);
  const FlashCacheResult res = den.generate(prompts, observer);
  EXPECT_GT(short_windows, 0) << "no window shorter than block_length: the crash condition was not reached";
  ASSERT_EQ(res.requests.size(), prompts.size());
  for (const FlashRequestResult& r : res.requests) {
    EXPECT_GT(r.nfe, 0);
    EXPECT_EQ(static_cast<int64_t>(r.output_ids.size()), r.num_tokens_reference);
  }
  std::cout << fmt::format("[verify crash configuration] {} iterations with a short window (smallest {} rows); "
                           "{} main + {} verify passes\n",
                           short_windows, min_window, res.stats.forwards, res.stats.verify_forwards);
}

// ================================================================================ counters, invariance

GenerateOptions small_options(bool verify) {
  GenerateOptions o = flash_options();
  o.sampling.gen_length = 32;
  o.decode.n_slots = 2;
  o.decode.verify = verify;
  return o;
}

std::vector<std::vector<int32_t>> small_prompts() {
  const auto v = golden().flash["prompts"]["flash_verify"].get<std::vector<std::vector<int32_t>>>();
  const auto c = golden().flash["prompts"]["common"].get<std::vector<std::vector<int32_t>>>();
  return {pick(v, 0), pick(c, 1), pick(v, 5), pick(c, 2)};  // G1: P 32, 5 (short prompt: nd < T), 46, 8
}

TEST(VerifyRun, CountersPerRequestAndInAggregate) {
  Golden& g = golden();
  GenerateOptions o = small_options(true);
  o.decode.gamma = 0.5;  // accept more often on this model
  std::map<int64_t, int64_t> cand, tiles, iters, short_prompt_tiles;
  int64_t passes_seen = 0, last_forward = -1;
  auto observer = [&](FlashStep& step) {
    if (step.phase == 1) {
      ++iters[step.state->request];
      return;
    }
    const FlashVerifyTile& v = *step.verification->tile;
    cand[step.state->request] += static_cast<int64_t>(v.candidates.size());
    ++tiles[step.state->request];
    if (static_cast<int64_t>(v.kept.size()) < v.kept_budget) ++short_prompt_tiles[step.state->request];
    EXPECT_FALSE(v.candidates.empty()) << "default mode: tiles only where candidates exist";
    if (step.forward != last_forward) ++passes_seen;
    last_forward = step.forward;
  };
  FlashCacheDenoiser den(*g.backend, g.model, o);
  const FlashCacheResult res = den.generate(small_prompts(), observer);
  int64_t sum_cand = 0, sum_acc = 0, sum_passes = 0, sum_nfe = 0;
  for (const FlashRequestResult& r : res.requests) {
    SCOPED_TRACE(fmt::format("request {}", r.request));
    EXPECT_EQ(r.nfe, iters[r.request]);
    EXPECT_EQ(r.candidates, cand[r.request]);
    EXPECT_EQ(r.forward_passes, r.nfe + tiles[r.request]);
    int64_t acc = 0, committed = 0;
    ASSERT_EQ(r.verified.size(), r.iterations.size());
    for (size_t k = 0; k < r.iterations.size(); ++k) {
      acc += static_cast<int64_t>(r.verified[k].size());
      committed += static_cast<int64_t>(r.iterations[k].size());
      for (int32_t t : r.verified[k]) EXPECT_TRUE(std::binary_search(r.iterations[k].begin(), r.iterations[k].end(), t));
    }
    EXPECT_EQ(r.accepted, acc);
    EXPECT_LE(r.accepted, r.candidates);
    EXPECT_GE(committed, r.num_tokens) << "fixed mode: every position of [P, stop) was committed";
    EXPECT_EQ(static_cast<int64_t>(r.output_ids.size()), r.stop_rel);
    sum_cand += r.candidates;
    sum_acc += r.accepted;
    sum_passes += r.forward_passes;
    sum_nfe += r.nfe;
  }
  EXPECT_EQ(res.stats.candidates, sum_cand);
  EXPECT_EQ(res.stats.accepted, sum_acc);
  EXPECT_EQ(res.stats.nfe, sum_nfe);
  EXPECT_EQ(res.stats.verify_forwards, passes_seen);
  EXPECT_GT(res.stats.verify_forwards, 0);
  EXPECT_LE(res.stats.verify_forwards, res.stats.forwards);
  EXPECT_GT(sum_acc, 0) << "γ = 0.5 must accept some drafts on this model";
  EXPECT_GT(short_prompt_tiles[1], 0) << "the 5-token prompt must produce tiles with fewer kept rows";
  std::cout << fmt::format("[verify counters] {} main + {} verify passes, NFE {}, {} tokens ({:.2f} per iteration), "
                           "drafts accepted {} of {}\n",
                           res.stats.forwards, res.stats.verify_forwards, res.stats.nfe, res.stats.num_tokens,
                           static_cast<double>(res.stats.num_tokens) / static_cast<double>(res.stats.nfe), sum_acc,
                           sum_cand);
  // Verify off: forward passes = NFE, no candidates.
  FlashCacheDenoiser off(*g.backend, g.model, small_options(false));
  const FlashCacheResult r0 = off.generate(small_prompts());
  for (const FlashRequestResult& r : r0.requests) {
    EXPECT_EQ(r.forward_passes, r.nfe);
    EXPECT_EQ(r.candidates, 0);
    EXPECT_TRUE(r.verified.empty());
  }
  EXPECT_EQ(r0.stats.verify_forwards, 0);
}

// Without an observer the denoiser re-ranks the older decoded positions while the verify pass runs
// (before its results are read); with one, after phase 2 as written. Both must give the same run, in
// both pinning modes and with both kept-row rules, with drafts accepted (γ 0.5) and slots refilled.
TEST(VerifyRun, EarlyRerankDuringTheVerifyPassChangesNothing) {
  Golden& g = golden();
  for (bool quirks : {false, true})
    for (VerifyKept kept : {VerifyKept::kReleased, VerifyKept::kCommits}) {
      if (quirks && kept == VerifyKept::kCommits) continue;
      SCOPED_TRACE(fmt::format("reference_quirks {} verify_kept {}", quirks, static_cast<int>(kept)));
      GenerateOptions o = small_options(true);
      o.decode.gamma = 0.5;
      o.decode.reference_quirks = quirks;
      o.decode.verify_kept = kept;
      o.decode.n_slots = 3;
      FlashCacheDenoiser early(*g.backend, g.model, o), late(*g.backend, g.model, o);
      const FlashCacheResult a = early.generate(small_prompts());
      int64_t phase2 = 0;
      const FlashCacheResult b = late.generate(small_prompts(), [&](FlashStep& step) { phase2 += step.phase == 2; });
      EXPECT_GT(phase2, 0);
      EXPECT_GT(a.stats.accepted, 0) << "γ = 0.5 must accept some drafts on this model";
      ASSERT_EQ(a.requests.size(), b.requests.size());
      for (size_t r = 0; r < a.requests.size(); ++r) {
        SCOPED_TRACE(fmt::format("request {}", r));
        EXPECT_EQ(a.requests[r].iterations, b.requests[r].iterations);
        EXPECT_EQ(a.requests[r].verified, b.requests[r].verified);
        EXPECT_EQ(a.requests[r].canvas, b.requests[r].canvas);
        EXPECT_EQ(a.requests[r].output_ids, b.requests[r].output_ids);
      }
      EXPECT_EQ(a.stats.verify_forwards, b.stats.verify_forwards);
      // Host phases: the early re-rank ran only without the observer; every verify phase ran in both.
      const auto secs = [](const FlashCacheResult& r, FlashPhase p) {
        return r.stats.phase_seconds[static_cast<size_t>(p)];
      };
      EXPECT_GT(secs(a, FlashPhase::kEarlyRerank), 0.0);
      EXPECT_EQ(secs(b, FlashPhase::kEarlyRerank), 0.0);
      for (const FlashCacheResult* r : {&a, &b})
        for (FlashPhase p :
             {FlashPhase::kMainCall, FlashPhase::kMainWait, FlashPhase::kDecide, FlashPhase::kVerifyBatch,
              FlashPhase::kVerifyCall, FlashPhase::kVerifyWait, FlashPhase::kAccept, FlashPhase::kContinue})
          EXPECT_GT(secs(*r, p), 0.0) << flash_phase_name(p);
    }
}

// With every acceptance overridden to none the verify pass has no effect at all: the trajectory,
// outputs and a_t-driven query sets equal the verify-off run (default mode pins all new tokens,
// like Flash-Cache; the verify pass does not write the cache).
TEST(VerifyRun, RejectingEverythingGivesTheFlashCacheTrajectory) {
  Golden& g = golden();
  int overridden = 0;
  auto reject = [&](FlashStep& step) {
    if (step.phase == 2) {
      step.override_acceptance = true;
      ++overridden;
    }
  };
  FlashCacheDenoiser on(*g.backend, g.model, small_options(true));
  FlashCacheDenoiser off(*g.backend, g.model, small_options(false));
  const FlashCacheResult a = on.generate(small_prompts(), reject);
  const FlashCacheResult b = off.generate(small_prompts());
  EXPECT_GT(overridden, 0);
  ASSERT_EQ(a.requests.size(), b.requests.size());
  for (size_t r = 0; r < a.requests.size(); ++r) {
    EXPECT_EQ(a.requests[r].iterations, b.requests[r].iterations) << "request " << r;
    EXPECT_EQ(a.requests[r].output_ids, b.requests[r].output_ids) << "request " << r;
  }
  EXPECT_EQ(a.stats.query_rows, b.stats.query_rows);
}

// verify_kept commits: every tile keeps exactly the iteration's phase-1 commits (k1 + 2·S rows), the
// verify pass's query rows are the sum of those tiles, fewer than the released 2·bm-row tiles, and
// the run still decodes every request to its stop.
TEST(VerifyRun, CommitsKeptRowsAreThePhaseOneCommits) {
  Golden& g = golden();
  auto run = [&](VerifyKept kept, int64_t& tiles, int64_t& rows) {
    GenerateOptions o = small_options(true);
    o.decode.gamma = 0.5;
    o.decode.verify_kept = kept;
    tiles = rows = 0;
    auto observer = [&](FlashStep& step) {
      if (step.phase != 2) return;
      const FlashVerifyTile& v = *step.verification->tile;
      const FlashDecision& d = *step.decision;
      ++tiles;
      rows += v.rows();
      const auto S = static_cast<int64_t>(v.candidates.size());
      if (kept == VerifyKept::kReleased) {
        EXPECT_EQ(v.kept_budget, 2 * o.decode.block_length - 2 * S);
        return;
      }
      EXPECT_EQ(v.kept_budget, d.count);
      EXPECT_EQ(v.rows(), d.count + 2 * S);
      std::vector<int32_t> committed;
      for (int64_t i = 0; i < d.count; ++i)
        committed.push_back(d.window[static_cast<size_t>(d.order[static_cast<size_t>(i)])]);
      std::vector<int32_t> have = v.kept;
      std::sort(committed.begin(), committed.end());
      std::sort(have.begin(), have.end());
      EXPECT_EQ(have, committed) << "forward " << step.forward << " slot " << step.slot;
    };
    FlashCacheDenoiser den(*g.backend, g.model, o);
    return den.generate(small_prompts(), observer);
  };
  int64_t tiles_c = 0, rows_c = 0, tiles_r = 0, rows_r = 0;
  const FlashCacheResult c = run(VerifyKept::kCommits, tiles_c, rows_c);
  const FlashCacheResult r = run(VerifyKept::kReleased, tiles_r, rows_r);
  ASSERT_GT(tiles_c, 0);
  EXPECT_EQ(c.stats.verify_query_rows, rows_c);
  EXPECT_EQ(r.stats.verify_query_rows, rows_r);
  EXPECT_LT(static_cast<double>(rows_c) / static_cast<double>(tiles_c),
            static_cast<double>(rows_r) / static_cast<double>(tiles_r));
  for (const FlashRequestResult& q : c.requests) {
    EXPECT_EQ(static_cast<int64_t>(q.output_ids.size()), q.stop_rel) << "request " << q.request;
    EXPECT_LE(q.accepted, q.candidates);
  }
  std::cout << fmt::format(
      "[verify kept] rows per tile: commits {:.1f}, released {:.1f}; accepted {} / {} vs {} / {}\n",
      static_cast<double>(rows_c) / static_cast<double>(tiles_c),
      static_cast<double>(rows_r) / static_cast<double>(tiles_r), c.stats.accepted, c.stats.candidates,
      r.stats.accepted, r.stats.candidates);
}

// Forced acceptance (benchmarks): every candidate below the stop is accepted.
TEST(VerifyRun, ForcedAcceptanceAcceptsEveryCandidate) {
  Golden& g = golden();
  GenerateOptions o = small_options(true);
  o.decode.forced_acceptance = 16;
  o.decode.gamma = 1.0;
  int64_t expected = 0, checked = 0;
  auto observer = [&](FlashStep& step) {
    if (step.phase != 2) return;
    // Every candidate up to the first one past the stop, whatever its probability (γ = 1).
    const FlashVerification& v = *step.verification;
    int64_t lead = 0;
    while (lead < static_cast<int64_t>(v.blocked.size()) && !v.blocked[static_cast<size_t>(lead)]) ++lead;
    EXPECT_EQ(v.count, lead);
    expected += lead;
    ++checked;
  };
  FlashCacheDenoiser den(*g.backend, g.model, o);
  const FlashCacheResult res = den.generate(small_prompts(), observer);
  EXPECT_GT(checked, 0);
  EXPECT_EQ(res.stats.accepted, expected);
  // The paper rule is selectable end to end.
  o.decode.forced_acceptance = 0;
  o.decode.verify_rule = VerifyRule::kPaper;
  o.decode.gamma = 0.5;
  FlashCacheDenoiser paper(*g.backend, g.model, o);
  const FlashCacheResult rp = paper.generate(small_prompts());
  EXPECT_GT(rp.stats.verify_forwards, 0);
}

// ================================================================================ options

TEST(VerifyOptions, PresetsDefaultsAndErrors) {
  const GenerateOptions d = flash_options();
  EXPECT_FALSE(d.decode.verify);
  EXPECT_EQ(d.decode.verify_rule, VerifyRule::kProduct);
  EXPECT_EQ(d.decode.verify_kept, VerifyKept::kReleased);
  EXPECT_EQ(flash_verify_cap(d), 8);
  EXPECT_DOUBLE_EQ(flash_preset("gsm8k").gamma, 0.8);
  EXPECT_DOUBLE_EQ(flash_preset("math").gamma, 0.85);
  EXPECT_DOUBLE_EQ(flash_preset("humaneval").gamma, 0.85);
  EXPECT_DOUBLE_EQ(flash_preset("mbpp").gamma, 0.8);
  const ModelConfig& c = golden().model.config;
  // The verify settings are params.h's, validated once there (validate); they apply with verify on.
  auto expect_error = [&](GenerateOptions o, const std::string& needle) {
    try {
      validate(o, c);
      ADD_FAILURE() << "expected an error mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto verify_on = [] {
    GenerateOptions o = flash_options();
    o.decode.verify = true;
    return o;
  };
  GenerateOptions o = verify_on();
  o.decode.gamma = 0.0;
  expect_error(o, "gamma");
  o = verify_on();
  o.decode.max_candidates = 17;
  expect_error(o, "max_candidates");
  o = verify_on();
  o.decode.forced_acceptance = -1;
  expect_error(o, "forced_acceptance");
  o = verify_on();
  o.decode.verify_kept = static_cast<VerifyKept>(7);
  expect_error(o, "verify_kept");
  o = verify_on();
  o.decode.max_candidates = 16;  // S = bm, T = 0 is allowed
  EXPECT_NO_THROW(validate(o, c));
}

}  // namespace
}  // namespace flashdllm::test
