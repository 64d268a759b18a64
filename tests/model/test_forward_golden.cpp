// CPU forward pass vs the upstream HF LLaDA logits recorded in the golden fixture
// (tests/data/golden/g1/forward.safetensors; golden README "Forward fixture"):
// max|Δ| / max|ref| <= 5e-5 and argmax exact, on every sequence; plus batch invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "common/golden_fixture.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "io/safetensors.h"

namespace flashdllm::test {
namespace {

struct Fixture {
  GoldenFixture& g = golden_fixture();
  Backend* backend = g.backend.get();
  const Model& model = g.model;
  std::vector<int32_t> ids(const std::string& key) const {
    return i64_tensor_as_i32(golden_forward().tensors().at("input_ids." + key));
  }
  std::vector<float> ref(const std::string& key) const {
    return f32_tensor(golden_forward().tensors().at("logits." + key));
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

int64_t argmax_row(const float* r, int64_t V) {
  int64_t best = 0;
  for (int64_t v = 1; v < V; ++v)
    if (r[v] > r[best]) best = v;
  return best;
}

class GoldenForward : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenForward, LogitsMatchUpstreamFp32) {
  Fixture& f = fixture();
  const std::string key = GetParam();
  std::vector<int32_t> ids = f.ids(key);
  std::vector<float> ref = f.ref(key);
  std::vector<float> got = full_logits(*f.backend, f.model, {ids});
  ASSERT_EQ(got.size(), ref.size());
  const double err = rel_max_err(got, ref);
  EXPECT_LE(err, kFp32LogitRelTol) << key << ": max|Δ|/max|ref| = " << err;
  const int64_t V = f.model.config.embedding_size;
  int64_t mismatches = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    mismatches += argmax_row(&got[t * V], V) != argmax_row(&ref[t * V], V);
  EXPECT_EQ(mismatches, 0) << key << ": argmax differs on " << mismatches << " of " << ids.size() << " rows";
}

// A fixture without recordings of this kind (make_golden_variant.py --layers: a truncated model matches
// none) has no cases here; its other tests still run.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenForward);
INSTANTIATE_TEST_SUITE_P(Sequences, GoldenForward, ::testing::ValuesIn(golden_forward_keys()),
                         [](const auto& info) { return info.param; });

TEST(GoldenForwardBatch, DifferentLengthsInOneForwardEqualSingleRuns) {
  Fixture& f = fixture();
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::string> keys = golden_forward_keys();  // mixed lengths: longest, shortest, the rest
  if (keys.empty()) GTEST_SKIP() << "the fixture records no forward sequences (forward.safetensors)";
  std::sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) { return f.ids(a).size() < f.ids(b).size(); });
  if (keys.size() > 1) std::rotate(keys.begin(), keys.end() - 1, keys.end());
  for (const std::string& k : keys) seqs.push_back(f.ids(k));
  std::vector<float> batched = full_logits(*f.backend, f.model, seqs);
  const int64_t V = f.model.config.embedding_size;
  size_t off = 0;
  for (const auto& s : seqs) {
    std::vector<float> single = full_logits(*f.backend, f.model, {s});
    std::span<const float> part(batched.data() + off * V, s.size() * V);
    EXPECT_LE(rel_max_err(part, single), kFp32OpRelTol) << "sequence of length " << s.size();
    off += s.size();
  }
}

// Only the logit rows go through the last layer's attn_out and MLP (run_layers): a forward asking
// for some rows, out of order and one twice, gives those rows of the all-rows forward; one asking
// for none (an admission prefill) writes the same K/V store (the last layer's included).
TEST(GoldenForwardBatch, SomeLogitRowsEqualTheirRowsOfAllRows) {
  Fixture& f = fixture();
  std::vector<std::vector<int32_t>> seqs;
  for (const std::string& k : golden_forward_keys()) seqs.push_back(f.ids(k));
  if (seqs.empty()) GTEST_SKIP() << "the fixture records no forward sequences (forward.safetensors)";
  const ForwardBatch all = full_recompute_batch(seqs);
  const int64_t T = all.n_tokens(), V = f.model.config.embedding_size;
  std::vector<float> kv_all, kv_none;
  const std::vector<float> every = forward_logits(*f.backend, f.model, all, &kv_all);
  ForwardBatch some = all;
  some.logit_rows.clear();
  some.row_keys.clear();
  for (int64_t r = T - 1; r >= 0; r -= 5) some.logit_rows.push_back(static_cast<int32_t>(r));
  some.logit_rows.push_back(some.logit_rows.front());
  some.row_keys.assign(some.logit_rows.size(), 0);
  const std::vector<float> got = forward_logits(*f.backend, f.model, some);
  ASSERT_EQ(got.size(), some.logit_rows.size() * static_cast<size_t>(V));
  for (size_t i = 0; i < some.logit_rows.size(); ++i) {
    std::span<const float> want(every.data() + static_cast<size_t>(some.logit_rows[i]) * V, static_cast<size_t>(V));
    std::span<const float> row(got.data() + i * V, static_cast<size_t>(V));
    EXPECT_LE(rel_max_err(row, want), kFp32OpRelTol) << "logit row " << some.logit_rows[i];
  }
  ForwardBatch none = all;
  none.logit_rows.clear();
  none.row_keys.clear();
  EXPECT_TRUE(forward_logits(*f.backend, f.model, none, &kv_none).empty());
  EXPECT_EQ(kv_none, kv_all) << "the last layer's K store";
}

TEST(GoldenForwardErrors, RejectsTokenOutsideVocabulary) {
  Fixture& f = fixture();
  std::vector<int32_t> bad = {1, 2, static_cast<int32_t>(f.model.config.embedding_size)};
  try {
    full_logits(*f.backend, f.model, {bad});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("outside the embedding table"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashdllm::test
