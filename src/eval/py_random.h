// Python's `random.Random` (CPython's Mersenne Twister MT19937 and `Random.sample`), bit for bit,
// for choosing lm-evaluation-harness few-shot exemplars exactly as lm-eval 0.4.8 does
// (`random.Random(1234).sample(train_docs, 5)` per test document, one generator for the whole task).
//
// Algorithms (written from their published descriptions, not copied):
//  * MT19937 (Matsumoto & Nishimura 1998): `init_genrand`, `init_by_array` and the tempered 32-bit
//    output, as in the reference mt19937ar.c that CPython's _randommodule.c follows.
//  * CPython `Random.seed(int)`: the absolute value split into 32-bit words, least significant
//    first (at least one word), fed to `init_by_array`.
//  * `getrandbits(k)` for k <= 32: the next 32-bit output shifted right by 32 - k.
//  * `_randbelow(n)`: k = n.bit_length(); draw getrandbits(k) until the value is < n.
//  * `sample(population, k)` (Lib/random.py): with setsize = 21 (+ 4^ceil(log4(3k)) when k > 5), a
//    partial Fisher-Yates over a pool when n <= setsize, otherwise draws randbelow(n), redrawing
//    indices already selected. Returns indices into the population in draw order.
// Verified against CPython 3.11 by tests/python/test_eval_prompts.py (whole GSM8K test split).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace flashdllm::eval {

class PyRandom {
 public:
  /// Equivalent of Python's `random.Random(seed)` for a non-negative integer seed.
  explicit PyRandom(uint64_t seed);

  /// Next tempered 32-bit output (CPython `genrand_uint32`).
  uint32_t next_u32();
  /// `getrandbits(k)` for 1 <= k <= 32. Throws Error(kInvalidArgument) outside that range.
  uint32_t getrandbits(int k);
  /// `_randbelow(n)`: uniform integer in [0, n). Throws Error(kInvalidArgument) unless 0 < n < 2^32.
  uint64_t randbelow(uint64_t n);
  /// `sample(range(n), k)`: k distinct indices in [0, n) in Python's draw order. Throws
  /// Error(kInvalidArgument) unless 0 <= k <= n.
  std::vector<int64_t> sample(int64_t n, int64_t k);

 private:
  void init_genrand(uint32_t s);
  void init_by_array(const std::vector<uint32_t>& key);
  void twist();
  std::array<uint32_t, 624> mt_{};
  int index_ = 624;
};

}  // namespace flashdllm::eval
