// EngineOptions::profile_ops: the op-timing decorator (src/backend/profiling_backend.h) changes no
// result and accounts every op of a generate call.
#include <gtest/gtest.h>

#include <map>

#include "common/test_paths.h"
#include "flashdllm/engine.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

std::unique_ptr<Engine> load(bool profile) {
  EngineOptions eo;
  eo.model_dir = test::default_model_dir();
  eo.threads = 1;
  eo.profile_ops = profile;
  return Engine::load(eo);
}

TEST(ProfilingBackend, SameTokensAndEveryOpCounted) {
  if (!std::filesystem::exists(test::default_model_dir() / "config.json")) GTEST_SKIP() << "no default model";
  GenerateOptions go;
  go.decode.cache = CacheMode::kFlash;
  go.sampling.gen_length = 32;
  go.sampling.threshold = 0.9;
  GenerateRequest rq;
  rq.prompt = "What is 12 + 7?";

  auto plain = load(false);
  auto prof = load(true);
  EXPECT_TRUE(plain->op_profile().empty());
  EXPECT_TRUE(prof->op_profile().empty()) << "loading must not be in the profile";
  EXPECT_NE(prof->backend_name().find("[op profiling]"), std::string::npos);

  const auto a = plain->generate({rq}, go);
  const auto b = prof->generate({rq}, go);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].canvas_ids, b[0].canvas_ids);
  EXPECT_EQ(a[0].nfe, b[0].nfe);

  std::map<std::string, OpProfileEntry> by_op;
  double sum = 0.0;
  for (const auto& e : prof->op_profile()) {
    EXPECT_GT(e.calls, 0) << e.op;
    EXPECT_GE(e.seconds, 0.0) << e.op;
    sum += e.seconds;
    by_op[e.op] = e;
  }
  const auto& cfg = prof->config();
  // One forward per iteration: one embedding, n_layers attention calls, one logits matmul (vocab x d_model).
  ASSERT_TRUE(by_op.count("embedding"));
  EXPECT_EQ(by_op["embedding"].calls, b[0].nfe);
  // Layers before importance_first_layer run attention alone, the others the importance-fused call.
  ASSERT_TRUE(by_op.count("attention"));
  ASSERT_TRUE(by_op.count("attention_with_importance"));
  EXPECT_EQ(by_op["attention"].calls + by_op["attention_with_importance"].calls, b[0].nfe * cfg.n_layers);
  EXPECT_TRUE(by_op.count("select_tokens"));
  EXPECT_TRUE(by_op.count("qkv_rope_store"));
  const std::string lm_head = "matmul " + std::to_string(cfg.embedding_size) + "x" + std::to_string(cfg.d_model);
  ASSERT_TRUE(by_op.count(lm_head)) << lm_head;
  EXPECT_EQ(by_op[lm_head].calls, b[0].nfe);
  EXPECT_GT(sum, 0.0);
  EXPECT_LE(sum, b[0].seconds * 1.01 + 1e-3) << "ops are timed inside the generate call";
  // Sorted by descending total time.
  const auto ops = prof->op_profile();
  for (size_t i = 1; i < ops.size(); ++i) EXPECT_GE(ops[i - 1].seconds, ops[i].seconds);
}

}  // namespace
}  // namespace flashdllm
