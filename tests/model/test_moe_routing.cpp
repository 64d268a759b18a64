// The router switches of Backend::moe_route beyond LLaDA-MoE's softmax top-k (core/moe_routing.h):
// sigmoid scores, a per-expert selection bias, group-limited selection, renormalisation with a
// top-1 exception and a routed scaling factor, i.e. LLaDA2's router as a configuration (issue 47).
//
// Oracle: tests/data/golden/llada2_router.json, recorded by running the upstream LLaDA2MoeGate class
// itself (tools/diag/llada2_router_golden.py; provenance in the file) on random logits at LLaDA2-mini's
// shape (256 experts, top-8, 8 groups / top-4, scaling 2.5) and three smaller shapes. The chosen
// experts must be identical (in the gate's order: descending selection key) and the weights equal
// within fp32 op tolerance (upstream's fp32 sigmoid vs ours rounded from double: a few ulp per score).
// Each switch is also shown to matter on the recorded data: turning it off changes the experts.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "common/expect_error.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "core/moe_routing.h"

namespace flashdllm::test {
namespace {

using nlohmann::json;

const json& golden() {
  static const json j = [] {
    std::ifstream f(test_data_dir() / "golden" / "llada2_router.json");
    return json::parse(f);
  }();
  return j;
}

MoeRouting routing_of(const json& c) {
  MoeRouting r;
  r.n_experts = c.at("n_experts").get<int32_t>();
  r.top_k = c.at("top_k").get<int32_t>();
  r.score = RouterScore::kSigmoid;
  r.renormalize = true;  // LLaDA2-mini's norm_topk_prob
  r.expert_bias = true;
  r.n_groups = c.at("n_group").get<int32_t>();
  r.topk_groups = c.at("topk_group").get<int32_t>();
  r.scaling = c.at("routed_scaling_factor").get<float>();
  return r;
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const json& c, const MoeRouting& r) {
  auto be = make_cpu_backend(2);
  std::vector<float> logits, bias = c.at("expert_bias").get<std::vector<float>>();
  for (const auto& row : c.at("logits")) {
    const auto v = row.get<std::vector<float>>();
    logits.insert(logits.end(), v.begin(), v.end());
  }
  const int64_t E = r.n_experts, T = static_cast<int64_t>(logits.size()) / E, k = r.top_k;
  Routed out{std::vector<int32_t>(static_cast<size_t>(T * k)), std::vector<float>(static_cast<size_t>(T * k))};
  const Tensor b = r.expert_bias ? Tensor(bias.data(), DType::kF32, DeviceKind::kCPU, {E}) : Tensor{};
  be->moe_route(Tensor(logits.data(), DType::kF32, DeviceKind::kCPU, {T, E}), b, r,
                Tensor(out.ids.data(), DType::kI32, DeviceKind::kCPU, {T, k}),
                Tensor(out.weights.data(), DType::kF32, DeviceKind::kCPU, {T, k}));
  return out;
}

std::vector<int32_t> flat_ids(const json& c) {
  std::vector<int32_t> v;
  for (const auto& row : c.at("expert_ids"))
    for (const auto& x : row) v.push_back(x.get<int32_t>());
  return v;
}

TEST(MoeRoutingGolden, Llada2GateExpertsAndWeightsMatchUpstream) {
  ASSERT_EQ(golden().at("cases").size(), 4u);
  for (const json& c : golden().at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const Routed got = route(c, routing_of(c));
    EXPECT_EQ(got.ids, flat_ids(c));
    std::vector<float> want;
    for (const auto& row : c.at("expert_weights"))
      for (const auto& x : row) want.push_back(x.get<float>());
    EXPECT_LE(rel_max_err(got.weights, want), kFp32OpRelTol);
  }
}

TEST(MoeRoutingGolden, EachSwitchChangesTheChosenExperts) {
  // The recorded cases would not pass with a switch ignored: without the bias, without the groups,
  // and with softmax scores, the chosen experts differ from upstream's on some row.
  const json& mini = golden().at("cases").at(0);
  ASSERT_EQ(mini.at("name"), "llada2_mini_shape");
  const std::vector<int32_t> want = flat_ids(mini);
  MoeRouting no_bias = routing_of(mini);
  no_bias.expert_bias = false;
  EXPECT_NE(route(mini, no_bias).ids, want);
  MoeRouting no_groups = routing_of(mini);
  no_groups.n_groups = no_groups.topk_groups = 1;
  EXPECT_NE(route(mini, no_groups).ids, want);
  // Top-1 keeps its score (no renormalisation to 1): weight = sigmoid(z) x scaling < scaling.
  const json& top1 = golden().at("cases").at(3);
  ASSERT_EQ(top1.at("top_k"), 1);
  for (const float w : route(top1, routing_of(top1)).weights) {
    EXPECT_GT(w, 0.0f);
    EXPECT_LT(w, top1.at("routed_scaling_factor").get<float>());
  }
}

TEST(MoeRouting, InvalidSwitchesAreRefusedNamingThem) {
  MoeRouting r;
  r.n_experts = 12;
  r.top_k = 2;
  EXPECT_EQ(moe_routing_error(r), "");
  auto with = [&](auto edit) {
    MoeRouting x = r;
    edit(x);
    return moe_routing_error(x);
  };
  EXPECT_NE(with([](MoeRouting& x) { x.n_groups = 5; }).find("n_groups 5"), std::string::npos);
  EXPECT_NE(with([](MoeRouting& x) { x.n_groups = 4, x.topk_groups = 5; }).find("topk_groups 5"), std::string::npos);
  EXPECT_NE(with([](MoeRouting& x) { x.n_groups = 12, x.topk_groups = 2; }).find("2 experts per group"),
            std::string::npos);
  EXPECT_NE(with([](MoeRouting& x) { x.n_groups = 6, x.topk_groups = 1, x.top_k = 3; }).find("top_k 3 exceeds"),
            std::string::npos);
  EXPECT_NE(with([](MoeRouting& x) { x.top_k = 13; }).find("top_k 13"), std::string::npos);
  // The backend op refuses them with the op's name, and an expert bias of the wrong size.
  auto be = make_cpu_backend(1);
  std::vector<float> logits(2 * 12, 0.5f), w(4), bias(11);
  std::vector<int32_t> ids(4);
  const Tensor lt(logits.data(), DType::kF32, DeviceKind::kCPU, {2, 12});
  const Tensor it(ids.data(), DType::kI32, DeviceKind::kCPU, {2, 2});
  const Tensor wt(w.data(), DType::kF32, DeviceKind::kCPU, {2, 2});
  MoeRouting bad = r;
  bad.n_groups = 5;
  expect_error([&] { be->moe_route(lt, Tensor{}, bad, it, wt); }, ErrorCode::kInvalidArgument,
               {"moe_route", "n_groups 5"});
  MoeRouting biased = r;
  biased.expert_bias = true;
  expect_error([&] { be->moe_route(lt, Tensor(bias.data(), DType::kF32, DeviceKind::kCPU, {11}), biased, it, wt); },
               ErrorCode::kInvalidArgument, {"moe_route", "expert_bias", "12 elements"});
}

}  // namespace
}  // namespace flashdllm::test
