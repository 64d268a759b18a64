// Data-parallel replicas through the public API (EngineOptions::data_parallel, CPU replicas with
// their own backends and weights, issue 14 #2): generate() deals a batch over the replicas and
// returns the one-replica engine's tokens in every decoding mode; a started engine runs one loop
// per replica behind the one queue (slots and metrics add up, served answers equal one replica's);
// impossible settings are refused at load naming the parameter.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "common/model_fixture.h"
#include "common/test_paths.h"
#include "flashdllm/engine.h"
#include "model/model_config.h"

namespace flashdllm {
namespace {

using Mode = test::DecodeMode;

/// The block samplers on a 32-token canvas in blocks of 16, Flash-Cache on 48 tokens over 2 slots
/// per replica (so five requests also queue), with and without Flash-Verify.
std::vector<Mode> modes() {
  std::vector<Mode> out;
  Mode none{"none", {}, {}};
  none.d.cache = CacheMode::kNone;
  none.d.block_length = 16;
  none.s.gen_length = 32;
  none.s.steps = 16;
  out.push_back(none);
  Mode dual = none;
  dual.name = "dual";
  dual.d.cache = CacheMode::kDual;
  dual.s.threshold = 0.9;
  dual.s.steps = 0;
  out.push_back(dual);
  Mode flash{"flash", {}, {}};
  flash.s.gen_length = 48;
  flash.d.n_slots = 2;
  out.push_back(flash);
  Mode verify = flash;
  verify.name = "flash_verify";
  verify.d.verify = true;
  out.push_back(verify);
  Mode hot = flash;
  hot.name = "flash_temperature";
  hot.s.temperature = 0.7;
  hot.s.seed = 11;
  out.push_back(hot);
  return out;
}

EngineOptions options(int dp, int tp = 1) {
  EngineOptions o;
  o.model_dir = test::default_model_dir();
  o.threads = 1;  // one thread per rank everywhere: the comparisons are bitwise
  o.data_parallel = dp;
  o.tensor_parallel = tp;
  return o;
}

/// Five prompts of random ids of the model's plain vocabulary, of different lengths.
std::vector<GenerateRequest> requests(const ModelConfig& c) { return test::random_id_requests(c, 5, 7, 4, 7); }

TEST(DataParallelEngine, GenerateDealsTheBatchAndEqualsOneReplicaInEveryMode) {
  auto one = Engine::load(options(1));
  auto two = Engine::load(options(2));
  EXPECT_EQ(two->replicas(), 2);
  EXPECT_NE(two->backend_name().find("2 data-parallel replicas"), std::string::npos) << two->backend_name();
  const auto rq = requests(one->config());
  for (const Mode& m : modes()) {
    GenerateOptions go{m.d, m.s};
    const auto want = one->generate(rq, go);
    const auto got = two->generate(rq, go);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].canvas_ids, want[i].canvas_ids) << m.name << " request " << i;
      EXPECT_EQ(got[i].nfe, want[i].nfe) << m.name << " request " << i;
      EXPECT_EQ(got[i].verify_accepted, want[i].verify_accepted) << m.name << " request " << i;
    }
  }
  // One request on two replicas: the second has nothing to do.
  GenerateOptions go;
  go.sampling.gen_length = 32;
  EXPECT_EQ(two->generate({rq[0]}, go)[0].canvas_ids, one->generate({rq[0]}, go)[0].canvas_ids);
}

TEST(DataParallelEngine, TensorParallelReplicasEqualOneReplica) {
  auto one = Engine::load(options(1));
  auto both = Engine::load(options(2, 2));  // 2 replicas of 2 tensor-parallel CPU ranks
  EXPECT_NE(both->backend_name().find("2 tensor-parallel ranks"), std::string::npos) << both->backend_name();
  const auto rq = requests(one->config());
  const Mode m = modes()[2];
  GenerateOptions go{m.d, m.s};
  const auto want = one->generate(rq, go), got = both->generate(rq, go);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].canvas_ids, want[i].canvas_ids) << i;
}

TEST(DataParallelEngine, ServingRunsEveryReplicaBehindOneQueue) {
  auto one = Engine::load(options(1));
  auto two = Engine::load(options(2));
  const auto rq = requests(one->config());
  ServeOptions so;
  so.decode.n_slots = 2;
  so.max_model_len = 256;
  so.max_queue = 4;
  SamplingParams sp;
  sp.gen_length = 40;
  auto serve = [&](Engine& e) {
    e.start(so);
    EXPECT_EQ(e.total_slots(), 2 * e.replicas());
    EXPECT_EQ(e.serve_options().decode.n_slots, 2) << "slots are per replica";
    // Submitted from several threads at once; each stream read to its end.
    std::vector<std::vector<int32_t>> out(rq.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < rq.size(); ++i)
      threads.emplace_back([&, i] {
        auto s = e.submit(rq[i], sp);
        std::optional<RequestEvent> last;
        while (!s->finished())
          if (auto ev = s->next(std::chrono::seconds(60)); ev && ev->finished) last = ev;
        EXPECT_TRUE(last && last->result) << i;
        if (last && last->result) out[i] = last->result->canvas_ids;
      });
    for (auto& t : threads) t.join();
    const EngineMetrics m = e.metrics();
    EXPECT_EQ(m.n_slots, 2 * e.replicas());
    EXPECT_EQ(m.replicas, e.replicas());
    EXPECT_EQ(m.requests_finished_stop + m.requests_finished_length, static_cast<int64_t>(rq.size()));
    EXPECT_EQ(m.slots_busy, 0);
    EXPECT_EQ(m.queue_depth, 0);
    e.stop(/*drain=*/true);
    return out;
  };
  EXPECT_EQ(serve(*two), serve(*one));
  // Stopping with requests in flight on both replicas: cancelled, the engine stops, none hangs.
  two->start(so);
  std::vector<std::shared_ptr<RequestStream>> streams;
  SamplingParams slow = sp;
  slow.gen_length = 200;
  for (int i = 0; i < 6; ++i) streams.push_back(two->submit(rq[static_cast<size_t>(i) % rq.size()], slow));
  two->stop(/*drain=*/false);
  for (auto& s : streams) {
    std::optional<RequestEvent> last;
    while (auto ev = s->next(std::chrono::seconds(5)))
      if (ev->finished) last = ev;
    ASSERT_TRUE(last.has_value());
    EXPECT_TRUE(last->finish_reason == FinishReason::kCancelled || last->finish_reason == FinishReason::kLength ||
                last->finish_reason == FinishReason::kStop)
        << finish_reason_name(last->finish_reason);
  }
  EXPECT_FALSE(two->started());
}

TEST(DataParallelEngine, LoadRefusesImpossibleSettings) {
  for (int dp : {0, 65}) {
    try {
      Engine::load(options(dp));
      FAIL() << "data_parallel " << dp << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("data_parallel must be in [1, 64]"), std::string::npos) << e.what();
    }
  }
  try {
    Engine::load(options(16, 8));
    FAIL() << "128 devices accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds 64 ranks"), std::string::npos) << e.what();
  }
  EngineOptions prof = options(2);
  prof.profile_ops = true;
  EXPECT_THROW(Engine::load(prof), Error);
  if (cuda_device_count() < 2) {
    EngineOptions gpu = options(2);
    gpu.device = "cuda";
    try {
      Engine::load(gpu);
      FAIL() << "data_parallel 2 on " << cuda_device_count() << " GPU(s) accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("need GPUs 0..1"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace flashdllm
