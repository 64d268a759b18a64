#include "eval/py_random.h"

#include <cmath>
#include <unordered_set>

#include "core/check.h"

namespace flashdllm::eval {

namespace {
constexpr int kN = 624;
constexpr int kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfU;
constexpr uint32_t kUpper = 0x80000000U;
constexpr uint32_t kLower = 0x7fffffffU;
}  // namespace

PyRandom::PyRandom(uint64_t seed) {
  std::vector<uint32_t> key;
  do {  // 32-bit words, least significant first; zero is the single word 0
    key.push_back(static_cast<uint32_t>(seed & 0xffffffffU));
    seed >>= 32;
  } while (seed != 0);
  init_by_array(key);
}

void PyRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i)
    mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  index_ = kN;
}

void PyRandom::init_by_array(const std::vector<uint32_t>& key) {
  init_genrand(19650218U);
  int i = 1;
  size_t j = 0;
  for (int k = std::max<int>(kN, static_cast<int>(key.size())); k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;  // non-zero initial state
  index_ = kN;
}

void PyRandom::twist() {
  for (int k = 0; k < kN; ++k) {
    const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
    mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
  }
  index_ = 0;
}

uint32_t PyRandom::next_u32() {
  if (index_ >= kN) twist();
  uint32_t y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

uint32_t PyRandom::getrandbits(int k) {
  FDLLM_CHECK_ARG(k >= 1 && k <= 32, "getrandbits: k must be in [1, 32], got {}", k);
  return next_u32() >> (32 - k);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  FDLLM_CHECK_ARG(n > 0 && n <= 0xffffffffULL, "randbelow: n must be in [1, 2^32), got {}", n);
  int k = 0;
  for (uint64_t v = n; v != 0; v >>= 1) ++k;  // n.bit_length()
  if (k > 32) k = 32;
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<int64_t> PyRandom::sample(int64_t n, int64_t k) {
  FDLLM_CHECK_ARG(k >= 0 && k <= n, "sample: need 0 <= k <= population size, got k={} n={}", k, n);
  std::vector<int64_t> result(static_cast<size_t>(k));
  int64_t setsize = 21;
  if (k > 5) setsize += static_cast<int64_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k) * 3.0) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<int64_t> pool(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = static_cast<int64_t>(randbelow(static_cast<uint64_t>(n - i)));
      result[static_cast<size_t>(i)] = pool[static_cast<size_t>(j)];
      pool[static_cast<size_t>(j)] = pool[static_cast<size_t>(n - i - 1)];
    }
  } else {
    std::unordered_set<int64_t> selected;
    for (int64_t i = 0; i < k; ++i) {
      int64_t j = static_cast<int64_t>(randbelow(static_cast<uint64_t>(n)));
      while (selected.count(j)) j = static_cast<int64_t>(randbelow(static_cast<uint64_t>(n)));
      selected.insert(j);
      result[static_cast<size_t>(i)] = j;
    }
  }
  return result;
}

}  // namespace flashdllm::eval
