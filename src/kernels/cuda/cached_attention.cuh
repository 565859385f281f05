// The kernels of cached_attention (ops/defs/reduction.def), split over the cache as flash
// decoding does: a decode step has a query row a head, too few rows to fill a GPU with a block
// each. The first kernel gives each (row, split of kChunk slots) a block, which scores the
// split's visible slots (kThreadsPerSlot lanes a slot), takes their softmax numerators with the
// split's own max, and sums them times the values (threads over the value's columns and
// interleaved slots, partial sums added in shared memory); the blocks of splits past a row's
// visible slots leave at once. Its blocks are short, so loads are grouped into registers ahead
// of their use: few rounds of memory latency a block. A row's splits are then joined by the
// last of its blocks to finish (counted in a per-row counter), or by a second kernel where
// there are no counters. Rows of 16-byte vectors take a vector path (cached_split_vectors).
// Written on attention_tiles.cuh's primitives, so the block emulator runs it on the host too
// (tests/cuda/attention_emulation_test.cpp).
#pragma once
#include "ember/tensor.h"
#include "kernels/cuda/attention_mma.cuh"  // copy16_async
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
  bool early = false;       // the next kernel may launch as the blocks start (launch.cuh)
  // The split's visible value rows copied into shared memory (cp.async, no registers held)
  // with the keys' loads, so that the values cost no round of memory latency of their own after
  // the softmax; where a split's rows fit (cached_v_stages) and v is 16-byte aligned.
  bool v_staged = false;
  // q, the caches and the new rows read (and the new rows written) in 16-byte vectors, the split's
  // softmax taken by every warp without block reductions: cached_vectors_fit.
  bool vectors = false;
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
// The first kernel's partial sums of the output: a thread's, or (vectors) a warp's row of F.
EMBER_ATTN_HOST_DEVICE int64_t cached_part_len(int64_t F, bool vectors) {
  return vectors && (kThreads / 32) * F > kThreads ? (kThreads / 32) * F : kThreads;
}
// Dynamic shared memory of the first kernel: the split's scores and appended marks, the
// output's partial sums, the block reduction's 32 values.
template <class C>
inline size_t cached_attention_smem(int64_t F, bool vectors) {
  return size_t(2 * kChunk + cached_part_len(F, vectors) + 32) * sizeof(C);
}

// Whether a split's value rows (F elements of t_size bytes each) are staged in shared memory:
// whole 16-byte pieces, at most 16 KB a block (a head of 64 in 16 bits takes 8 KB).
inline bool cached_v_stages(int64_t F, size_t t_size) {
  return (F * int64_t(t_size)) % 16 == 0 && kChunk * F * int64_t(t_size) <= 16384;
}
// What staging adds to the first kernel's shared memory, after cached_attention_smem's.
inline size_t cached_v_stage_bytes(int64_t F, size_t t_size) {
  return size_t(kChunk * F) * t_size;
}

// Whether a launch takes the vector path (CachedArgs::vectors): rows of whole 16-byte vectors
// starting on 16 bytes (q's by its strides, the caches', the new rows'), and a value row of at
// most 32 vectors, a power of two (the lanes of one vector column in a warp sum by shuffles).
inline bool cached_vectors_fit(const CachedArgs& a, size_t t_size) {
  const int64_t v = 16 / int64_t(t_size), fv = a.F / v;
  auto on16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool fit = a.E % v == 0 && a.F % v == 0 && fv >= 1 && fv <= 32 && (fv & (fv - 1)) == 0 &&
             on16(a.q) && on16(a.k) && on16(a.v) && a.qs3 == 1 && a.qs0 % v == 0 &&
             a.qs1 % v == 0 && a.qs2 % v == 0;
  if (a.put)
    fit = fit && on16(a.k_new) && on16(a.v_new) && a.kn3 == 1 && a.vn3 == 1 && a.kn0 % v == 0 &&
          a.kn1 % v == 0 && a.vn0 % v == 0 && a.vn1 % v == 0;
  return fit;
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
// The splits of a row that take part, given its n visible slots: those holding a visible slot,
// and at least one (a row that sees no slot still has its zero output written). The others
// leave at once: they write nothing, and the row's join neither counts nor reads them.
EMBER_ATTN_DEVICE int64_t cached_taking_part(int64_t n) {
  return n > 0 ? (n + kChunk - 1) / kChunk : 1;
}
// The visible slots of the split starting at slot j0, for a row that sees n.
EMBER_ATTN_DEVICE int64_t cached_in_split(int64_t n, int64_t j0) {
  return n - j0 < 0 ? 0 : n - j0 < kChunk ? n - j0 : kChunk;
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
// row that sees no slot, as the attention op gives). Threads over (split, column) pairs, as
// column_groups spreads them, load what they join at once (one round of latency for a head of
// up to kThreads columns): each sums its splits' terms against the largest max among them, and
// the block then takes the row's max and rescales each thread's sum to it. The threads of
// column 0 count each split's sum of exponentials once. `part` holds kThreads values, `red` 32.
template <class T, class C>
EMBER_ATTN_DEVICE void cached_join_row(const CachedArgs& a, const C* ws, int64_t r, C* part,
                                       C* red) {
  const int64_t splits = cached_taking_part(cached_visible(a, r % a.L)), stride = a.F + 2;
  const C* wsr = ws + r * a.splits * stride;  // written by other blocks of this launch
  const int tid = thread_index();
  T* orow = static_cast<T*>(a.out) + r * a.F;
  const ColumnGroups cg = column_groups(a.F);
  const int64_t fw = cg.fw, groups = cg.groups, g = cg.g, c = cg.c;
  C mx = C(-INFINITY), z = 0;
  for (int64_t f0 = 0; f0 < a.F; f0 += fw) {
    const int64_t f = f0 + c;
    C acc = 0, zt = 0, mt = C(-INFINITY);  // against mt, this thread's largest max so far
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
        C m = mt;
        EMBER_UNROLL
        for (int u = 0; u < kRegs; ++u)
          if (zv[u] > C(0)) m = max_of(m, mv[u]);
        if (m > mt && mt > C(-INFINITY)) {
          const C back = exp_of(mt - m);
          acc *= back;
          zt *= back;
        }
        mt = m;
        EMBER_UNROLL
        for (int u = 0; u < kRegs; ++u)
          if (zv[u] > C(0)) {
            const C e = exp_of(mv[u] - m);
            acc += ov[u] * e;
            zt += zv[u] * e;
          }
      }
    if (f0 == 0) {  // the row's max and sum, from the first pass's loads
      mx = cached_block_reduce(mt, red, true);
      z = cached_block_reduce(c == 0 && mt > C(-INFINITY) ? zt * exp_of(mt - mx) : C(0), red,
                              false);
    }
    const C o = column_total(mt > C(-INFINITY) ? acc * exp_of(mt - mx) : C(0), part, cg);
    if (tid < fw && f0 + tid < a.F) orow[f0 + tid] = narrow<T>(mx > C(-INFINITY) ? o / z : C(0));
  }
}

// Batch entry b's rows of k_new and v_new (both null without appended slots).
template <class T>
EMBER_ATTN_DEVICE void cached_new_rows(const CachedArgs& a, int64_t b, const T** kn, const T** vn) {
  *kn = *vn = nullptr;
  if (!a.put) return;
  const int64_t b0 = b / a.B1, b1 = b % a.B1;
  *kn = static_cast<const T*>(a.k_new) + b0 * a.kn0 + b1 * a.kn1;
  *vn = static_cast<const T*>(a.v_new) + b0 * a.vn0 + b1 * a.vn1;
}

// One appended slot's key and value rows copied into the caches (slot j of batch entry b) by
// the kThreadsPerSlot lanes p of it, loads into registers ahead of the stores: where the
// slot's block does not read it (a slot past the visible ones).
template <class T>
EMBER_ATTN_DEVICE void cached_append_slot(const CachedArgs& a, const T* kn, const T* vn,
                                          int64_t b, int64_t j, int64_t p) {
  T* kc = static_cast<T*>(const_cast<void*>(a.k)) + (b * a.S + j) * a.E;
  T* vc = static_cast<T*>(const_cast<void*>(a.v)) + (b * a.S + j) * a.F;
  for (int64_t e0 = p; e0 < a.E + a.F; e0 += kThreadsPerSlot * kRegs) {
    T x[kRegs];
    EMBER_UNROLL
    for (int u = 0; u < kRegs; ++u) {
      const int64_t e = e0 + u * kThreadsPerSlot;
      x[u] = e < a.E ? kn[e * a.kn3] : vn[(e < a.E + a.F ? e - a.E : 0) * a.vn3];
    }
    EMBER_UNROLL
    for (int u = 0; u < kRegs; ++u) {
      const int64_t e = e0 + u * kThreadsPerSlot;
      if (e < a.E)
        kc[e] = x[u];
      else if (e < a.E + a.F)
        vc[e - a.E] = x[u];
    }
  }
}

// A split's n visible value elements (one contiguous run from vb) copied into vs by the block's
// threads (cp.async, one group): there after async_wait and a barrier.
template <class T>
EMBER_ATTN_DEVICE void cached_stage_values(T* vs, const T* vb, int64_t n) {
  const int64_t pieces = n * int64_t(sizeof(T)) / 16;
  for (int64_t h = thread_index(); h < pieces; h += kThreads)
    copy16_async(reinterpret_cast<unsigned char*>(vs) + h * 16,
                 reinterpret_cast<const unsigned char*>(vb) + h * 16);
  async_commit();
}

// A split's scores, softmax and value sums in 16-byte vectors (CachedArgs::vectors), for the
// first kernel: the kThreadsPerSlot lanes of a slot take interleaved vectors of its key; after
// one barrier every warp takes the split's max and sum of exponentials from the scores itself;
// thread (g, c) then sums vector column c of slots g, g + groups ... times their numerators,
// and the groups' sums are added over a warp's lanes by shuffles and over its warps in shared
// memory. Fewer instructions and registers than the element path, and two barriers in all.
// Writes the split's F sums, max and sum to wsr.
template <class T, class C>
EMBER_ATTN_DEVICE void cached_split_vectors(const CachedArgs& a, int64_t b, int64_t i, int64_t j0,
                                            int64_t cnt, bool put, const T* kn, const T* vn, C* w,
                                            const C* mark, C* part, T* vs, C* wsr) {
  using Raw = attn::Raw<T>;
  constexpr int V = 16 / int(sizeof(T));
  constexpr int kLoads = 4;  // vectors a thread loads at once (a 16-bit head of 64 takes one set)
  const int tid = thread_index(), lane = tid % 32, warp = tid / 32;
  const int64_t jj = tid / kThreadsPerSlot, p = tid % kThreadsPerSlot;
  const T* qr = static_cast<const T*>(a.q) + (b / a.B1) * a.qs0 + (b % a.B1) * a.qs1 + i * a.qs2;
  T* vb = static_cast<T*>(const_cast<void*>(a.v)) + (b * a.S + j0) * a.F;
  if (a.v_staged) cached_stage_values(vs, vb, cnt * a.F);  // as the element path stages them
  {
    C acc = 0;
    if (jj < cnt) {
      T* kc = static_cast<T*>(const_cast<void*>(a.k)) + (b * a.S + j0 + jj) * a.E;
      const T* kr = put ? kn : kc;
      for (int64_t e0 = p * V; e0 < a.E; e0 += kThreadsPerSlot * V * kLoads) {
        Raw qv[kLoads], kv[kLoads];
        EMBER_UNROLL
        for (int u = 0; u < kLoads; ++u) {
          const int64_t e = e0 + u * kThreadsPerSlot * V;
          if (e < a.E) {
            qv[u] = load16<Raw>(qr + e);
            kv[u] = load16<Raw>(kr + e);
          }
        }
        EMBER_UNROLL
        for (int u = 0; u < kLoads; ++u) {
          const int64_t e = e0 + u * kThreadsPerSlot * V;
          if (e < a.E) {
            for (int x = 0; x < V; ++x) acc += widen<C>(qv[u].v[x]) * widen<C>(kv[u].v[x]);
            if (put) store16(kc + e, kv[u]);
          }
        }
      }
    }
    for (int m = 1; m < kThreadsPerSlot; m <<= 1) acc += shfl_xor(acc, m);
    if (p == 0 && jj < cnt) w[jj] = acc * C(a.scale);
  }
  if (a.v_staged) async_wait();  // this thread's copies, seen by all after the barrier
  sync_block();
  // The split's max and sum of exponentials, by every warp alike.
  C mx = C(-INFINITY), z = 0;
  for (int64_t j = lane; j < cnt; j += 32) mx = max_of(mx, w[j]);
  for (int s = 16; s > 0; s >>= 1) mx = max_of(mx, shfl_xor(mx, s));
  for (int64_t j = lane; j < cnt; j += 32) z += exp_of(w[j] - mx);
  for (int s = 16; s > 0; s >>= 1) z += shfl_xor(z, s);
  const int64_t fv = a.F / V, groups = kThreads / fv, g = tid / fv, c = tid % fv;
  C acc[V] = {};
  for (int64_t jb = g; jb < cnt; jb += groups * kLoads) {
    Raw vv[kLoads];
    bool fresh[kLoads];  // an appended slot: from v_new, then stored into the cache
    EMBER_UNROLL
    for (int u = 0; u < kLoads; ++u) {
      const int64_t j = jb + u * groups;
      fresh[u] = j < cnt && mark[j] != C(0);
      if (j < cnt)
        vv[u] = fresh[u]     ? load16<Raw>(vn + c * V)
                : a.v_staged ? load16<Raw>(vs + j * a.F + c * V)
                             : load16<Raw>(vb + j * a.F + c * V);
    }
    EMBER_UNROLL
    for (int u = 0; u < kLoads; ++u) {
      const int64_t j = jb + u * groups;
      if (j < cnt) {
        const C e = exp_of(w[j] - mx);
        for (int x = 0; x < V; ++x) acc[x] += e * widen<C>(vv[u].v[x]);
        if (fresh[u]) store16(vb + j * a.F + c * V, vv[u]);
      }
    }
  }
  // Lanes l, l + fv ... of a warp hold the same vector column (fv divides 32).
  for (int64_t m = fv; m < 32; m <<= 1)
    for (int x = 0; x < V; ++x) acc[x] += shfl_xor(acc[x], int(m));
  if (lane < fv)
    for (int x = 0; x < V; ++x) part[warp * a.F + c * V + x] = acc[x];
  sync_block();
  for (int64_t f = tid; f < a.F; f += kThreads) {
    C sum = 0;
    for (int h = 0; h < kThreads / 32; ++h) sum += part[h * a.F + f];
    wsr[f] = sum;
  }
  if (tid == 0) {
    wsr[a.F] = mx;
    wsr[a.F + 1] = z;
  }
}

// First kernel: block (row, split) scores the split's visible slots, and writes its softmax
// numerators times the values, their max and their sum to the workspace `ws` (a split past
// the row's visible slots leaves at once: cached_taking_part). With
// a.counters, the row's last block to finish joins the row's splits (and sets its counter
// back to 0), so no second kernel runs. A decode step's blocks are short, so their time is
// the rounds of memory latency in them: each thread loads what it multiplies (kRegs values of
// q and k, then of v) into registers before any of it is used, so that each set is one round.
// An appended slot (a.put) is read from k_new and v_new, never from the caches, and written
// into them by the threads that loaded it: no block waits on its own stores, and none reads
// a slot another writes.
template <class T, class C, bool kVectors = false>
EMBER_ATTN_KERNEL void cached_attention_split_kernel(CachedArgs a, C* ws) {
  C* w = reinterpret_cast<C*>(shared_memory());  // [kChunk]: scores, then exp(score - max)
  C* mark = w + kChunk;                          // [kChunk]: 1 where the slot is appended
  C* part = mark + kChunk;                       // partial sums of the output: cached_part_len
  C* red = part + cached_part_len(a.F, kVectors);  // [32]
  const int tid = thread_index();
  const int64_t splits = a.splits, r = block_index() / splits, s = block_index() % splits,
                b = r / a.L, i = r % a.L;
  C* wsr = ws + (r * splits + s) * (a.F + 2);
  if (a.early) allow_dependent_grids();  // its reads still wait for this grid's end
  {  // the split's visible cache rows asked of L2 before the wait (a hint: pos may be stale)
    const int64_t j0 = s * kChunk, n = cached_visible(a, i);
    const int64_t rows = cached_in_split(n, j0);
    const T* kr = static_cast<const T*>(a.k) + (b * a.S + j0) * a.E;
    const T* vr = static_cast<const T*>(a.v) + (b * a.S + j0) * a.F;
    const int64_t kb = rows * a.E * int64_t(sizeof(T)), vb = rows * a.F * int64_t(sizeof(T));
    auto fits = [](const void* p, int64_t bytes) {
      return bytes > 0 && (reinterpret_cast<uintptr_t>(p) | uintptr_t(bytes)) % 16 == 0;
    };
    if (tid == 0 && fits(kr, kb)) prefetch_l2(kr, unsigned(kb));
    if (tid == 32 && fits(vr, vb)) prefetch_l2(vr, unsigned(vb));
  }
  attn::wait_for_prior_grids();  // q, the caches and pos come from the kernels before
  // kThreadsPerSlot adjacent lanes a slot of the split, each over every kThreadsPerSlot-th
  // element; the slot's mark read with pos, in one round
  const int64_t j0 = s * kChunk, jj = tid / kThreadsPerSlot, p = tid % kThreadsPerSlot;
  const bool put = a.put && j0 + jj < a.S && a.put[j0 + jj] != 0;
  const int64_t n = cached_visible(a, i);
  const int64_t cnt = cached_in_split(n, j0);
  const T* kn;
  const T* vn;
  cached_new_rows(a, b, &kn, &vn);
  if (put && jj >= cnt) cached_append_slot(a, kn, vn, b, j0 + jj, p);
  if (s >= cached_taking_part(n)) return;  // the same for the whole block
  if (p == 0) mark[jj] = put ? C(1) : C(0);
  if (cnt == 0) {  // a row that sees no slot: nothing to add
    if (tid == 0) {
      wsr[a.F] = C(0);
      wsr[a.F + 1] = C(0);
    }
  } else if constexpr (kVectors) {  // the same branch for the whole block, as below
    cached_split_vectors<T, C>(a, b, i, j0, cnt, put, kn, vn, w, mark, part,
                               reinterpret_cast<T*>(red + 32), wsr);
  } else {  // the same branch for the whole block, so its barriers stay together
    const T* qr =
        static_cast<const T*>(a.q) + (b / a.B1) * a.qs0 + (b % a.B1) * a.qs1 + i * a.qs2;
    T* vb = static_cast<T*>(const_cast<void*>(a.v)) + (b * a.S + j0) * a.F;
    // Staged: the split's visible value rows (one contiguous run) into shared memory after the
    // reductions' space, asked for before the keys' loads (an appended slot's cache row comes
    // too, and v_new's replaces it below). They land by the barrier after the scores.
    T* vs = reinterpret_cast<T*>(red + 32);  // at cached_attention_smem<C>(F, false)
    if (a.v_staged) cached_stage_values(vs, vb, cnt * a.F);
    {
      C acc = 0;
      if (jj < cnt) {
        // the slot's key: the cache's row, or the appended one (then stored into the cache)
        T* kc = static_cast<T*>(const_cast<void*>(a.k)) + (b * a.S + j0 + jj) * a.E;
        const T* kr = put ? kn : kc;
        const int64_t ks = put ? a.kn3 : 1;
        for (int64_t e0 = p; e0 < a.E; e0 += kThreadsPerSlot * kRegs) {
          C qv[kRegs];
          T kv[kRegs];
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) {
            const int64_t e = e0 + u * kThreadsPerSlot;
            qv[u] = e < a.E ? widen<C>(qr[e * a.qs3]) : C(0);
            kv[u] = e < a.E ? kr[e * ks] : narrow<T>(C(0));
          }
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) acc += qv[u] * widen<C>(kv[u]);
          if (put) {
            EMBER_UNROLL
            for (int u = 0; u < kRegs; ++u) {
              const int64_t e = e0 + u * kThreadsPerSlot;
              if (e < a.E) kc[e] = kv[u];
            }
          }
        }
      }
      for (int m = 1; m < kThreadsPerSlot; m <<= 1) acc += shfl_xor(acc, m);
      if (p == 0 && jj < cnt) w[jj] = acc * C(a.scale);
    }
    if (a.v_staged) async_wait();  // this thread's copies, seen by all after the barrier
    sync_block();
    C mx = tid < cnt ? w[tid] : w[0];
    mx = cached_block_reduce(mx, red, true);
    C z = 0;
    if (tid < cnt) {
      z = exp_of(w[tid] - mx);
      w[tid] = z;
    }
    z = cached_block_reduce(z, red, false);  // its barriers order the w[] writes before the reads
    const ColumnGroups cg = column_groups(a.F);
    const int64_t fw = cg.fw, groups = cg.groups, g = cg.g, c = cg.c;
    for (int64_t f0 = 0; f0 < a.F; f0 += fw) {
      const int64_t f = f0 + c;
      C acc = 0;
      if (g < groups && f < a.F)
        for (int64_t jb = g; jb < cnt; jb += groups * kRegs) {
          T vv[kRegs];
          bool fresh[kRegs];  // an appended slot: from v_new, then stored into the cache
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) {
            const int64_t j = jb + u * groups;
            fresh[u] = j < cnt && mark[j] != C(0);
            vv[u] = j >= cnt    ? narrow<T>(C(0))
                    : fresh[u]  ? vn[f * a.vn3]
                    : a.v_staged ? vs[j * a.F + f]
                                 : vb[j * a.F + f];
          }
          EMBER_UNROLL
          for (int u = 0; u < kRegs; ++u) {
            const int64_t j = jb + u * groups;
            if (j < cnt) acc += w[j] * widen<C>(vv[u]);
            if (fresh[u]) vb[j * a.F + f] = vv[u];
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
  if (!a.early) allow_dependent_grids();  // the next kernel's blocks may start their setup
  if (!a.counters) return;  // the join kernel follows
  // The block's stores come before thread 0 counts it in (the barrier), and the count
  // releases them: the block that makes the count the row's splits taking part acquires
  // every one's, and its threads see them after the next barrier.
  sync_block();
  if (tid == 0) red[0] = count_in(&a.counters[r]) == cached_taking_part(n) - 1 ? C(1) : C(0);
  sync_block();
  if (red[0] == C(0)) return;
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
