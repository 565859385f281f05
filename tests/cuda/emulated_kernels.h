// The CUDA kernels written on attention_tiles.cuh's primitives, compiled for the host with
// those primitives on the block emulator (support/block_emulator.h), and the checks their
// tests share. Included by the *_emulation_test.cpp files, only where the CUDA headers are found.
#pragma once
#if !__has_include(<cuda_bf16.h>)
#error "the emulated kernels need the CUDA headers"
#endif
#define EMBER_CUDA_EMULATION 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

#include "support/block_emulator.h"

// The kernels' primitives (attention_tiles.cuh), on the emulator.
namespace ember::cuda::attn {
inline int thread_index() {
  return test::emu::thread_index();
}
inline int64_t block_index() {
  return test::emu::block_index();
}
inline int64_t grid_blocks() {
  return test::emu::block_count();
}
inline void sync_block() {
  test::emu::barrier();
}
template <class C>
inline C shfl_xor(C v, int lane_mask) {
  return test::emu::exchange(v, lane_mask);
}
inline unsigned char* shared_memory() {
  return test::emu::shared_memory();
}
inline int count_in(int* p) {  // blocks run one after another: no ordering to give
  return (*p)++;
}
template <class C>
inline C load_shared_by_blocks(const C* p) {
  return *p;
}
inline void wait_for_prior_grids() {}  // launches run one after another
inline void allow_dependent_grids() {}
inline void prefetch_l2(const void*, unsigned) {}  // a hint: nothing to emulate
inline float exp_of(float x) {
  return std::exp(x);
}
inline double exp_of(double x) {
  return std::exp(x);
}
inline float log_of(float x) {
  return std::log(x);
}
inline double log_of(double x) {
  return std::log(x);
}
inline float max_of(float a, float b) {
  return std::fmax(a, b);
}
inline double max_of(double a, double b) {
  return std::fmax(a, b);
}
template <class V>
inline V load16(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
inline void store16(void* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}
// The tensor-core primitives of attention_mma.cuh: each lane gathers what the warp's lanes hold
// and computes its own part of the result, as the PTX instructions define it.
inline float exp2_of(float x) {
  return std::exp2(x);
}
inline void copy16_async(void* dst, const void* src) {
  std::memcpy(dst, src, 16);  // lands at once: a barrier still separates it from its readers
}
inline void async_commit() {}
inline void async_wait() {}
template <int N>
inline void async_wait_pending() {}
inline void ldsm_emulated(uint32_t (&r)[4], const void* row, bool trans) {
  const std::array<const void*, 32> rows = test::emu::warp_gather(row);
  const int lane = thread_index() % 32, g = lane / 4, q = lane % 4;
  auto at = [&](int m, int i, int j) {  // element (i, j) of matrix m
    uint16_t x;
    std::memcpy(&x, static_cast<const unsigned char*>(rows[size_t(8 * m + i)]) + 2 * j, 2);
    return uint32_t(x);
  };
  for (int m = 0; m < 4; ++m)
    r[m] = trans ? at(m, 2 * q, g) | at(m, 2 * q + 1, g) << 16
                 : at(m, g, 2 * q) | at(m, g, 2 * q + 1) << 16;
}
inline void ldsm_x4(uint32_t (&r)[4], const void* row) {
  ldsm_emulated(r, row, false);
}
inline void ldsm_x4_t(uint32_t (&r)[4], const void* row) {
  ldsm_emulated(r, row, true);
}
template <class T>
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  struct Frags {
    uint32_t a[4], b[2];
  };
  const std::array<Frags, 32> all = test::emu::warp_gather(Frags{{a[0], a[1], a[2], a[3]}, {b0, b1}});
  auto half = [](uint32_t w, int hi) {
    const auto x = static_cast<unsigned short>(hi ? w >> 16 : w & 0xFFFF);
    if constexpr (std::is_same_v<T, __half>)
      return __half2float(__ushort_as_half(x));
    else
      return __bfloat162float(__ushort_as_bfloat16(x));
  };
  // A (16 x 16) and B (16 x 8) elements from the lanes that hold them.
  auto A = [&](int i, int k) {
    return half(all[size_t(4 * (i % 8) + k % 8 / 2)].a[(i >= 8) + 2 * (k >= 8)], k % 2);
  };
  auto B = [&](int k, int j) { return half(all[size_t(4 * j + k % 8 / 2)].b[k >= 8], k % 2); };
  const int lane = thread_index() % 32, g = lane / 4, q = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int i = g + 8 * (e / 2), j = 2 * q + e % 2;
    float s = d[e];
    for (int k = 0; k < 16; ++k) s += A(i, k) * B(k, j);
    d[e] = s;
  }
}
}  // namespace ember::cuda::attn

#include <gtest/gtest.h>

#include "core/make_tensor.h"
#include "core/shape.h"
#include "ember/ember.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/attention_bwd.cuh"
#include "kernels/cuda/attention_fwd.cuh"
#include "kernels/cuda/cached_attention.cuh"
#include "kernels/cuda/gemv.cuh"

namespace ember::test::emu {

// max |got - want| / (1 + |want|); infinite when only one of them is infinite or NaN.
inline double max_rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;  // equal infinities included
    const double e = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

inline double tolerance(DType t) {
  switch (t) {
    case DType::Float64:
      return 1e-10;
    case DType::Float32:
      return 2e-5;
    case DType::Float16:
      return 2e-3;
    default:
      return 1.6e-2;  // bfloat16 outputs: a rounding of 2^-8 relative
  }
}

}  // namespace ember::test::emu
