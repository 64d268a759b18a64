// PyRandom against outputs of CPython 3.11's random module (test vectors printed by
//   python3 -c "import random; r = random.Random(1234); print([r.getrandbits(32) for _ in range(3)])" etc.).
// The whole GSM8K exemplar sequence is compared with Python in tests/python/test_eval_prompts.py.
#include <gtest/gtest.h>

#include <set>

#include "eval/py_random.h"
#include "flashdllm/status.h"

namespace flashdllm::eval {
namespace {

TEST(PyRandom, Mt19937StreamsMatchCPython) {
  PyRandom a(1234);
  EXPECT_EQ(a.next_u32(), 4150886329u);
  EXPECT_EQ(a.next_u32(), 3342196574u);
  EXPECT_EQ(a.next_u32(), 1892932127u);
  PyRandom z(0);
  EXPECT_EQ(z.getrandbits(32), 3626764237u);
  EXPECT_EQ(z.getrandbits(32), 1654615998u);
  PyRandom big((1ull << 40) + 5);  // a seed of two 32-bit key words
  EXPECT_EQ(big.getrandbits(32), 2166296868u);
  EXPECT_EQ(big.getrandbits(32), 2220160828u);
}

TEST(PyRandom, RandbelowMatchesRandrange) {
  PyRandom r(1234);  // [r.randrange(1000) for _ in range(5)]
  for (uint64_t want : {989u, 796u, 451u, 119u, 7u}) EXPECT_EQ(r.randbelow(1000), want);
}

TEST(PyRandom, SampleMatchesCPythonBothBranches) {
  PyRandom r(1234);  // the first two GSM8K exemplar draws of lm-eval (7473 train documents)
  EXPECT_EQ(r.sample(7473, 5), (std::vector<int64_t>{6374, 3610, 957, 61, 742}));
  EXPECT_EQ(r.sample(7473, 5), (std::vector<int64_t>{7462, 6610, 4769, 286, 5501}));
  PyRandom s(7);  // pool branch (n <= setsize), then the set branch with k > 5
  EXPECT_EQ(s.sample(10, 4), (std::vector<int64_t>{5, 2, 6, 9}));
  EXPECT_EQ(s.sample(100, 30), (std::vector<int64_t>{6,  9,  68, 12, 46, 74, 7,  64, 27, 4,  11, 55, 53, 8,  30,
                                                     89, 70, 54, 93, 72, 15, 28, 94, 81, 73, 77, 50, 99, 78, 5}));
}

TEST(PyRandom, SampleIsDistinctAndChecked) {
  PyRandom r(99);
  auto v = r.sample(50, 50);
  EXPECT_EQ(std::set<int64_t>(v.begin(), v.end()).size(), 50u);
  EXPECT_THROW(r.sample(3, 4), Error);
  EXPECT_THROW(r.getrandbits(0), Error);
  EXPECT_THROW(r.randbelow(0), Error);
}

}  // namespace
}  // namespace flashdllm::eval
