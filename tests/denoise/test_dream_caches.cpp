// The block denoisers on a shifted-logit model (Dream: position p is predicted by output row p − 1,
// Dream-org generation_utils.py; logits_source in denoise/block_decoding.h), on the tiny Dream
// checkpoint tests/data/golden/dream_a (fp32, CPU). Properties that fail when the shift is ignored or
// applied in the wrong place:
//  * LLaDA's block sampler and the Fast-dLLM F call: the confidences of a step are the max softmax of
//    the full forward's row p − 1 (and not of row p: the test checks the two differ);
//  * Fast-dLLM prefix / dual cache: a cached call over a cache that is exact for the current canvas
//    (the F call's K/V with its commits undone) gives the F call's candidates, confidences and commits
//    (the block's first position is read from the row before the block, a query row of the call);
//  * Flash-Cache: every window position's source row (p − 1) is a query row of the main pass, added to
//    the tracked set when the budgets leave it out; with every position queried (track_num < 0) the
//    window's tokens and confidences are those of the full forward's row p − 1;
//  * forcing logit_shift off changes the generated tokens.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/backend.h"
#include "common/golden_fixture.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "denoise/fastdllm_cache.h"
#include "denoise/flash_cache.h"
#include "denoise/llada_sampler.h"

namespace flashdllm::test {
namespace {

using nlohmann::json;

/// The CPU backend and the tiny Dream checkpoint, loaded once (the model is mutable: one test
/// turns its logit_shift off for a while).
struct DreamModel {
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  Model model = load_model(*backend, test_data_dir() / "golden" / "dream_a");
};
DreamModel& dream() {
  static DreamModel g;
  return g;
}

std::vector<std::vector<int32_t>> dream_prompts() {
  const json j = load_json(test_data_dir() / "golden" / "dream_a" / "gen_dream.json");
  std::vector<std::vector<int32_t>> out;
  for (const json& p : j["prompts"]["main"]) out.push_back(p.get<std::vector<int32_t>>());
  for (const json& p : j["prompts"]["batch_pair"]) out.push_back(p.get<std::vector<int32_t>>());
  return out;
}

GenerateOptions block_options(CacheMode cache) {
  GenerateOptions o;
  o.decode.cache = cache;
  o.decode.sampler = cache == CacheMode::kNone ? Sampler::kLlada : Sampler::kAuto;
  o.decode.block_length = 8;
  o.sampling.gen_length = 32;
  o.sampling.threshold = 0.9;
  return o;
}

/// Fast-dLLM's confidence of a logits row: softmax probability (float64) of the argmax over the
/// tokens other than the mask.
double row_confidence(std::span<const float> row, int32_t mask) {
  int64_t best = -1;
  float mx = -std::numeric_limits<float>::infinity();
  for (size_t v = 0; v < row.size(); ++v) mx = std::max(mx, row[v]);
  for (size_t v = 0; v < row.size(); ++v)
    if (static_cast<int32_t>(v) != mask && (best < 0 || row[v] > row[static_cast<size_t>(best)]))
      best = static_cast<int64_t>(v);
  double z = 0.0;
  for (float l : row) z += std::exp(static_cast<double>(l) - mx);
  return std::exp(static_cast<double>(row[static_cast<size_t>(best)]) - mx) / z;
}

/// The confidences of `cand` from the full forward of x, read from row logits_source(p) (shifted)
/// or row p (unshifted).
std::vector<double> full_forward_confidences(const std::vector<int32_t>& x, const std::vector<int64_t>& cand,
                                             bool shifted) {
  DreamModel& g = dream();
  const std::vector<float> logits = full_logits(*g.backend, g.model, {x});
  const int64_t V = g.model.config.embedding_size;
  std::vector<double> out;
  for (int64_t p : cand) {
    const int64_t r = shifted ? p - 1 : p;
    out.push_back(
        row_confidence(std::span<const float>(logits).subspan(static_cast<size_t>(r * V), static_cast<size_t>(V)),
                       g.model.config.mask_token_id));
  }
  return out;
}

/// Asserts that a step's confidences are those of row p − 1 of the full forward and differ from
/// those of row p somewhere (so the check can tell the two apart).
void expect_confidences_from_previous_row(const std::vector<int32_t>& x_before, const StepCommit& c,
                                          const std::string& what, int& distinguishing) {
  const std::vector<double> want = full_forward_confidences(x_before, c.candidates, true);
  const std::vector<double> unshifted = full_forward_confidences(x_before, c.candidates, false);
  ASSERT_EQ(c.confidences.size(), want.size()) << what;
  for (size_t j = 0; j < want.size(); ++j) {
    // fp32 logits of the same forward, summed in another row order: ~1e-6 relative in probability.
    EXPECT_NEAR(c.confidences[j], want[j], 1e-5) << what << " candidate " << c.candidates[j];
    if (std::abs(want[j] - unshifted[j]) > 1e-3) ++distinguishing;
  }
}

TEST(DreamBlockDenoisers, FirstStepConfidencesComeFromThePreviousRow) {
  DreamModel& g = dream();
  ASSERT_TRUE(g.model.config.logit_shift);
  int distinguishing = 0;
  for (const auto& prompt : dream_prompts()) {
    {
      LladaSampler sampler(*g.backend, g.model, block_options(CacheMode::kNone));
      std::vector<SequenceState> batch{sampler.init_state(prompt)};
      const std::vector<int32_t> x = batch[0].x;
      const std::vector<StepCommit> c = sampler.step(batch);
      expect_confidences_from_previous_row(x, c[0], "llada block sampler", distinguishing);
    }
    for (CacheMode mode : {CacheMode::kPrefix, CacheMode::kDual}) {
      FastDllmCacheSampler sampler(*g.backend, g.model, block_options(mode));
      std::vector<CachedSequenceState> batch{sampler.init_state(prompt)};
      const std::vector<int32_t> x = batch[0].x;
      const std::vector<StepCommit> c = sampler.step(batch);
      expect_confidences_from_previous_row(x, c[0], fmt::format("{} F call", cache_mode_name(mode)), distinguishing);
    }
  }
  EXPECT_GT(distinguishing, 0) << "rows p and p - 1 gave the same confidences everywhere: the test proves nothing";
}

/// From every block start of a generation: the F call, its commits undone (the cache is then exact
/// for the canvas), the cached call. Returns the number of compared candidates.
int64_t check_cached_call_equals_full_call(CacheMode mode, const std::vector<int32_t>& prompt) {
  DreamModel& g = dream();
  const GenerateOptions o = block_options(mode);
  FastDllmCacheSampler run(*g.backend, g.model, o), probe(*g.backend, g.model, o);
  std::vector<CachedSequenceState> batch{run.init_state(prompt)};
  int64_t compared = 0;
  while (!batch[0].done) {
    if (batch[0].step_in_block == 0) {
      std::vector<CachedSequenceState> t{batch[0]};
      const std::vector<int32_t> x = t[0].x;
      const StepCommit full = probe.step(t)[0];
      if (t[0].block != batch[0].block) continue;  // the F call filled the block: nothing cached left
      t[0].x = x;                                  // undo its commits: the cache is exact for x
      const StepCommit cached = probe.step(t)[0];
      EXPECT_EQ(t[0].call_kinds.back(), mode == CacheMode::kPrefix ? kCallSuffix : kCallBlock);
      const std::string what =
          fmt::format("{} block {} prompt of {}", cache_mode_name(mode), batch[0].block, prompt.size());
      EXPECT_EQ(cached.candidates, full.candidates) << what;
      EXPECT_EQ(cached.confidences.size(), full.confidences.size()) << what;
      double margin = std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < std::min(cached.confidences.size(), full.confidences.size()); ++j) {
        // Different row counts (the cached call's and the full call's GEMMs) move the last bits.
        EXPECT_NEAR(cached.confidences[j], full.confidences[j], kFp32BatchConfTol)
            << what << " position " << full.candidates[j];
        margin = std::min(margin, std::abs(full.confidences[j] - 0.9));
        ++compared;
      }
      if (margin > kFp32DecisionMargin) {
        EXPECT_EQ(cached.positions, full.positions) << what;
        EXPECT_EQ(cached.tokens, full.tokens) << what;
      }
    }
    const StepCommit c = run.step(batch)[0];
    EXPECT_TRUE(c.error.empty()) << c.error;
  }
  return compared;
}

TEST(DreamBlockDenoisers, PrefixCacheOverAnExactCacheEqualsTheFullCall) {
  int64_t compared = 0;
  for (const auto& prompt : dream_prompts()) compared += check_cached_call_equals_full_call(CacheMode::kPrefix, prompt);
  EXPECT_GT(compared, 20);
}

TEST(DreamBlockDenoisers, DualCacheOverAnExactCacheEqualsTheFullCall) {
  int64_t compared = 0;
  for (const auto& prompt : dream_prompts()) compared += check_cached_call_equals_full_call(CacheMode::kDual, prompt);
  EXPECT_GT(compared, 20);
}

/// Generated canvases of every prompt under `mode` with the model's logit_shift set to `shift`.
std::vector<std::vector<int32_t>> generate_all(CacheMode mode, bool shift) {
  DreamModel& g = dream();
  const bool saved = g.model.config.logit_shift;
  g.model.config.logit_shift = shift;
  std::vector<std::vector<int32_t>> out;
  {
    FastDllmCacheSampler sampler(*g.backend, g.model, block_options(mode));
    for (const auto& prompt : dream_prompts()) {
      std::vector<CachedSequenceState> r = sampler.generate({prompt});
      out.emplace_back(state_canvas(r[0]).begin(), state_canvas(r[0]).end());
    }
  }
  g.model.config.logit_shift = saved;
  return out;
}

TEST(DreamBlockDenoisers, ForcingTheShiftOffChangesTheTokens) {
  for (CacheMode mode : {CacheMode::kPrefix, CacheMode::kDual}) {
    const auto shifted = generate_all(mode, true);
    const auto unshifted = generate_all(mode, false);
    EXPECT_NE(shifted, unshifted) << cache_mode_name(mode);
    for (const auto& c : shifted)
      EXPECT_EQ(std::count(c.begin(), c.end(), dream().model.config.mask_token_id), 0) << cache_mode_name(mode);
  }
}

GenerateOptions flash_options(int64_t track_num) {
  GenerateOptions o;
  o.decode.cache = CacheMode::kFlash;
  o.decode.block_length = 4;
  o.decode.track_num = track_num;
  o.decode.mask_num = 1;
  o.sampling.gen_length = 32;
  o.sampling.threshold = 0.9;
  return o;
}

/// The slot's main-pass query positions, [window | tracked].
std::vector<int32_t> query_positions(const FlashSlot& s) {
  std::vector<int32_t> q = s.window;
  q.insert(q.end(), s.tracked.begin(), s.tracked.end());
  return q;
}

TEST(DreamFlashCache, EveryWindowPositionReadsTheQueryRowBeforeIt) {
  DreamModel& g = dream();
  const GenerateOptions o = flash_options(1);
  FlashCacheDenoiser den(*g.backend, g.model, o);
  int64_t windows = 0, added = 0;
  den.generate(dream_prompts(), [&](FlashStep& st) {
    if (st.phase != 1) return;
    const FlashSlot& s = *st.state;
    ASSERT_TRUE(s.logit_shift);
    ASSERT_EQ(s.logit_rows.size(), s.window.size());
    const std::vector<int32_t> q = query_positions(s);
    for (size_t r = 0; r < s.window.size(); ++r) {
      ASSERT_LT(static_cast<size_t>(s.logit_rows[r]), q.size());
      EXPECT_EQ(q[static_cast<size_t>(s.logit_rows[r])], s.window[r] - 1) << "window entry " << r;
    }
    FlashSlot plain = s;  // the same budgets without the shift: the rows the shift added
    plain.logit_shift = false;
    flash_prepare_queries(plain, o);
    if (plain.window == s.window) added += static_cast<int64_t>(s.tracked.size() - plain.tracked.size());
    ++windows;
  });
  EXPECT_GT(windows, 10);
  EXPECT_GT(added, 0) << "the budgets always held the source rows: the test does not reach the added rows";
}

TEST(DreamFlashCache, FullRecomputeWindowsReadThePreviousRowOfTheFullForward) {
  DreamModel& g = dream();
  FlashCacheDenoiser den(*g.backend, g.model, flash_options(-1));
  const int32_t mask = g.model.config.mask_token_id;
  const int64_t V = g.model.config.embedding_size;
  int64_t compared = 0;
  den.generate(dream_prompts(), [&](FlashStep& st) {
    if (st.phase != 1) return;
    const FlashSlot& s = *st.state;
    const FlashDecision& d = *st.decision;
    const std::vector<int32_t> x(s.x.begin(), s.x.begin() + s.seqlen_k);  // every key, all queried
    const std::vector<float> logits = full_logits(*g.backend, g.model, {x});
    for (size_t r = 0; r < d.window.size(); ++r) {
      const int64_t p = d.window[r];
      if (p >= s.seqlen_k || d.confidence[r] == 0.0) continue;  // past the keys, or zeroed by the stop rule
      const auto row = std::span<const float>(logits).subspan(static_cast<size_t>((p - 1) * V), static_cast<size_t>(V));
      EXPECT_NEAR(d.confidence[r], row_confidence(row, mask), kFp32BatchConfTol) << "position " << p;
      const auto best = std::max_element(row.begin(), row.end()) - row.begin();
      if (best != mask) {
        EXPECT_EQ(d.tokens[r], best) << "position " << p;
      }
      ++compared;
    }
  });
  EXPECT_GT(compared, 50);
}

TEST(DreamFlashCache, ForcingTheShiftOffChangesTheTokens) {
  DreamModel& g = dream();
  std::vector<std::vector<int32_t>> out[2];
  for (bool shift : {true, false}) {
    g.model.config.logit_shift = shift;
    FlashCacheDenoiser den(*g.backend, g.model, flash_options(1));
    for (const FlashRequestResult& r : den.generate(dream_prompts()).requests) out[shift].push_back(r.output_ids);
  }
  g.model.config.logit_shift = true;
  EXPECT_NE(out[0], out[1]);
}

}  // namespace
}  // namespace flashdllm::test
