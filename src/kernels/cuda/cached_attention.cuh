// The kernel of cached_attention (ops/defs/reduction.def): a block of attn::kThreads threads a
// query row. Its scores over the cache slots it sees go to shared memory (a warp a slot, its
// lanes along the key), then the row's softmax, then the probabilities times the values (the
// threads split over the value's columns and interleaved slots, their partial sums added in
// shared memory). Written on attention_tiles.cuh's primitives, so the block emulator runs it on
// the host too (tests/cuda/attention_emulation_test.cpp).
#pragma once
#include "ember/tensor.h"
#include "kernels/cuda/attention_tiles.cuh"

namespace ember::cuda::attn {

// q as [B0, B1, L, E] by strides (a 2- or 3-dim q has B0 = 1 with stride 0); the caches and the
// output contiguous, batch entry b = b0 * B1 + b1.
struct CachedArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const int64_t* pos = nullptr;
  void* out = nullptr;
  int64_t B1 = 1, L = 1, E = 1, S = 0, F = 1;
  int64_t qs0 = 0, qs1 = 0, qs2 = 0, qs3 = 1;
  double scale = 1;
};

// q's place in a: its data and its layout as [B0, B1, L, E] (q has 2 to 4 dims).
inline void cached_q_layout(CachedArgs& a, const Tensor& q) {
  const int64_t nd = q.dim();
  a.q = q.impl()->data();
  a.L = q.size(-2);
  a.E = q.size(-1);
  a.B1 = nd >= 3 ? q.size(nd - 3) : 1;
  a.qs0 = nd == 4 ? q.stride(0) : 0;
  a.qs1 = nd >= 3 ? q.stride(nd - 3) : 0;
  a.qs2 = q.stride(nd - 2);
  a.qs3 = q.stride(nd - 1);
}

// Dynamic shared memory of a launch: the scores, q's row, the output's partial sums.
template <class C>
inline size_t cached_attention_smem(int64_t S, int64_t E) {
  return size_t(S + E + kThreads + 32) * sizeof(C);
}

// v over the block (max when `max`, else the sum); every thread gets it. `red` holds 32 values.
template <class C>
EMBER_ATTN_DEVICE C cached_block_reduce(C v, C* red, bool max) {
  for (int s = 16; s > 0; s >>= 1) {
    const C o = shfl_xor(v, s);
    v = max ? max_of(v, o) : v + o;
  }
  const int lane = thread_index() % 32, warp = thread_index() / 32;
  sync_block();  // red may still be read from the last reduction
  if (lane == 0) red[warp] = v;
  sync_block();
  v = red[0];
  for (int w = 1; w < kThreads / 32; ++w) v = max ? max_of(v, red[w]) : v + red[w];
  return v;
}

template <class T>
EMBER_ATTN_KERNEL void cached_attention_kernel(CachedArgs a) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  C* w = reinterpret_cast<C*>(shared_memory());  // [S]: the scores, then exp(score - max)
  C* qs = w + a.S;                               // [E]: this row of q
  C* part = qs + a.E;                            // [kThreads]: partial sums of the output
  C* red = part + kThreads;                      // [32]
  const int tid = thread_index();
  const int64_t r = block_index(), b = r / a.L, i = r % a.L;
  const T* qr = static_cast<const T*>(a.q) + (b / a.B1) * a.qs0 + (b % a.B1) * a.qs1 + i * a.qs2;
  for (int64_t e = tid; e < a.E; e += kThreads) qs[e] = widen<C>(qr[e * a.qs3]);
  int64_t n = a.pos[0] + i + 1;  // the slots this row sees
  n = n < 0 ? 0 : n > a.S ? a.S : n;
  T* orow = static_cast<T*>(a.out) + r * a.F;
  if (n == 0) {  // no key: 0, as the attention op gives a row that sees none
    for (int64_t f = tid; f < a.F; f += kThreads) orow[f] = narrow<T>(C(0));
    return;
  }
  sync_block();
  const int lane = tid % 32, warp = tid / 32;
  const T* kb = static_cast<const T*>(a.k) + b * a.S * a.E;
  // Every warp takes as many turns (the last ones past n idle), so the block's warps exchange
  // in step, as the emulator's block-wide exchanges need.
  for (int64_t j0 = 0; j0 < n; j0 += kThreads / 32) {
    const int64_t j = j0 + warp;
    C acc = 0;
    if (j < n) {
      const T* kr = kb + j * a.E;
      for (int64_t e = lane; e < a.E; e += 32) acc += qs[e] * widen<C>(kr[e]);
    }
    for (int s = 16; s > 0; s >>= 1) acc += shfl_xor(acc, s);
    if (lane == 0 && j < n) w[j] = acc * C(a.scale);
  }
  sync_block();
  C mx = w[0];
  for (int64_t j = tid; j < n; j += kThreads) mx = max_of(mx, w[j]);
  mx = cached_block_reduce(mx, red, true);
  C z = 0;
  for (int64_t j = tid; j < n; j += kThreads) {
    const C e = exp_of(w[j] - mx);
    w[j] = e;
    z += e;
  }
  z = cached_block_reduce(z, red, false);  // its barriers order the w[] writes before the reads
  const T* vb = static_cast<const T*>(a.v) + b * a.S * a.F;
  const int64_t fw = a.F < kThreads ? a.F : kThreads;
  const int64_t groups = kThreads / fw, g = tid / fw, c = tid % fw;
  for (int64_t f0 = 0; f0 < a.F; f0 += fw) {
    const int64_t f = f0 + c;
    C acc = 0;
    if (g < groups && f < a.F)
      for (int64_t j = g; j < n; j += groups) acc += w[j] * widen<C>(vb[j * a.F + f]);
    part[tid] = acc;
    sync_block();
    if (tid < fw && f0 + tid < a.F) {
      C s = 0;
      for (int64_t h = 0; h < groups; ++h) s += part[h * fw + tid];
      orow[f0 + tid] = narrow<T>(s / z);
    }
    sync_block();
  }
}

}  // namespace ember::cuda::attn
