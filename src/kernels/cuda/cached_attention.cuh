// The kernels of cached_attention (ops/defs/reduction.def), split over the cache as flash
// decoding does: a decode step has a query row a head, too few rows to fill a GPU with a block
// each. The first kernel gives each (row, split of kChunk slots) a block, which scores the
// split's visible slots (kThreadsPerSlot lanes a slot), takes their softmax numerators with the
// split's own max, and sums them times the values (threads over the value's columns and
// interleaved slots, partial sums added in shared memory). Its blocks are short, so loads are
// grouped into registers ahead of their use: few rounds of memory latency a block. A row's splits are then joined by
// the last of its blocks to finish (counted in a per-row counter), or by a second kernel where
// there are no counters. Written on attention_tiles.cuh's primitives, so the block emulator
// runs it on the host too (tests/cuda/attention_emulation_test.cpp).
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
  int64_t splits = 1;      // cached_splits(S)
  int* counters = nullptr;  // one a row, zero at rest: the last split's block joins the row
  int64_t qs0 = 0, qs1 = 0, qs2 = 0, qs3 = 1;
  double scale = 1;
  // Keys and values appended first (a decode step's cache write joined to its attention):
  // where put[s] != 0, slot s of every batch entry's caches (k, v, then written) takes the
  // entry's row of k_new ([B0, B1, E] by strides kn0, kn1, kn3) and of v_new ([B0, B1, F]). The
  // block of a row's split that holds the slot writes it before it reads any slot, and no other
  // split reads it. Null put: nothing appended.
  const unsigned char* put = nullptr;
  const void* k_new = nullptr;
  const void* v_new = nullptr;
  int64_t kn0 = 0, kn1 = 0, kn3 = 1, vn0 = 0, vn1 = 0, vn3 = 1;
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

// The slots one block of the first kernel takes (a split of a row's slots): a decode step's
// dozen rows spread over many blocks (as split-K flash decoding does), each scoring its slots
// with kThreads / kChunk threads a slot.
constexpr int kChunk = 64;
constexpr int kThreadsPerSlot = kThreads / kChunk;
// Values a thread loads into registers at once (of q and k, of v, of the splits it joins): a
// head of 64 takes one set.
constexpr int kRegs = 16;

// The splits of a row: a fixed count for a cache of S slots (the visible count lives on the
// device), those past a row's visible slots exiting at once.
inline int64_t cached_splits(int64_t S) {
  return S < 1 ? 1 : (S + kChunk - 1) / kChunk;
}
// The workspace of a launch in elements of C: per row and split, the split's output summed
// with its own max subtracted (F), that max and its sum of exponentials.
inline int64_t cached_workspace(int64_t rows, int64_t S, int64_t F) {
  return rows * cached_splits(S) * (F + 2);
}
// Dynamic shared memory of the first kernel: the split's scores, the output's partial sums,
// the block reduction's 32 values.
template <class C>
inline size_t cached_attention_smem() {
  return size_t(kChunk + kThreads + 32) * sizeof(C);
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

// The slots a row sees: pos + i + 1, clamped to the cache.
EMBER_ATTN_DEVICE int64_t cached_visible(const CachedArgs& a, int64_t i) {
  const int64_t n = a.pos[0] + i + 1;
  return n < 0 ? 0 : n > a.S ? a.S : n;
}

// Threads over an output row's columns in groups: thread g * fw + c takes column f0 + c for
// group g, fw = min(F, kThreads) columns a pass, kThreads / fw groups.
struct ColumnGroups {
  int64_t fw, groups, g, c;
};
EMBER_ATTN_DEVICE ColumnGroups column_groups(int64_t F) {
  const int64_t fw = F < kThreads ? F : kThreads;
  return {fw, kThreads / fw, thread_index() / fw, thread_index() % fw};
}
// The groups' partial sums of a pass's columns added in group order: thread c < fw gets column
// f0 + c's total. `part` holds kThreads values; every thread of the block takes part.
template <class C>
EMBER_ATTN_DEVICE C column_total(C acc, C* part, const ColumnGroups& cg) {
  const int tid = thread_index();
  part[tid] = acc;
  sync_block();
  C sum = 0;
  if (tid < cg.fw)
    for (int64_t h = 0; h < cg.groups; ++h) sum += part[h * cg.fw + tid];
  sync_block();
  return sum;
}

// Row r's output from its splits in `ws`, each rescaled by exp(its max - the row's) (0 for a
// row that sees no slot, as the attention op gives). Every thread of the block takes part:
// threads over the splits for the row's max and sum, then over (split, column) pairs for the
// output, so the splits are read in a few rounds rather than one after another. `part` holds
// kThreads values, `red` 32.
template <class T, class C>
EMBER_ATTN_DEVICE void cached_join_row(const CachedArgs& a, const C* ws, int64_t r, C* part,
                                       C* red) {
  const int64_t splits = a.splits, stride = a.F + 2;
  const C* wsr = ws + r * splits * stride;  // written by other blocks of this launch
  const int tid = thread_index();
  auto seen = [&](int64_t s) { return load_shared_by_blocks(wsr + s * stride + a.F + 1) > C(0); };
  auto max_at = [&](int64_t s) { return load_shared_by_blocks(wsr + s * stride + a.F); };
  C mx = C(-INFINITY);
  for (int64_t s = tid; s < splits; s += kThreads)
    if (seen(s)) mx = max_of(mx, max_at(s));
  mx = cached_block_reduce(mx, red, true);
  const bool any = mx > C(-INFINITY);
  C z = 0;
  for (int64_t s = tid; s < splits; s += kThreads)
    if (seen(s)) z += load_shared_by_blocks(wsr + s * stride + a.F + 1) * exp_of(max_at(s) - mx);
  z = cached_block_reduce(z, red, false);
  T* orow = static_cast<T*>(a.out) + r * a.F;
  const ColumnGroups cg = column_groups(a.F);
  const int64_t fw = cg.fw, groups = cg.groups, g = cg.g, c = cg.c;
  for (int64_t f0 = 0; f0 < a.F; f0 += fw) {
    const int64_t f = f0 + c;
    C acc = 0;
    if (g < groups && f < a.F)
      for (int64_t sb = g; sb < splits; sb += groups * kRegs) {
        C zv[kRegs], mv[kRegs], ov[kRegs];  // loaded at once: one round of latency
        EMBER_UNROLL
        for (int u = 0; u < kRegs; ++u) {
          const int64_t s = sb + u * groups;
          const C* q = wsr + (s < splits ? s : 0) * stride;
          zv[u] = s < splits ? load_shared_by_blocks(q + a.F + 1) : C(0);
          mv[u] = load_shared_by_blocks(q + a.F);
          ov[u] = load_shared_by_blocks(q + f);
        }
        EMBER_UNROLL
        for (int u = 0; u < kRegs; ++u)
          if (zv[u] > C(0)) acc += ov[u] * exp_of(mv[u] - mx);
      }
    const C o = column_total(acc, part, cg);
    if (tid < fw && f0 + tid < a.F) orow[f0 + tid] = narrow<T>(any ? o / z : C(0));
  }
}

// First kernel: block (row, split) scores the split's visible slots, and writes its softmax
// numerators times the values, their max and their sum to the workspace `ws`. With
// a.counters, the row's last block to finish joins the row's splits (and sets its counter
// back to 0), so no second kernel runs. A decode step's blocks are short, so their time is
// the rounds of memory latency in them: each thread loads what it multiplies (kRegs values of
// q and k, then of v) into registers before any of it is used, so that each set is one round.
template <class T, class C>
EMBER_ATTN_KERNEL void cached_attention_split_kernel(CachedArgs a, C* ws) {
  C* w = reinterpret_cast<C*>(shared_memory());  // [kChunk]: scores, then exp(score - max)
  C* part = w + kChunk;                          // [kThreads]: partial sums of the output
  C* red = part + kThreads;                      // [32]
  const int tid = thread_index();
  const int64_t splits = a.splits, r = block_index() / splits, s = block_index() % splits,
                b = r / a.L, i = r % a.L;
  C* wsr = ws + (r * splits + s) * (a.F + 2);
  attn::wait_for_prior_grids();  // q, the caches and pos come from the kernels before
  const int64_t j0 = s * kChunk, n = cached_visible(a, i);
  if (a.put) {  // this split's appended slots, kThreadsPerSlot lanes a slot
    const int64_t jj = tid / kThreadsPerSlot, p = tid % kThreadsPerSlot, j = j0 + jj;
    if (jj < kChunk && j < a.S && a.put[j]) {
      const int64_t b0 = b / a.B1, b1 = b % a.B1;
      const T* kn = static_cast<const T*>(a.k_new) + b0 * a.kn0 + b1 * a.kn1;
      const T* vn = static_cast<const T*>(a.v_new) + b0 * a.vn0 + b1 * a.vn1;
      T* kc = static_cast<T*>(const_cast<void*>(a.k)) + (b * a.S + j) * a.E;
      T* vc = static_cast<T*>(const_cast<void*>(a.v)) + (b * a.S + j) * a.F;
      for (int64_t e = p; e < a.E; e += kThreadsPerSlot) kc[e] = kn[e * a.kn3];
      for (int64_t f = p; f < a.F; f += kThreadsPerSlot) vc[f] = vn[f * a.vn3];
    }
    sync_block();  // the block's reads below see its writes
  }
  if (j0 >= n) {  // a split past the visible slots: nothing to add
    if (tid == 0) {
      wsr[a.F] = C(0);
      wsr[a.F + 1] = C(0);
    }
  } else {  // the same branch for the whole block, so its barriers stay together
    const int64_t cnt = n - j0 < kChunk ? n - j0 : kChunk;
    const T* qr =
        static_cast<const T*>(a.q) + (b / a.B1) * a.qs0 + (b % a.B1) * a.qs1 + i * a.qs2;
    {  // kThreadsPerSlot adjacent lanes a slot, each over every kThreadsPerSlot-th element
      const int64_t jj = tid / kThreadsPerSlot, p = tid % kThreadsPerSlot;
      C acc = 0;
      if (jj < cnt) {
        const T* kr = static_cast<const T*>(a.k) + (b * a.S + j0 + jj) * a.E;
        for (int64_t e0 = p; e0 < a.E; e0 += kThreadsPerSlot * kRegs) {
          C qv[kRegs], kv[kRegs];
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) {
            const int64_t e = e0 + u * kThreadsPerSlot;
            qv[u] = e < a.E ? widen<C>(qr[e * a.qs3]) : C(0);
            kv[u] = e < a.E ? widen<C>(kr[e]) : C(0);
          }
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) acc += qv[u] * kv[u];
        }
      }
      for (int m = 1; m < kThreadsPerSlot; m <<= 1) acc += shfl_xor(acc, m);
      if (p == 0 && jj < cnt) w[jj] = acc * C(a.scale);
    }
    sync_block();
    C mx = tid < cnt ? w[tid] : w[0];
    mx = cached_block_reduce(mx, red, true);
    C z = 0;
    if (tid < cnt) {
      z = exp_of(w[tid] - mx);
      w[tid] = z;
    }
    z = cached_block_reduce(z, red, false);  // its barriers order the w[] writes before the reads
    const T* vb = static_cast<const T*>(a.v) + (b * a.S + j0) * a.F;
    const ColumnGroups cg = column_groups(a.F);
    const int64_t fw = cg.fw, groups = cg.groups, g = cg.g, c = cg.c;
    for (int64_t f0 = 0; f0 < a.F; f0 += fw) {
      const int64_t f = f0 + c;
      C acc = 0;
      if (g < groups && f < a.F)
        for (int64_t jb = g; jb < cnt; jb += groups * kRegs) {
          C vv[kRegs];
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) {
            const int64_t j = jb + u * groups;
            vv[u] = j < cnt ? widen<C>(vb[j * a.F + f]) : C(0);
          }
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) {
            const int64_t j = jb + u * groups;
            if (j < cnt) acc += w[j] * vv[u];
          }
        }
      const C sum = column_total(acc, part, cg);
      if (tid < fw && f0 + tid < a.F) wsr[f0 + tid] = sum;
    }
    if (tid == 0) {
      wsr[a.F] = mx;
      wsr[a.F + 1] = z;
    }
  }
  allow_dependent_grids();  // the next kernel's blocks may start their setup
  if (!a.counters) return;  // the join kernel follows
  // Each writer's stores reach the device before the block counts itself in; the block that
  // makes the count `splits` sees every split's.
  thread_fence();
  sync_block();
  if (tid == 0) red[0] = atomic_add(&a.counters[r], 1) == splits - 1 ? C(1) : C(0);
  sync_block();
  if (red[0] == C(0)) return;
  thread_fence();
  cached_join_row<T, C>(a, ws, r, part, red);
  if (tid == 0) a.counters[r] = 0;  // zero at rest, for the next launch
}

// Second kernel (where no counters were given): block r joins row r's splits.
template <class T, class C>
EMBER_ATTN_KERNEL void cached_attention_join_kernel(CachedArgs a, const C* ws) {
  C* part = reinterpret_cast<C*>(shared_memory());  // [kThreads], then [32]
  cached_join_row<T, C>(a, ws, block_index(), part, part + kThreads);
}
// Dynamic shared memory of the join kernel.
template <class C>
inline size_t cached_join_smem() {
  return size_t(kThreads + 32) * sizeof(C);
}

}  // namespace ember::cuda::attn
