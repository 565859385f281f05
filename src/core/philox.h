// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011) and the mapping from its output words to the values random ops produce.
// A counter-based generator: the output is a pure function of (key, counter), so element i of
// a random tensor is computed from (seed, offset + i) alone, by any thread, on any device.
// No ember types here: eager kernels, generated code and (later) CUDA code include this file.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define EMBER_PHILOX_FN __host__ __device__ inline
#else
#define EMBER_PHILOX_FN inline
#endif

namespace ember::philox {

// Four 32-bit words: a counter going in, random words coming out.
struct Block {
  uint32_t v[4];
};

// Round multipliers and key increments (the Weyl sequence) from the paper.
inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
inline constexpr int kRounds = 10;

EMBER_PHILOX_FN constexpr Block single_round(Block c, uint32_t k0, uint32_t k1) {
#if defined(__CUDA_ARCH__)
  // On the device the products' halves as 32-bit multiplies (mul.lo and mul.hi): written as
  // 64-bit products, the words stay 64-bit through the rounds, twice the instructions or more.
  if (!std::is_constant_evaluated()) {
    const uint32_t hi0 = __umulhi(kMul0, c.v[0]), lo0 = kMul0 * c.v[0];
    const uint32_t hi1 = __umulhi(kMul1, c.v[2]), lo1 = kMul1 * c.v[2];
    return Block{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
  }
#endif
  uint64_t p0 = uint64_t(kMul0) * c.v[0];
  uint64_t p1 = uint64_t(kMul1) * c.v[2];
  uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  return Block{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

// The bijection itself: ten rounds, the key bumped by the Weyl constants between rounds.
EMBER_PHILOX_FN constexpr Block philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  Block c = counter;
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    c = single_round(c, key0, key1);
  }
  return c;
}

// ---- ember's stream layout ----
// The generator hands out 32-bit draws; draw d is word d % 4 of block d / 4, where block b is
// philox4x32_10 of the counter {lo(b), hi(b), 0, 0} under the key {lo(seed), hi(seed)}.
// (The two high counter words stay free for a per-device or per-stream subsequence.)
// Ops reserve draws in multiples of 4, so every op starts on a block boundary.
EMBER_PHILOX_FN constexpr Block block(uint64_t seed, uint64_t index) {
  return philox4x32_10(Block{{uint32_t(index), uint32_t(index >> 32), 0u, 0u}}, uint32_t(seed),
                       uint32_t(seed >> 32));
}
EMBER_PHILOX_FN constexpr uint32_t draw(uint64_t seed, uint64_t d) {
  return block(seed, d / 4).v[d % 4];
}

// ---- words to values ----
// Uniform in [0, 1) with `bits` significant bits (at most 24): the top bits of the word. Using
// only as many bits as the target type holds keeps the value exactly representable, so a
// float16 (11 bits) or bfloat16 (8 bits) result can never round up to 1.
EMBER_PHILOX_FN constexpr float uniform_float(uint32_t w, int bits = 24) {
  return float(w >> (32 - bits)) * (1.0f / float(uint32_t(1) << bits));
}
// Uniform in [0, 1) with 53 bits from two words (float64 results).
EMBER_PHILOX_FN constexpr double uniform_double(uint32_t hi, uint32_t lo) {
  uint64_t m = (uint64_t(hi) << 21) | (lo >> 11);
  return double(m) * (1.0 / 9007199254740992.0);  // 2^-53
}
// Uniform in (0, 1]: the argument of the logarithm in Box-Muller and exponential keys.
EMBER_PHILOX_FN constexpr float uniform_float_open0(uint32_t w) {
  return float((w >> 8) + 1u) * (1.0f / 16777216.0f);
}
EMBER_PHILOX_FN constexpr double uniform_double_open0(uint32_t hi, uint32_t lo) {
  uint64_t m = (uint64_t(hi) << 21) | (lo >> 11);
  return double(m + 1) * (1.0 / 9007199254740992.0);
}

// Box-Muller: two standard normals from a radius uniform in (0, 1] and an angle uniform in
// [0, 1). Computed in T (float for float, float16 and bfloat16; double for double).
// Everything above is integer-exact on every device; log, sin and cos here may differ in the
// last bit between the host's libm and CUDA's (nvcc -arch=sm_90: up to 1 ulp).
template <class T>
struct NormalPair {
  T z0, z1;
};
template <class T>
EMBER_PHILOX_FN NormalPair<T> box_muller(T u_radius, T u_angle) {
  constexpr T kTwoPi = T(6.283185307179586476925286766559);
  T r = std::sqrt(T(-2) * std::log(u_radius));
  T theta = kTwoPi * u_angle;
  return {r * std::cos(theta), r * std::sin(theta)};
}

// Uniform integer in [0, range) from two words (64 bits, so the modulo bias is below
// range / 2^64). range == 0 stands for 2^64.
EMBER_PHILOX_FN constexpr uint64_t uniform_below(uint32_t hi, uint32_t lo, uint64_t range) {
  uint64_t x = (uint64_t(hi) << 32) | lo;
  return range == 0 ? x : x % range;
}

// 1 with probability p: the word is below p * 2^32 (p = 1 always, p = 0 never).
EMBER_PHILOX_FN constexpr uint64_t bernoulli_threshold(double p) {
  return p >= 1 ? (uint64_t(1) << 32) : p <= 0 ? 0 : uint64_t(p * 4294967296.0);
}
EMBER_PHILOX_FN constexpr bool bernoulli(uint32_t w, uint64_t threshold) {
  return uint64_t(w) < threshold;
}

}  // namespace ember::philox
