// The in-process communicator (backend/comm.h): all-reduce sums in rank order with identical bits
// on every rank, the two gathers, shape checks on every rank, abort waking a blocked rank, and the
// launch helpers' environment parsing. Plus Lockstep (engine/tensor_parallel.h), which drives the
// ranks: errors reported by rank, symmetric failures leave the communicators usable, a rank failing
// while its peers wait in a collective aborts them instead of hanging.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/backend.h"
#include "backend/comm.h"
#include "core/check.h"
#include "core/dtype.h"
#include "engine/tensor_parallel.h"

namespace flashdllm {
namespace {

Tensor host(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kF32, DeviceKind::kCPU, dims);
}

/// Runs fn(rank, comm) on `world` threads at once; returns the ranks' exceptions' messages ("" = none).
std::vector<std::string> on_ranks(std::vector<std::unique_ptr<Communicator>>& comms,
                                  const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::string> err(comms.size());
  std::vector<std::thread> t;
  for (size_t r = 0; r < comms.size(); ++r)
    t.emplace_back([&, r] {
      try {
        fn(static_cast<int>(r), *comms[r]);
      } catch (const Error& e) {
        err[r] = e.what();
      }
    });
  for (auto& x : t) x.join();
  return err;
}

TEST(LocalComm, AllReduceSumsInRankOrderWithEqualBitsEverywhere) {
  for (int world : {1, 2, 3, 4}) {
    auto comms = make_local_communicators(world);
    // Values whose fp32 sum depends on the order: rank 0 holds 1e8, the others 1 and -1e8 mixed.
    const int64_t n = 37;
    std::vector<std::vector<float>> bufs(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; ++i)
        bufs[static_cast<size_t>(r)].push_back(r == 0 ? 1e8f + static_cast<float>(i)
                                                      : (r % 2 ? 1.0f + 0.25f * static_cast<float>(i) : -1e8f));
    std::vector<float> expect(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float s = bufs[0][static_cast<size_t>(i)];
      for (int r = 1; r < world; ++r) s += bufs[static_cast<size_t>(r)][static_cast<size_t>(i)];
      expect[static_cast<size_t>(i)] = s;
    }
    auto err = on_ranks(comms, [&](int r, Communicator& c) {
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.world_size(), world);
      c.all_reduce_sum(host(bufs[static_cast<size_t>(r)], {n}));
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(err[static_cast<size_t>(r)], "");
      EXPECT_EQ(std::memcmp(bufs[static_cast<size_t>(r)].data(), expect.data(), n * sizeof(float)), 0)
          << "world " << world << " rank " << r;
    }
  }
}

TEST(LocalComm, AllReduceBf16RoundsTheFp32SumOnce) {
  auto comms = make_local_communicators(3);
  const float a = 1.0f, b = 0.00390625f, c = 0.00390625f;  // 1 + 2^-8 + 2^-8: bf16 partial sums would lose both
  std::vector<std::vector<uint16_t>> bufs = {{f32_to_bf16(a)}, {f32_to_bf16(b)}, {f32_to_bf16(c)}};
  on_ranks(comms, [&](int r, Communicator& cm) {
    cm.all_reduce_sum(Tensor(bufs[static_cast<size_t>(r)].data(), DType::kBF16, DeviceKind::kCPU, {1}));
  });
  for (const auto& v : bufs) EXPECT_EQ(v[0], f32_to_bf16((a + b) + c));
  EXPECT_NE(f32_to_bf16((a + b) + c), f32_to_bf16(a));  // the once-rounded sum differs from bf16 chaining
}

TEST(LocalComm, GathersPlaceEachRanksBlock) {
  const int world = 3;
  const int64_t R = 2, C = 5;
  auto comms = make_local_communicators(world);
  std::vector<std::vector<float>> local(world), rows(world, std::vector<float>(world * R * C)),
      cols(world, std::vector<float>(world * R * C));
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < R * C; ++i) local[r].push_back(static_cast<float>(100 * r + i));
  auto err = on_ranks(comms, [&](int r, Communicator& c) {
    c.all_gather_rows(host(local[r], {R, C}), host(rows[r], {world * R, C}));
    c.all_gather_columns(host(local[r], {R, C}), host(cols[r], {R, world * C}), Tensor{});
    c.barrier();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(err[r], "");
    for (int src = 0; src < world; ++src)
      for (int64_t i = 0; i < R; ++i)
        for (int64_t j = 0; j < C; ++j) {
          const float v = static_cast<float>(100 * src + i * C + j);
          EXPECT_EQ(rows[r][(src * R + i) * C + j], v);
          EXPECT_EQ(cols[r][i * world * C + src * C + j], v);
        }
  }
}

TEST(LocalComm, MismatchedShapesFailOnEveryRankWithoutHanging) {
  auto comms = make_local_communicators(2);
  std::vector<float> a(4), b(6);
  auto err = on_ranks(comms, [&](int r, Communicator& c) { c.all_reduce_sum(r == 0 ? host(a, {4}) : host(b, {6})); });
  for (const auto& e : err) EXPECT_NE(e.find("rank 1 passed"), std::string::npos) << e;
  // Still usable: the failed collective left no rank inside a rendezvous.
  err = on_ranks(comms, [&](int, Communicator& c) { c.all_reduce_sum(host(a, {4})); });
  for (const auto& e : err) EXPECT_EQ(e, "");
}

TEST(LocalComm, RejectsDeviceMemoryAndOtherDtypes) {
  auto comms = make_local_communicators(1);
  std::vector<float> a(4);
  Tensor dev(a.data(), DType::kF32, DeviceKind::kCUDA, {4});
  EXPECT_THROW(comms[0]->all_reduce_sum(dev), Error);
  Tensor ints(a.data(), DType::kI32, DeviceKind::kCPU, {4});
  EXPECT_THROW(comms[0]->all_reduce_sum(ints), Error);
  EXPECT_THROW(make_local_communicators(0), Error);
}

TEST(LocalComm, AbortWakesARankWaitingForAMissingPeer) {
  auto comms = make_local_communicators(2);
  std::vector<float> a(4);
  std::string err;
  std::thread t([&] {
    try {
      comms[0]->all_reduce_sum(host(a, {4}));
    } catch (const Error& e) {
      err = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort();
  t.join();
  EXPECT_NE(err.find("aborted"), std::string::npos) << err;
  EXPECT_THROW(comms[1]->barrier(), Error);  // permanent
}

TEST(Lockstep, RunsEveryRankAndReportsTheLowestFailingRank) {
  auto comms = make_local_communicators(3);
  Lockstep ls(3, {comms[0].get(), comms[1].get(), comms[2].get()});
  std::vector<int> ran(3, 0);
  ls.run([&](int r) { ran[static_cast<size_t>(r)]++; });
  EXPECT_EQ(ran, (std::vector<int>{1, 1, 1}));
  // Symmetric failure (every rank throws at the same point): reported, communicators still usable.
  try {
    ls.run([&](int r) { FDLLM_FAIL(ErrorCode::kInvalidCheckpoint, "rank {} failed", r); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidCheckpoint);
    EXPECT_STREQ(e.what(), "rank 0 failed");
  }
  std::vector<float> a(3, 1.0f), b(3, 1.0f), c(3, 1.0f);
  std::vector<std::vector<float>*> bufs{&a, &b, &c};
  ls.run([&](int r) { comms[static_cast<size_t>(r)]->all_reduce_sum(host(*bufs[static_cast<size_t>(r)], {3})); });
  EXPECT_EQ(a[0], 3.0f);
}

TEST(Lockstep, ARankFailingBeforeACollectiveAbortsItsWaitingPeers) {
  auto comms = make_local_communicators(2);
  Lockstep ls(2, {comms[0].get(), comms[1].get()}, std::chrono::milliseconds(100));
  std::vector<float> a(2);
  try {
    ls.run([&](int r) {
      if (r == 1) FDLLM_FAIL(ErrorCode::kDevice, "rank 1 lost its device");
      comms[0]->all_reduce_sum(host(a, {2}));  // waits for rank 1 forever unless aborted
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice) << e.what();  // the cause, not rank 0's "aborted"
  }
}

// A launch's checks (the FLASHDLLM_TP_* variables that fill it: tests/unit/test_env_registry.cpp).
TEST(TensorParallelLaunch, ValidatesRankWorldAndIdFile) {
  TensorParallelLaunch l;
  validate_tensor_parallel_launch(l);  // world 1: no launch
  l.world = 4;
  l.rank = 3;
  EXPECT_THROW(validate_tensor_parallel_launch(l), Error);  // world 4 without an id file
  l.id_file = "/tmp/fdllm-nccl-id";
  validate_tensor_parallel_launch(l);
  l.rank = 4;
  try {
    validate_tensor_parallel_launch(l);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FLASHDLLM_TP_RANK"), std::string::npos) << e.what();
  }
  l.rank = 0;
  l.world = 0;
  EXPECT_THROW(validate_tensor_parallel_launch(l), Error);
}

TEST(TensorParallelLaunch, NcclEntryPointsSayWhenTheBuildHasNone) {
  if (nccl_available()) GTEST_SKIP() << "this build has NCCL (tests/kernels/test_nccl_comm.cpp covers it)";
  EXPECT_THROW(nccl_unique_id(), Error);
  auto cpu = make_cpu_backend(1);
  try {
    make_nccl_communicators({cpu.get()});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

}  // namespace
}  // namespace flashdllm
