// cached_attention by one block a query row (EMBER_ATTN_ROW=1, off until measured): the row's
// visible key and value rows copied into shared memory (cp.async) a chunk of up to `chunk`
// slots at a time, so a decode step's whole cache window arrives in one round of memory
// latency; the scores, their softmax (a running max and sum over the chunks) and the values'
// sum made there; the output written by the block. No workspace, counter or join: the split
// kernel's (cached_attention.cuh) last rounds of latency are gone, and a dozen heads take a
// dozen multiprocessors. Appended slots (a.put) are written into the caches and read from
// k_new and v_new, as the split kernel does. Heads of up to kThreadsPerSlot * kRegs key
// elements and kThreads value columns, rows whose bytes are whole 16-byte pieces
// (cached_row_fits). Written on attention_tiles.cuh's primitives: the block emulator runs it.
#pragma once
#include "kernels/cuda/cached_attention.cuh"

namespace ember::cuda::attn {

// Whether the row kernel takes a head of E key and F value elements of t_size bytes.
inline bool cached_row_fits(int64_t E, int64_t F, size_t t_size) {
  return E <= int64_t(kThreadsPerSlot) * kRegs && F <= kThreads &&
         (E * int64_t(t_size)) % 16 == 0 && (F * int64_t(t_size)) % 16 == 0;
}
// Dynamic shared memory of a launch staging `chunk` slots: the keys' and values' rows, the
// chunk's scores, the output's partial sums and the reductions' 32 values.
template <class C>
inline size_t cached_row_smem(int64_t chunk, int64_t E, int64_t F, size_t t_size) {
  return size_t(chunk * (E + F)) * t_size + size_t(chunk + kThreads + 32) * sizeof(C);
}
// The slots a chunk stages within `bytes` of shared memory: a whole number of kChunk (at least
// one), no more than the cache holds.
template <class C>
inline int64_t cached_row_chunk(int64_t S, int64_t E, int64_t F, size_t t_size, size_t bytes) {
  int64_t chunk = kChunk;
  while (chunk < S && cached_row_smem<C>(chunk + kChunk, E, F, t_size) <= bytes) chunk += kChunk;
  return chunk;
}

template <class T, class C>
EMBER_ATTN_KERNEL void cached_attention_row_kernel(CachedArgs a, int64_t chunk) {
  T* ks = reinterpret_cast<T*>(shared_memory());  // [chunk][E]
  T* vs = ks + chunk * a.E;                         // [chunk][F]
  C* w = reinterpret_cast<C*>(vs + chunk * a.F);    // [chunk]: scores, then exp(score - max)
  C* part = w + chunk;                              // [kThreads]
  C* red = part + kThreads;                         // [32]
  const int tid = thread_index();
  const int64_t r = block_index(), b = r / a.L, i = r % a.L;
  if (a.early) allow_dependent_grids();  // its reads still wait for this grid's end
  wait_for_prior_grids();                // q, the caches and pos come from the kernels before
  const int64_t n = cached_visible(a, i);
  const T* qr = static_cast<const T*>(a.q) + (b / a.B1) * a.qs0 + (b % a.B1) * a.qs1 + i * a.qs2;
  T* kc = static_cast<T*>(const_cast<void*>(a.k)) + b * a.S * a.E;
  T* vc = static_cast<T*>(const_cast<void*>(a.v)) + b * a.S * a.F;
  const T* kn;
  const T* vn;
  cached_new_rows(a, b, &kn, &vn);
  // This thread's share of q: slot lanes p take elements p, p + kThreadsPerSlot, ...
  const int64_t jj = tid / kThreadsPerSlot, p = tid % kThreadsPerSlot;
  C qv[kRegs];
  EMBER_UNROLL
  for (int u = 0; u < kRegs; ++u) {
    const int64_t e = p + u * kThreadsPerSlot;
    qv[u] = e < a.E ? widen<C>(qr[e * a.qs3]) : C(0);
  }
  // Appended slots past the visible ones: written, never read here.
  if (a.put)
    for (int64_t j = jj; j < a.S; j += kThreads / kThreadsPerSlot)
      if (j >= n && a.put[j] != 0) cached_append_slot(a, kn, vn, b, j, p);
  const ColumnGroups cg = column_groups(a.F);  // F <= kThreads: one pass, fw = F
  C mx = C(-INFINITY), z = 0, acc = 0;
  for (int64_t j0 = 0; j0 < n; j0 += chunk) {
    const int64_t cnt = n - j0 < chunk ? n - j0 : chunk;
    {  // the chunk's key and value rows, each a contiguous run, into shared memory
      const int64_t kp = cnt * a.E * int64_t(sizeof(T)) / 16, vp = cnt * a.F * int64_t(sizeof(T)) / 16;
      const unsigned char* kg = reinterpret_cast<const unsigned char*>(kc + j0 * a.E);
      const unsigned char* vg = reinterpret_cast<const unsigned char*>(vc + j0 * a.F);
      for (int64_t h = tid; h < kp; h += kThreads)
        copy16_async(reinterpret_cast<unsigned char*>(ks) + h * 16, kg + h * 16);
      for (int64_t h = tid; h < vp; h += kThreads)
        copy16_async(reinterpret_cast<unsigned char*>(vs) + h * 16, vg + h * 16);
      async_commit();
      async_wait();
    }
    sync_block();
    // Appended slots of the chunk: k_new's and v_new's rows replace the staged ones and are
    // stored into the caches (the slot's lanes, each over its elements).
    if (a.put)
      for (int64_t j = jj; j < cnt; j += kThreads / kThreadsPerSlot)
        if (a.put[j0 + j] != 0) {
          for (int64_t e = p; e < a.E; e += kThreadsPerSlot) {
            const T x = kn[e * a.kn3];
            ks[j * a.E + e] = x;
            kc[(j0 + j) * a.E + e] = x;
          }
          for (int64_t f = p; f < a.F; f += kThreadsPerSlot) {
            const T x = vn[f * a.vn3];
            vs[j * a.F + f] = x;
            vc[(j0 + j) * a.F + f] = x;
          }
        }
    sync_block();
    // Scores: kThreadsPerSlot lanes a slot, kThreads / kThreadsPerSlot slots a pass.
    for (int64_t j = jj; j - jj < cnt; j += kThreads / kThreadsPerSlot) {
      C s = 0;
      if (j < cnt) {
        EMBER_UNROLL
        for (int u = 0; u < kRegs; ++u) {
          const int64_t e = p + u * kThreadsPerSlot;
          if (e < a.E) s += qv[u] * widen<C>(ks[j * a.E + e]);
        }
      }
      for (int m = 1; m < kThreadsPerSlot; m <<= 1) s += shfl_xor(s, m);
      if (p == 0 && j < cnt) w[j] = s * C(a.scale);
    }
    sync_block();
    // The running max and sum: this chunk's, and the earlier ones' rescaled to the new max.
    C cm = C(-INFINITY);
    for (int64_t j = tid; j < cnt; j += kThreads) cm = max_of(cm, w[j]);
    cm = cached_block_reduce(cm, red, true);
    const C m = max_of(mx, cm);
    const C back = mx > C(-INFINITY) ? exp_of(mx - m) : C(0);
    C cz = 0;
    for (int64_t j = tid; j < cnt; j += kThreads) {
      const C e = exp_of(w[j] - m);
      w[j] = e;
      cz += e;
    }
    cz = cached_block_reduce(cz, red, false);  // its barriers order the w[] writes before reads
    z = z * back + cz;
    mx = m;
    // The values: thread (g, c) over column c and slots g, g + groups, ...
    C sum = 0;
    if (cg.g < cg.groups && cg.c < a.F)
      for (int64_t j = cg.g; j < cnt; j += cg.groups) sum += w[j] * widen<C>(vs[j * a.F + cg.c]);
    acc = acc * back + sum;
    sync_block();  // the chunk's rows and scores are read: the next chunk may overwrite them
  }
  const C o = column_total(acc, part, cg);
  if (tid < a.F)
    static_cast<T*>(a.out)[r * a.F + tid] = narrow<T>(n > 0 && z > C(0) ? o / z : C(0));
}

}  // namespace ember::cuda::attn
