// Building blocks of the fused attention kernels (attention_fwd.cuh, attention_bwd.cuh): tiles
// of query and key rows in shared memory, the 16 x 16 thread grid that multiplies them, and the
// dropout mask of a tile from the Philox words the bernoulli op would use.
//
// Every kernel runs 256 threads as a 16 x 16 grid (tr = thread / 16, tc = thread % 16) over
// tiles of R = 16 * V rows, V being the elements of C in 16 bytes (R = 64 for float compute, 32
// for double). A tile is R rows of a head dimension padded to kD (64 or 128) and stored with a
// row stride of kD + V elements (16-byte aligned rows that start on different banks); rows past
// the sequence and columns past the head size are zeros, so they add nothing to any product.
// Products of two tiles give each thread a V x V block of the R x R result: rows tr + 16 i and
// columns tc + 16 j, i, j < V, with 16-byte loads of both operands along the summed dim.
//
// The kernel code is plain C++ over a few primitives (thread and block index, block barrier,
// warp shuffle, dynamic shared memory, a global fence, an atomic add, a load past the SM's
// cache, the waits of programmatic dependent launch, and a prefetch into L2). Compiled by nvcc they are CUDA's; with
// EMBER_CUDA_EMULATION defined, the includer supplies host versions (host threads standing in
// for a block's threads: tests/cuda/emulated_kernels.h), so the same kernels are
// checked against the CPU reference on machines without a GPU.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/philox.h"

#ifdef EMBER_CUDA_EMULATION
#define EMBER_ATTN_DEVICE inline
#define EMBER_ATTN_HOST_DEVICE inline
#define EMBER_ATTN_KERNEL
#define EMBER_ATTN_KERNEL_BLOCKS(n)
#define EMBER_UNROLL
#else
#define EMBER_ATTN_DEVICE __device__ __forceinline__
// Also called by the host (a __device__ function the host calls is a stub that exits).
#define EMBER_ATTN_HOST_DEVICE __host__ __device__ __forceinline__
#define EMBER_ATTN_KERNEL __global__ __launch_bounds__(256)
// A kernel whose blocks must fit n to a multiprocessor (registers held to 65536 / (256 n)).
#define EMBER_ATTN_KERNEL_BLOCKS(n) __global__ __launch_bounds__(256, n)
#define EMBER_UNROLL _Pragma("unroll")
extern __shared__ __align__(16) unsigned char ember_attention_smem[];
namespace ember::cuda::attn {
EMBER_ATTN_DEVICE int thread_index() {
  return int(threadIdx.x);
}
EMBER_ATTN_DEVICE int64_t block_index() {
  return int64_t(blockIdx.x);
}
EMBER_ATTN_DEVICE int64_t grid_blocks() {
  return int64_t(gridDim.x);
}
EMBER_ATTN_DEVICE void sync_block() {
  __syncthreads();
}
template <class C>
EMBER_ATTN_DEVICE C shfl_xor(C v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
EMBER_ATTN_DEVICE unsigned char* shared_memory() {
  return ember_attention_smem;
}
// Counts a block in at *p (a counter the blocks of one launch add to) and returns the count
// before: one atomic that releases what the block wrote (its threads' writes ordered before
// this thread's by a barrier) and acquires what the blocks counted in before it wrote, at the
// device's scope. No full fence: __threadfence is a sequentially consistent one (MEMBAR.SC),
// microseconds on the critical path of a short kernel.
EMBER_ATTN_DEVICE int count_in(int* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
#else
  __threadfence();
  const int old = atomicAdd(p, 1);
  __threadfence();
  return old;
#endif
}
// Programmatic dependent launch (a kernel launched with it may start before the one before it
// in the stream ends): waits until the grids before this one have finished and their writes
// are visible; and lets the grid after this one start launching. Without the launch attribute
// both do nothing.
EMBER_ATTN_DEVICE void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
EMBER_ATTN_DEVICE void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Asks the L2 cache to fetch [p, p + bytes) ahead of the loads that read it, holding no
// registers (p and bytes multiples of 16: callers check): the weights or cache rows a kernel
// under programmatic launch streams in while the kernel before it ends.
EMBER_ATTN_DEVICE void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}
// A load that skips the SM's own cache (L1), for values other blocks wrote in this launch.
template <class C>
EMBER_ATTN_DEVICE C load_shared_by_blocks(const C* p) {
  return __ldcg(p);
}
EMBER_ATTN_DEVICE float exp_of(float x) {
  return __expf(x);
}
EMBER_ATTN_DEVICE double exp_of(double x) {
  return ::exp(x);
}
EMBER_ATTN_DEVICE float log_of(float x) {
  return ::logf(x);
}
EMBER_ATTN_DEVICE double log_of(double x) {
  return ::log(x);
}
EMBER_ATTN_DEVICE float max_of(float a, float b) {
  return ::fmaxf(a, b);
}
EMBER_ATTN_DEVICE double max_of(double a, double b) {
  return ::fmax(a, b);
}
// 16 bytes from p, which is 16-byte aligned.
template <class V>
EMBER_ATTN_DEVICE V load16(const void* p) {
  return *static_cast<const V*>(p);
}
template <class V>
EMBER_ATTN_DEVICE void store16(void* p, const V& v) {
  *static_cast<V*>(p) = v;
}
}  // namespace ember::cuda::attn
#endif

namespace ember::cuda::attn {

constexpr int kThreads = 256;
constexpr int kSide = 16;  // the thread grid is kSide x kSide
constexpr int kMaxBatchDims = 4;
// Dynamic shared memory a block may opt into on sm_90 (H100, H200).
constexpr size_t kMaxSharedBytes = 227 * 1024;

template <class C>
struct Tiles {
  static constexpr int kVec = 16 / int(sizeof(C));  // V: elements of C in 16 bytes
  static constexpr int kRows = kSide * kVec;        // R: rows of a query or key tile
};

template <class C>
struct alignas(16) Vec {
  C v[Tiles<C>::kVec];
};
// 16 bytes of storage elements (a vector load from global memory).
template <class T>
struct alignas(16) Raw {
  T v[16 / sizeof(T)];
};

template <class C, class T>
EMBER_ATTN_DEVICE C widen(T x) {
  if constexpr (std::is_same_v<T, __half>)
    return C(__half2float(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return C(__bfloat162float(x));
  else
    return C(x);
}
// Rounded to nearest even, as the CPU's conversions.
template <class T, class C>
EMBER_ATTN_DEVICE T narrow(C x) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(float(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(float(x));
  else
    return T(x);
}

EMBER_ATTN_DEVICE int round_up(int n, int m) {
  return (n + m - 1) / m * m;
}
EMBER_ATTN_DEVICE int min_rows(int64_t a, int b) {
  return a < b ? int(a) : b;
}

// A [batch..., rows, cols] tensor whose cols are contiguous: row r of batch entry b starts at
// data + batch_offset(b) + r * row_stride (batch dims of stride 0 are broadcast).
template <class T>
struct Operand {
  const T* data = nullptr;
  int64_t row_stride = 0;
  int nbatch = 0;
  int64_t batch_sizes[kMaxBatchDims] = {};
  int64_t batch_strides[kMaxBatchDims] = {};

  EMBER_ATTN_DEVICE const T* rows_of(int64_t b, int64_t row0) const {
    int64_t off = 0;
    EMBER_UNROLL
    for (int d = kMaxBatchDims - 1; d >= 0; --d) {
      if (d >= nbatch) continue;
      off += (b % batch_sizes[d]) * batch_strides[d];
      b /= batch_sizes[d];
    }
    return data + off + row0 * row_stride;
  }
};

// The sizes and attrs every attention kernel reads. Dropout: element n = (b * L + i) * S + j
// of the [batch, L, S] draw is kept where word n % 4 of Philox block base_block + n / 4 is below
// threshold (the bernoulli op's layout, core/philox.h); kept probabilities scale by inv_keep.
template <class C>
struct Problem {
  int64_t batch = 0, L = 0, S = 0;
  int E = 0, F = 0;
  C scale = 1;
  bool causal = false;
  bool dropout = false;
  uint64_t seed = 0, base_block = 0, threshold = 0;
  C inv_keep = 1;
  // With dropout from an rng_state tensor: its {seed, offset} in device memory, which the
  // kernels read (drawn()) in place of seed and base_block.
  const int64_t* rng = nullptr;

  EMBER_ATTN_DEVICE Problem drawn() const {
    Problem r = *this;
    if (rng) {
      r.seed = uint64_t(rng[0]);
      r.base_block = uint64_t(rng[1]) / 4;
    }
    return r;
  }

  // Whether key j is hidden from query i: causal (top-left: j > i) masks only.
  EMBER_ATTN_DEVICE bool hidden(int64_t i, int64_t j) const { return causal && j > i; }
};

// Where a block and its thread stand in the kernels that take a block per (batch entry, tile
// of R query rows), the last tiles first (under the causal mask they see the most keys): the
// thread's row and column in the kSide x kSide grid, the batch entry, the tile's first row and
// its number of rows.
struct QueryTile {
  int tr, tc;
  int64_t b, r0;
  int rows;
};
template <class C>
EMBER_ATTN_DEVICE QueryTile query_tile(const Problem<C>& p) {
  constexpr int R = Tiles<C>::kRows;
  const int tid = thread_index();
  const int64_t tiles = (p.L + R - 1) / R;
  const int64_t r0 = (tiles - 1 - block_index() / p.batch) * R;
  return {tid / kSide, tid % kSide, block_index() % p.batch, r0, min_rows(p.L - r0, R)};
}

// dst (R x kD, row stride kD + V) = rows [0, rows) and cols [0, cols) of src, zeros elsewhere.
// kVecLoad: 16-byte loads (the launcher checked that src, its strides and cols allow them).
template <class T, class C, int kD, bool kVecLoad>
EMBER_ATTN_DEVICE void load_tile(C* dst, const T* src, int64_t row_stride, int rows, int cols) {
  constexpr int V = Tiles<C>::kVec, R = Tiles<C>::kRows, ld = kD + V;
  if constexpr (kVecLoad) {
    constexpr int W = 16 / int(sizeof(T));  // storage elements a load, a multiple of V
    constexpr int kChunks = kD / W;
    for (int t = thread_index(); t < R * kChunks; t += kThreads) {
      const int r = t / kChunks, c = (t % kChunks) * W;
      Raw<T> raw{};
      const bool inside = r < rows && c < cols;
      if (inside) raw = load16<Raw<T>>(src + r * row_stride + c);
      EMBER_UNROLL
      for (int w = 0; w < W; w += V) {
        Vec<C> x;
        EMBER_UNROLL
        for (int u = 0; u < V; ++u) x.v[u] = inside ? widen<C>(raw.v[w + u]) : C(0);
        store16(dst + r * ld + c + w, x);
      }
    }
  } else {
    for (int t = thread_index(); t < R * kD; t += kThreads) {
      const int r = t / kD, c = t % kD;
      dst[r * ld + c] = r < rows && c < cols ? widen<C>(src[r * row_stride + c]) : C(0);
    }
  }
}

// keep[r * R + c] = whether element (b, row0 + r, col0 + c) of the dropout draw is kept, for
// r < rows and c < cols (other entries are left as they were). A row's cols span at most
// R / 4 + 1 Philox blocks; each of the block's kN threads computes whole blocks and writes their
// words' bits.
template <class C, int kN = kThreads>
EMBER_ATTN_DEVICE void keep_tile(unsigned char* keep, const Problem<C>& p, int64_t b, int64_t row0,
                                 int rows, int64_t col0, int cols) {
  constexpr int R = Tiles<C>::kRows, kSlots = R / 4 + 1;
  for (int t = thread_index(); t < R * kSlots; t += kN) {
    const int r = t / kSlots, slot = t % kSlots;
    if (r >= rows) continue;
    const uint64_t first = uint64_t((b * p.L + row0 + r) * p.S + col0);
    const uint64_t end = first + uint64_t(cols);
    const uint64_t block = first / 4 + uint64_t(slot);
    if (block * 4 >= end) continue;
    const philox::Block w = philox::block(p.seed, p.base_block + block);
    EMBER_UNROLL
    for (int k = 0; k < 4; ++k) {
      const uint64_t n = block * 4 + uint64_t(k);
      if (n >= first && n < end)
        keep[r * R + int(n - first)] = philox::bernoulli(w.v[k], p.threshold) ? 1 : 0;
    }
  }
}

// acc[i][j] += sum over k < kk of A[(tr + 16 i) * ld + k] * B[(tc + 16 j) * ld + k]: this
// thread's block of A B^T for two tiles stored with the summed dim contiguous (kk a multiple
// of V). Per V steps of k: V loads of A (two rows a warp: one wavefront each) and V of B.
template <class C>
EMBER_ATTN_DEVICE void mma_nt(C (&acc)[Tiles<C>::kVec][Tiles<C>::kVec], const C* A, const C* B,
                              int ld, int kk, int tr, int tc) {
  constexpr int V = Tiles<C>::kVec;
  for (int k = 0; k < kk; k += V) {
    Vec<C> a[V], b[V];
    EMBER_UNROLL
    for (int i = 0; i < V; ++i) a[i] = load16<Vec<C>>(A + (tr + kSide * i) * ld + k);
    EMBER_UNROLL
    for (int j = 0; j < V; ++j) b[j] = load16<Vec<C>>(B + (tc + kSide * j) * ld + k);
    EMBER_UNROLL
    for (int i = 0; i < V; ++i) {
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) {
        EMBER_UNROLL
        for (int u = 0; u < V; ++u) acc[i][j] += a[i].v[u] * b[j].v[u];
      }
    }
  }
}

// acc[i][p * V + x] += sum over k < kk of A[(tr + 16 i) * lda + k] * B[k * ldb + n] with
// n = (16 p + tc) * V + x, for the first `passes` of kPasses column passes: this thread's rows
// of A times B's columns, B stored with its columns contiguous. kk is a multiple of V.
template <class C, int kPasses>
EMBER_ATTN_DEVICE void mma_nn(C (&acc)[Tiles<C>::kVec][kPasses * Tiles<C>::kVec], const C* A,
                              int lda, const C* B, int ldb, int kk, int passes, int tr, int tc) {
  constexpr int V = Tiles<C>::kVec;
  for (int k = 0; k < kk; k += V) {
    Vec<C> a[V];
    EMBER_UNROLL
    for (int i = 0; i < V; ++i) a[i] = load16<Vec<C>>(A + (tr + kSide * i) * lda + k);
    EMBER_UNROLL
    for (int u = 0; u < V; ++u) {
      EMBER_UNROLL
      for (int p = 0; p < kPasses; ++p) {
        if (p >= passes) continue;
        const Vec<C> b = load16<Vec<C>>(B + (k + u) * ldb + (kSide * p + tc) * V);
        EMBER_UNROLL
        for (int i = 0; i < V; ++i) {
          EMBER_UNROLL
          for (int x = 0; x < V; ++x) acc[i][p * V + x] += a[i].v[u] * b.v[x];
        }
      }
    }
  }
}

// Max and sum over the 16 threads of a thread-grid row (lanes differing in their low 4 bits).
// Every thread of the warp must call them. fmax ignores NaN, so all 16 agree on the max.
template <class C>
EMBER_ATTN_DEVICE C max16(C v) {
  EMBER_UNROLL
  for (int s = kSide / 2; s > 0; s >>= 1) v = max_of(v, shfl_xor(v, s));
  return v;
}
template <class C>
EMBER_ATTN_DEVICE C sum16(C v) {
  EMBER_UNROLL
  for (int s = kSide / 2; s > 0; s >>= 1) v += shfl_xor(v, s);
  return v;
}

// Number of column passes of 16 V columns that cover `width` columns.
template <class C>
EMBER_ATTN_DEVICE int passes_for(int width) {
  constexpr int span = kSide * Tiles<C>::kVec;
  return (width + span - 1) / span;
}

}  // namespace ember::cuda::attn
