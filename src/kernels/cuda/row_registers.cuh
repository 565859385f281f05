// Rows held in registers, for the row kernels (softmax, log_softmax, layer_norm): a group of G
// threads takes a row, thread t holding the chunks t, t + G, t + 2G, ... of V elements (V = 16
// bytes of T where aligned, else 1), loaded and stored with vector accesses where whole chunks
// fit; and folds over a group of lanes or a whole block.
#pragma once
#include "kernels/cuda/elementwise.cuh"

namespace ember::cuda {

// Addition as a fold (init, fold), the form group_fold and the reductions take.
struct SumOp {
  template <class A> __device__ A init() const { return A(0); }
  template <class A> __device__ A fold(A a, A b) const { return a + b; }
};

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// The row's chunks held by thread t of a group of G: chunk k starts at element (k * G + t) * V.
// Elements past n read as 0 (callers mask them out of the folds).
template <class T, class A, int V, int E>
__device__ __forceinline__ void load_row(const T* x, int n, int t, int G, A (&r)[E][V]) {
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const int c = (k * G + t) * V;
    if (V > 1 && c + V <= n) {
      const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(x + c);
#pragma unroll
      for (int i = 0; i < V; ++i) r[k][i] = A(load(&p.v[i]));
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) r[k][i] = c + i < n ? A(load(x + c + i)) : A(0);
    }
  }
}
template <class T, class A, int V, int E>
__device__ __forceinline__ void store_row(T* y, int n, int t, int G, const A (&r)[E][V]) {
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const int c = (k * G + t) * V;
    if (V > 1 && c + V <= n) {
      Pack<T, V> p;
#pragma unroll
      for (int i = 0; i < V; ++i) store(&p.v[i], r[k][i]);
      *reinterpret_cast<Pack<T, V>*>(y + c) = p;
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (c + i < n) store(y + c + i, r[k][i]);
    }
  }
}

// Fold over aligned groups of G lanes (a power of two <= 32); every lane gets its group's result
// (the butterfly folds the same pairs in every lane, so the lanes agree bit for bit).
template <class A, class Op>
__device__ __forceinline__ A group_fold(A v, Op op, int G) {
  for (int s = G >> 1; s > 0; s >>= 1) v = op.fold(v, __shfl_xor_sync(0xffffffffu, v, s));
  return v;
}
// Fold over the block; every thread gets the result. `partial` (32 slots) may be written again
// once every thread has passed the block's next __syncthreads.
template <class A, class Op>
__device__ __forceinline__ A block_all_fold(A v, Op op, A* partial) {
  v = group_fold(v, op, 32);
  const int lane = threadIdx.x & 31;
  if (lane == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? partial[lane] : op.template init<A>();
  return group_fold(v, op, 32);
}

// How a row kernel covers `rows` rows of n elements, V a chunk: groups of up to 32 lanes in
// blocks of 256 threads, with E in {1, 2, 4, 8} chunks a thread (at most kMaxWarpValues values;
// a row of at most 32 chunks takes the smallest power-of-two group that holds it), or else a
// block a row with kBlockValues values a thread. Calls
// launch.template operator()<E, kBlock>(group, blocks, threads); false where a row would need
// more than 1024 threads.
template <int V, int kMaxWarpValues, int kBlockValues, class Launch>
bool launch_row_shape(int n, int64_t rows, Launch&& launch) {
  constexpr int kWarpThreads = 256;
  constexpr int64_t kMaxGrid = 0x7fffffff;
  auto warp = [&]<int E>() {
    int group = 32;
    if (E == 1) {
      const int chunks = (n + V - 1) / V;
      group = 1;
      while (group < chunks) group *= 2;
    }
    const int64_t per_block = kWarpThreads / group;
    const int64_t want = (rows + per_block - 1) / per_block;
    launch.template operator()<E, false>(group, want < kMaxGrid ? want : kMaxGrid, kWarpThreads);
  };
  if (n <= 32 * V) {
    warp.template operator()<1>();
  } else if (n <= 64 * V && 2 * V <= kMaxWarpValues) {
    warp.template operator()<2>();
  } else if (n <= 128 * V && 4 * V <= kMaxWarpValues) {
    if constexpr (4 * V <= kMaxWarpValues) warp.template operator()<4>();
  } else if (n <= 256 * V && 8 * V <= kMaxWarpValues) {
    if constexpr (8 * V <= kMaxWarpValues) warp.template operator()<8>();
  } else {
    constexpr int E = kBlockValues / V;
    const int threads = ((n + E * V - 1) / (E * V) + 31) / 32 * 32;
    if (threads > 1024) return false;
    launch.template operator()<E, true>(32, rows < kMaxGrid ? rows : kMaxGrid, threads);
  }
  return true;
}

}  // namespace ember::cuda
