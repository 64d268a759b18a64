// NCCL communicators (backend/comm.h) on GPUs. Skips without a CUDA device or without NCCL in the
// build; the multi-GPU cases skip below 2 GPUs.
//  * TP = 1 through NCCL: world-1 collectives are identities, and the forward's collective path
//    (row-parallel residual handling, the logits gathered through the staging buffer, importance
//    all-reduced) gives bit-identical logits and Flash-Cache tokens to the plain forward.
//  * TP = 2 over 2 GPUs (one process, group init): logits within kBf16LogitRelTol of one GPU with
//    kBf16ArgmaxAgreement (bf16 partial sums are rounded before NCCL adds them); Engine generation
//    with tensor_parallel 2 on "cuda" runs, its ranks agreeing (checked every step).
//  * The one-rank-per-process path: the id exchanged through a file, ncclCommInitRank per rank
//    (two threads standing in for two processes).
// Run on a GPU machine: ctest --test-dir build -R 'kernels/.*Nccl' (build with -DFLASHDLLM_CUDA=ON).
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "backend/backend.h"
#include "backend/comm.h"
#include "common/model_fixture.h"
#include "common/numerics.h"
#include "common/test_paths.h"
#include "engine/slot_pool.h"
#include "flashdllm/engine.h"

namespace flashdllm::test {
namespace {

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device (built without CUDA or no GPU)";
    if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL";
  }
};

std::vector<float> to_host(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.copy_to_host(v.data(), t);
  return v;
}

std::vector<std::vector<int32_t>> prompts() { return {{5, 17, 300, 42, 9, 1200, 77}, {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}}; }

TEST_F(Nccl, WorldOneCollectivesAreIdentities) {
  auto gpu = make_cuda_backend(0);
  auto comms = make_nccl_communicators({gpu.get()});
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_EQ(comms[0]->world_size(), 1);
  EXPECT_NE(comms[0]->name().find("nccl"), std::string::npos);
  std::vector<float> h(24);
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0.25f * static_cast<float>(i) - 2.0f;
  Buffer a = gpu->alloc(h.size() * 4, "a"), b = gpu->alloc(h.size() * 4, "b"), s = gpu->alloc(h.size() * 4, "s");
  Tensor ta(a.data(), DType::kF32, DeviceKind::kCUDA, {4, 6}), tb(b.data(), DType::kF32, DeviceKind::kCUDA, {4, 6});
  Tensor ts(s.data(), DType::kF32, DeviceKind::kCUDA, {24});
  gpu->copy_from_host(ta, h.data());
  comms[0]->all_reduce_sum(ta);
  EXPECT_EQ(to_host(*gpu, ta), h);
  comms[0]->all_gather_rows(ta, tb);
  EXPECT_EQ(to_host(*gpu, tb), h);
  gpu->fill_zero(tb);
  comms[0]->all_gather_columns(ta, tb, ts);
  EXPECT_EQ(to_host(*gpu, tb), h);
  comms[0]->barrier();
}

TEST_F(Nccl, Tp1ThroughNcclIsBitIdentical) {
  auto gpu = make_cuda_backend(0);
  auto comms = make_nccl_communicators({gpu.get()});
  const Model plain = load_model(*gpu, default_model_dir());
  const Model via = load_model(*gpu, default_model_dir(), {0, 1, comms[0].get()});
  const std::vector<float> a = full_logits(*gpu, plain, prompts()), b = full_logits(*gpu, via, prompts());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0);
  // Flash-Cache (importance all-reduced through NCCL) and Flash-Verify: the same tokens.
  for (bool verify : {false, true}) {
    DecodeSettings d;
    d.verify = verify;
    d.n_slots = 2;
    SamplingParams sp;
    sp.gen_length = 48;
    const SlotParams p = resolve_params(sp, d, true);
    SlotPool pool;
    pool.n_slots = 2;
    pool.max_total_length = 64;
    auto run = [&](const Model& m) {
      auto den = make_denoiser(*gpu, m, d, -1, pool);
      const auto ps = prompts();
      for (int64_t s = 0; s < 2; ++s) den->admit(s, ps[static_cast<size_t>(s)], p);
      std::vector<std::vector<int32_t>> out(2);
      for (int it = 0; it < 200 && (den->active(0) || den->active(1)); ++it)
        for (const SlotStep& st : den->step())
          if (st.finished) {
            out[static_cast<size_t>(st.slot)] = den->output(st.slot).canvas;
            den->release(st.slot);
          }
      return out;
    };
    EXPECT_EQ(run(via), run(plain)) << (verify ? "flash+verify" : "flash");
  }
}

TEST_F(Nccl, Tp2AcrossTwoGpusMatchesOneGpu) {
  // In the test body: GTEST_SKIP in a helper would return from the helper only.
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << cuda_device_count() << " present";
  auto one = make_cuda_backend(0);
  const Model full = load_model(*one, default_model_dir());
  const std::vector<float> want = full_logits(*one, full, prompts());
  std::vector<std::unique_ptr<Backend>> bes;
  bes.push_back(make_cuda_backend(0));
  bes.push_back(make_cuda_backend(1));
  auto comms = make_nccl_communicators({bes[0].get(), bes[1].get()});
  std::vector<Model> shards;
  for (int r = 0; r < 2; ++r) shards.push_back(load_model(*bes[r], default_model_dir(), {r, 2, comms[r].get()}));
  Lockstep ls(2, {comms[0].get(), comms[1].get()});
  std::vector<std::vector<float>> got(2);
  ls.run([&](int r) { got[static_cast<size_t>(r)] = full_logits(*bes[r], shards[r], prompts()); });
  EXPECT_EQ(got[0], got[1]) << "the ranks' gathered logits differ";
  const double err = rel_max_err(got[0], want);
  const int64_t V = full.config.embedding_size, rows = static_cast<int64_t>(want.size()) / V;
  int64_t same = 0;
  for (int64_t t = 0; t < rows; ++t) {
    const float *a = want.data() + t * V, *b = got[0].data() + t * V;
    same += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
  }
  std::cout << "TP 2 over NCCL vs 1 GPU: max|Δ|/max|ref| = " << err << ", argmax " << same << "/" << rows << "\n";
  EXPECT_LE(err, kBf16LogitRelTol);
  EXPECT_GE(static_cast<double>(same) / static_cast<double>(rows), kBf16ArgmaxAgreement);

  // The engine on GPUs 0..1: every step checks that the ranks committed the same tokens.
  EngineOptions eo;
  eo.model_dir = default_model_dir();
  eo.device = "cuda";
  eo.tensor_parallel = 2;
  auto engine = Engine::load(eo);
  GenerateRequest q;
  q.prompt = "Mason has 96 stamps. He gets 4 more stamps from Mia. How many stamps does he have at the end?";
  GenerateOptions go;
  go.sampling.gen_length = 64;
  const auto res = engine->generate({q, q}, go);
  EXPECT_EQ(res[0].canvas_ids, res[1].canvas_ids);
  std::cout << "TP 2 engine answer: " << res[0].text << "\n";
}

TEST_F(Nccl, OneRankPerProcessInitThroughAnIdFile) {
  // In the test body: GTEST_SKIP in a helper would return from the helper only.
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << cuda_device_count() << " present";
  const auto id_file = temp_dir() / "nccl.id";
  std::vector<std::unique_ptr<Backend>> bes;
  bes.push_back(make_cuda_backend(0));
  bes.push_back(make_cuda_backend(1));
  std::vector<std::unique_ptr<Communicator>> comms(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        const TensorParallelLaunch launch{r, 2, id_file};
        const NcclUniqueId id = exchange_nccl_unique_id(launch, 60.0);
        comms[static_cast<size_t>(r)] = make_nccl_communicator(*bes[static_cast<size_t>(r)], id, r, 2);
        std::vector<float> h(8, static_cast<float>(r + 1));
        Buffer b = bes[static_cast<size_t>(r)]->alloc(32, "t");
        Tensor t(b.data(), DType::kF32, DeviceKind::kCUDA, {8});
        bes[static_cast<size_t>(r)]->copy_from_host(t, h.data());
        comms[static_cast<size_t>(r)]->all_reduce_sum(t);
        EXPECT_EQ(to_host(*bes[static_cast<size_t>(r)], t), std::vector<float>(8, 3.0f));
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
}

}  // namespace
}  // namespace flashdllm::test
