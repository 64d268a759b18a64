// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11) usable on host and device.
//
// Denoiser randomness (Gumbel noise, random remasking) is keyed by (seed, step, row key, index)
// instead of drawn from a stateful stream, so the CPU backend and the CUDA kernels produce the
// same numbers for the same request and the result does not depend on batch composition.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FDLLM_HD __host__ __device__ __forceinline__
#else
#define FDLLM_HD inline
#endif

namespace flashdllm {

struct Philox4 {
  uint32_t v[4];
};

FDLLM_HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

/// Philox-4x32 with 10 rounds: counter (c0..c3), key (k0, k1) -> 4 random 32-bit words.
FDLLM_HD Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = philox_mulhilo(kM0, c0, &hi0);
    uint32_t lo1 = philox_mulhilo(kM1, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n1 = lo1;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    uint32_t n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return Philox4{{c0, c1, c2, c3}};
}

/// Uniform double in the open interval (0, 1) with 53 random bits, for (seed, step, row, index).
FDLLM_HD double philox_uniform(uint64_t seed, uint64_t step, uint32_t row, uint32_t index) {
  Philox4 r = philox4x32(index, row, static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                         static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 21) ^ static_cast<uint64_t>(r.v[1] >> 11);
  bits &= (uint64_t{1} << 53) - 1;
  return (static_cast<double>(bits) + 0.5) * (1.0 / 9007199254740992.0);  // (bits + 0.5) / 2^53
}

}  // namespace flashdllm
