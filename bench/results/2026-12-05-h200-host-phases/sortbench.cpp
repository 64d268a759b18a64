#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>
#include <cstring>
#include <cstdint>
int main() {
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(0, 1);
  const int n = 600, L = 768, slots = 32;
  std::vector<float> scores(L * slots);
  for (auto& s : scores) s = u(g);
  std::vector<std::vector<int32_t>> fp(slots, std::vector<int32_t>(n));
  for (auto& v : fp) {
    std::iota(v.begin(), v.end(), 0);
    std::shuffle(v.begin(), v.end(), g);
  }
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < slots; ++j) {
      const float* sc = scores.data() + j * L;
      std::stable_sort(fp[j].begin(), fp[j].end(), [&](int32_t a, int32_t b) { return sc[a] < sc[b]; });
    }
    auto t1 = std::chrono::steady_clock::now();
    std::vector<uint64_t> keys(n);
    for (int j = 0; j < slots; ++j) {
      const float* sc = scores.data() + j * L;
      for (int i = 0; i < n; ++i) {
        uint32_t b;
        std::memcpy(&b, &sc[fp[j][i]], 4);
        b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
        keys[i] = (uint64_t(b) << 32) | uint32_t(i);
      }
      std::sort(keys.begin(), keys.end());
      std::vector<int32_t> tmp(fp[j]);
      for (int i = 0; i < n; ++i) fp[j][i] = tmp[keys[i] & 0xffffffffu];
    }
    auto t2 = std::chrono::steady_clock::now();
    // perturb scores for next rep
    for (auto& s : scores) s = u(g);
    std::printf("stable_sort %.1f us, packed sort %.1f us (32 slots x %d)\n",
                std::chrono::duration<double, std::micro>(t1 - t0).count(),
                std::chrono::duration<double, std::micro>(t2 - t1).count(), n);
  }
}
// clock cost
struct ClockProbe {
  ClockProbe() {
    auto t0 = std::chrono::steady_clock::now();
    volatile long x = 0;
    for (int i = 0; i < 100000; ++i) x += std::chrono::steady_clock::now().time_since_epoch().count() & 1;
    auto t1 = std::chrono::steady_clock::now();
    std::printf("steady_clock::now %.1f ns per call\n",
                std::chrono::duration<double, std::nano>(t1 - t0).count() / 1e5);
  }
} probe;
