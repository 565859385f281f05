// The kernel of a product with a few rows (decoding: one token a sequence) and a weight stored
// as rows of k contiguous elements, out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n] +
// residual[m, n], summed in float and rounded once; with round_product, over the product
// rounded to the output's type first, as the matmul op stores it; with gelu, the exact gelu of
// product + bias, the linear layer before an MLP's activation). One warp (or two or four, each
// over a share of k, where the columns are few: split_of) takes output column n for every row
// m: its lanes read w's row n in 16-byte vectors (or elements, where rows are not aligned for
// vectors), so the weight, the only large operand, streams through once, coalesced, and the
// GPU has warps for every column (a gemm's tiles would leave most of it idle at one row). Written on attention_tiles.cuh's primitives, so the
// block emulator runs it on the host too (tests/cuda/gemv_emulation_test.cpp).
#pragma once
#include "kernels/cuda/attention_mma.cuh"  // copy16_async
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/functors.h"

namespace ember::cuda::gemv {

using attn::narrow;
using attn::widen;

constexpr int kMaxRows = 4;         // rows m a launch takes (more go to cuBLAS)
constexpr int kWarps = attn::kThreads / 32;  // output columns a block

struct Args {
  const void* x = nullptr;         // [M, K], rows ldx apart
  const void* w = nullptr;         // [N, K], rows ldw apart
  const void* bias = nullptr;      // [N] or null
  const void* residual = nullptr;  // [M, N] contiguous, or null
  void* out = nullptr;             // [M, N] contiguous
  int64_t M = 1, N = 0, K = 0, ldx = 0, ldw = 0;
  bool vectors = false;  // x's and w's rows start on 16 bytes and K is a whole number of vectors
  bool round_product = false;  // the product rounded to T before residual and bias are added
  bool gelu = false;           // the exact gelu of (product + bias), with no residual
  int split = 1;               // warps a column (1, 2 or 4), each over a share of k
  bool early = false;          // the next kernel may launch as the blocks start (launch.cuh)
  // With ln_threads > 0 (16-bit T), x's rows are first layer-normalized over k with ln_w and
  // ln_b (a decode step's ln_1 and the projection after it), in the block, into shared memory:
  // layer_norm_rows below.
  int ln_threads = 0;
  const void* ln_w = nullptr;
  const void* ln_b = nullptr;
  float ln_eps = 0;
};

// Warps a column: more where the columns alone would leave the GPU's 132 multiprocessors with
// fewer than two blocks each (a projection back to the model's width). Fixed by N alone, so
// every product of a shape sums in one order.
inline int split_of(int64_t N) {
  constexpr int64_t kWanted = 264;
  int split = 1;
  while (split < 4 && (N * split + kWarps - 1) / kWarps < kWanted) split *= 2;
  return split;
}
// Vectors (or elements) of w a lane loads before it multiplies any: a 16-bit row of 768 takes
// one set (three vectors a lane), so the weight arrives in one round of memory latency, not
// three. Three keeps the bfloat16 kernel of one row at 80 registers: three blocks of a
// multiprocessor, so a projection's columns take one wave of warps.
constexpr int kLoads = 3;

// The launch's blocks.
inline int64_t blocks(int64_t N, int split) {
  const int64_t columns = kWarps / split;  // a block's
  return (N + columns - 1) / columns;
}
// Dynamic shared memory of a launch: a partial sum a warp and row.
constexpr size_t kSharedBytes = size_t(kWarps) * kMaxRows * sizeof(float);

// The layer_norm op's CUDA kernel for 16-bit rows of 513 to 4096 (kernels/cuda/layer_norm.cu)
// takes a block of this many threads a row, two chunks of eight elements a thread.
inline int layer_norm_threads(int64_t k) {
  return int(((k + 15) / 16 + 31) / 32 * 32);
}
// What a launch with the layer_norm adds to its shared memory: the folds' 64 partials, then the
// normalized rows (M of k elements of T).
EMBER_ATTN_HOST_DEVICE size_t layer_norm_shared_bytes(int64_t rows, int64_t k, size_t t_size) {
  return 64 * sizeof(float) + size_t(rows * k) * t_size;
}

// A product and a sum each rounded on its own (never contracted into an fma).
EMBER_ATTN_DEVICE float mul_rounded(float a, float b) {
#ifdef EMBER_CUDA_EMULATION
  return a * b;
#else
  return __fmul_rn(a, b);
#endif
}
EMBER_ATTN_DEVICE float add_rounded(float a, float b) {
#ifdef EMBER_CUDA_EMULATION
  return a + b;
#else
  return __fadd_rn(a, b);
#endif
}

// Folds v (a sum) over the first G threads of the block (the others hold 0) as the op's
// block_all_fold does: over each warp's lanes by a butterfly, then over the warps' partials
// (G / 32 of them, zeros after) by the same butterfly. `red` holds 32 floats.
EMBER_ATTN_DEVICE float layer_norm_fold(float v, float* red, int G) {
  for (int s = 16; s > 0; s >>= 1) v = v + attn::shfl_xor(v, s);
  const int lane = attn::thread_index() % 32, warp = attn::thread_index() / 32;
  if (lane == 0) red[warp] = v;
  attn::sync_block();
  v = lane < G / 32 ? red[lane] : 0.0f;
  for (int s = 16; s > 0; s >>= 1) v = v + attn::shfl_xor(v, s);
  return v;
}

// x's M rows of K elements, layer-normalized with w and b into xs ([M][K], shared): the op's
// arithmetic step for step (the same chunks a thread, the same folds, the same rounding), so
// xs holds what the op would store, bit for bit. Every thread of the block takes part.
template <class T, int M>
EMBER_ATTN_DEVICE void layer_norm_rows(const Args& a, T* xs, float* red) {
  constexpr int V = 8, E = 2;
  const int t = attn::thread_index(), G = a.ln_threads, n = int(a.K);
  const bool mine = t < G;
  const T* w = static_cast<const T*>(a.ln_w);
  const T* b = static_cast<const T*>(a.ln_b);
  T wl[E][V], bl[E][V];  // this thread's weight and bias, loaded with the first row
  for (int m = 0; m < M; ++m) {
    const T* xr = static_cast<const T*>(a.x) + m * a.ldx;
    float r[E][V];
    for (int k = 0; k < E; ++k)
      for (int i = 0; i < V; ++i) {
        const int c = (k * G + t) * V + i;
        const bool in = mine && c < n;
        r[k][i] = in ? widen<float>(xr[c]) : 0.0f;
        if (m == 0) {
          wl[k][i] = in ? w[c] : narrow<T>(0.0f);
          bl[k][i] = in ? b[c] : narrow<T>(0.0f);
        }
      }
    float sum = 0;
    for (int k = 0; k < E; ++k)
      for (int i = 0; i < V; ++i) sum += r[k][i];
    sum = layer_norm_fold(sum, red, G);
    const float mu = sum / float(n);
    float q = 0;
    for (int k = 0; k < E; ++k)
      for (int i = 0; i < V; ++i)
        if (mine && (k * G + t) * V + i < n) {
          const float d = r[k][i] - mu;
          q += d * d;
        }
    q = layer_norm_fold(q, red + 32, G);
    const float var = q / float(n);
    const float rs = 1.0f / ember::fn::Sqrt{}(var + a.ln_eps);
    for (int k = 0; k < E; ++k)
      for (int i = 0; i < V; ++i) {
        const int c = (k * G + t) * V + i;
        if (!mine || c >= n) continue;
        // Rounded after the product and after the sum, as the op's kernel does (its weight and
        // bias are optional there, so its compiler never contracts the two into an fma).
        const float v = (r[k][i] - mu) * rs;
        xs[m * n + c] =
            narrow<T>(add_rounded(mul_rounded(v, widen<float>(wl[k][i])), widen<float>(bl[k][i])));
      }
    attn::sync_block();  // xs written; red free for the next row
  }
}

// Column n's M sums stored: (product + bias) + residual, in float (the order of the two adds a
// compiled graph fuses), the product first rounded to T where a asks, the gelu of product + bias
// where a asks.
template <class T, int M>
EMBER_ATTN_DEVICE void store_column(const Args& a, int64_t n, const float* acc, float b,
                                    const float* res) {
  for (int m = 0; m < M; ++m) {
    float v = (a.round_product ? widen<float>(narrow<T>(acc[m])) : acc[m]) + b;
    if (a.gelu) v = ember::fn::GeluHalf{}(v);  // the 16-bit types' form, as their gelu kernels
    if (a.residual) v += res[m];
    static_cast<T*>(a.out)[m * a.N + n] = narrow<T>(v);
  }
}

// M: the rows (1 to kMaxRows; a.M is M). kLn: a.ln_threads > 0 (16-bit T only). One row: three
// blocks a multiprocessor, so that a projection's columns take one wave of warps (more rows
// would spill).
template <class T, int M, bool kLn = false>
EMBER_ATTN_KERNEL_BLOCKS(M == 1 ? 3 : 1) void gemv_kernel(Args a) {
  using Raw = attn::Raw<T>;
  constexpr int V = 16 / int(sizeof(T));
  const int lane = attn::thread_index() % 32, warp = attn::thread_index() / 32;
  const int part = warp % a.split;  // this warp's share of k
  const int64_t n = attn::block_index() * (kWarps / a.split) + warp / a.split;
  const bool active = n < a.N;  // a warp past the last column idles through the exchanges
  const T* x = static_cast<const T*>(a.x);
  int64_t ldx = a.ldx;
  const T* wr = static_cast<const T*>(a.w) + (active ? n : 0) * a.ldw;
  if (a.early) attn::allow_dependent_grids();  // its reads still wait for this grid's end
  // Under programmatic launch the kernel before this one may still run: the bias (no kernel
  // writes it) is loaded before the wait, x and the residual after it. (Loading the first
  // weights into registers before it too costs the one-row bfloat16 kernel its third block a
  // multiprocessor; they are prefetched into L2 instead.)
  const bool ends = active && lane == 0 && part == 0;  // the thread that stores column n
  const float b = ends && a.bias ? widen<float>(static_cast<const T*>(a.bias)[n]) : 0.0f;
  const int64_t step = int64_t(32) * V * a.split, first = (int64_t(part) * 32 + lane) * V;
  // The column's weight row (no kernel writes it) asked of L2 before the wait, holding no
  // registers: under programmatic launch it streams in while the kernel before ends. (Copying
  // each lane's weight vectors into shared memory there instead, by cp.async, made a GPT-2
  // decode step slower: 2586 against 2863 tokens/s.)
  if (active && a.vectors && part == 0 && lane == 0)
    attn::prefetch_l2(wr, unsigned(a.K * int64_t(sizeof(T))));
  attn::wait_for_prior_grids();
  if constexpr (kLn && sizeof(T) == 2) {  // x is the layer_norm of a.x's rows, made here
    unsigned char* sh = attn::shared_memory() + kSharedBytes;
    T* xs = reinterpret_cast<T*>(sh + 64 * sizeof(float));
    layer_norm_rows<T, M>(a, xs, reinterpret_cast<float*>(sh));
    x = xs;
    ldx = a.K;
  }
  // The residual, loaded before the sum so that its latency hides behind it.
  float res[kMaxRows] = {};
  if (ends && a.residual)
    for (int m = 0; m < M; ++m) res[m] = widen<float>(static_cast<const T*>(a.residual)[m * a.N + n]);
  // Each lane takes its k in increasing order, kLoads of them loaded at once.
  float acc[kMaxRows] = {};
  if (active && a.vectors) {
    for (int64_t k0 = first; k0 < a.K; k0 += step * kLoads) {
      Raw wv[kLoads], xv[M][kLoads];
      EMBER_UNROLL
      for (int g = 0; g < kLoads; ++g) {
        const int64_t k = k0 + g * step;
        if (k < a.K) {
          wv[g] = attn::load16<Raw>(wr + k);
          for (int m = 0; m < M; ++m) xv[m][g] = attn::load16<Raw>(x + m * ldx + k);
        }
      }
      EMBER_UNROLL
      for (int g = 0; g < kLoads; ++g)
        if (k0 + g * step < a.K)
          for (int m = 0; m < M; ++m)
            for (int e = 0; e < V; ++e)
              acc[m] += widen<float>(xv[m][g].v[e]) * widen<float>(wv[g].v[e]);
    }
  } else if (active) {
    const int64_t estep = int64_t(32) * a.split;  // elements, not vectors
    for (int64_t k0 = int64_t(part) * 32 + lane; k0 < a.K; k0 += estep * kLoads) {
      float wv[kLoads], xv[M][kLoads];
      EMBER_UNROLL
      for (int g = 0; g < kLoads; ++g) {
        const int64_t k = k0 + g * estep;
        wv[g] = k < a.K ? widen<float>(wr[k]) : 0.0f;
        for (int m = 0; m < M; ++m) xv[m][g] = k < a.K ? widen<float>(x[m * ldx + k]) : 0.0f;
      }
      EMBER_UNROLL
      for (int g = 0; g < kLoads; ++g)
        if (k0 + g * estep < a.K)
          for (int m = 0; m < M; ++m) acc[m] += xv[m][g] * wv[g];
    }
  }
  if (!a.early) attn::allow_dependent_grids();  // the next kernel's blocks may start their setup
  for (int m = 0; m < M; ++m)
    for (int s = 16; s > 0; s >>= 1) acc[m] += attn::shfl_xor(acc[m], s);
  if (a.split > 1) {  // the column's warps' sums, added in the order of their shares
    float* partial = reinterpret_cast<float*>(attn::shared_memory());  // [kWarps][kMaxRows]
    if (lane == 0)
      for (int m = 0; m < kMaxRows; ++m) partial[warp * kMaxRows + m] = acc[m];
    attn::sync_block();
    for (int m = 0; m < M; ++m) {
      float sum = 0;
      for (int q = 0; q < a.split; ++q) sum += partial[(warp - part + q) * kMaxRows + m];
      acc[m] = sum;
    }
  }
  if (ends) store_column<T, M>(a, n, acc, b, res);
}

// Whether a launch may take its columns in turn (columns_kernel): one row, a warp a column,
// 16-byte vectors, a lane's share of a weight row one set of loads (a layer_norm before it
// allowed, as for the gemv kernel: a decode step's ln_f and logits).
inline bool columns_in_turn_fit(const Args& a, size_t t_size) {
  return a.M == 1 && a.split == 1 && a.vectors && (a.ln_threads == 0 || t_size == 2) &&
         a.K <= int64_t(32) * int64_t(16 / t_size) * kLoads;
}

// Columns a warp of columns_kernel has in flight: their weights copied into the warp's ring in
// shared memory (cp.async: no registers held), so that enough of the weight streams in at once
// to keep the memory busy (two in registers left it at 2.3 TB/s on an H200).
constexpr int kColumnStages = 4;
// Where columns_kernel's rings start in its shared memory: after the gemv kernel's partial sums
// and the layer-normalized row (with a layer_norm), on 16 bytes.
EMBER_ATTN_HOST_DEVICE size_t columns_ring_offset(bool ln, int64_t k, size_t t_size) {
  const size_t o = kSharedBytes + (ln ? layer_norm_shared_bytes(1, k, t_size) : 0);
  return (o + 15) / 16 * 16;
}
// Dynamic shared memory of a columns_kernel launch (past 48 KiB: the launch opts in).
EMBER_ATTN_HOST_DEVICE size_t columns_shared_bytes(bool ln, int64_t k, size_t t_size) {
  return columns_ring_offset(ln, k, t_size) + size_t(kWarps) * kColumnStages * kLoads * 32 * 16;
}

// A product of many columns (the logits' projection: tens of thousands) in one wave of blocks:
// warp w of the grid takes columns w, w + W, w + 2W ... (W the grid's warps). Each lane copies
// its vectors of the kColumnStages columns after the one it sums into its slots of the warp's
// ring (a group of copies a column, waited for in order), so that the launch does not wait on a
// round of memory latency per column. x's vectors are loaded once for all the warp's columns.
// Each column sums in gemv_kernel's order: the same bits. Launched with at most as many blocks as
// are resident (two a multiprocessor: the rings' shared memory).
// kLn: x is first layer-normalized in each block (layer_norm_rows, the op's bits), as the gemv
// kernel does it.
template <class T, bool kLn = false>
EMBER_ATTN_KERNEL_BLOCKS(2) void columns_kernel(Args a) {
  using Raw = attn::Raw<T>;
  constexpr int D = kColumnStages;
  constexpr int V = 16 / int(sizeof(T));
  constexpr bool kNormed = kLn && sizeof(T) == 2;
  const int lane = attn::thread_index() % 32, warp = attn::thread_index() / 32;
  const int64_t W = attn::grid_blocks() * kWarps, step = int64_t(32) * V, first = int64_t(lane) * V;
  if (a.early) attn::allow_dependent_grids();  // its reads still wait for this grid's end
  const T* w = static_cast<const T*>(a.w);
  const T* bias = static_cast<const T*>(a.bias);
  const T* residual = static_cast<const T*>(a.residual);
  unsigned char* ring = attn::shared_memory() + columns_ring_offset(kNormed, a.K, sizeof(T)) +
                        size_t(warp) * D * kLoads * 32 * 16;
  auto slot = [&](int d, int g) { return ring + ((d * kLoads + g) * 32 + lane) * 16; };
  // Column n's weights into slot d (one group of copies, empty past the last column) and its
  // bias into bb[d].
  float bb[D] = {}, rb[D] = {};
  auto fetch = [&](int64_t n, int d) {
    if (n < a.N) {
      EMBER_UNROLL
      for (int g = 0; g < kLoads; ++g)
        if (first + g * step < a.K) attn::copy16_async(slot(d, g), w + n * a.ldw + first + g * step);
      if (lane == 0 && bias) bb[d] = widen<float>(bias[n]);
    }
    attn::async_commit();
  };
  // Column n0 + d W + warp of the block's rounds n0 sits in slot d. No kernel writes the weights:
  // the first D columns are asked for before the wait.
  const int64_t n_first = attn::block_index() * kWarps;
  EMBER_UNROLL
  for (int d = 0; d < D; ++d) fetch(n_first + d * W + warp, d);
  attn::wait_for_prior_grids();
  const T* x = static_cast<const T*>(a.x);
  if constexpr (kNormed) {  // x is the layer_norm of a.x's row, made here
    unsigned char* sh = attn::shared_memory() + kSharedBytes;
    T* xs = reinterpret_cast<T*>(sh + 64 * sizeof(float));
    layer_norm_rows<T, 1>(a, xs, reinterpret_cast<float*>(sh));
    x = xs;
  }
  Raw xv[kLoads];
  EMBER_UNROLL
  for (int g = 0; g < kLoads; ++g)
    if (first + g * step < a.K) xv[g] = attn::load16<Raw>(x + first + g * step);
  EMBER_UNROLL
  for (int d = 0; d < D; ++d) {
    const int64_t n = n_first + d * W + warp;
    if (n < a.N && lane == 0 && residual) rb[d] = widen<float>(residual[n]);
  }
  for (int64_t n0 = n_first; n0 < a.N; n0 += D * W) {
    EMBER_UNROLL
    for (int d = 0; d < D; ++d) {
      const int64_t n = n0 + d * W + warp, next = n + D * W;
      attn::async_wait_pending<D - 1>();  // slot d's group, the oldest, has landed
      float acc[kMaxRows] = {};
      if (n < a.N) {
        EMBER_UNROLL
        for (int g = 0; g < kLoads; ++g)
          if (first + g * step < a.K) {
            const Raw wv = attn::load16<Raw>(slot(d, g));
            for (int e = 0; e < V; ++e) acc[0] += widen<float>(xv[g].v[e]) * widen<float>(wv.v[e]);
          }
      }
      for (int s = 16; s > 0; s >>= 1) acc[0] += attn::shfl_xor(acc[0], s);
      if (n < a.N && lane == 0) store_column<T, 1>(a, n, acc, bb[d], &rb[d]);
      fetch(next, d);  // slot d read (its values summed): refilled, in flight for D columns
      if (next < a.N && lane == 0 && residual) rb[d] = widen<float>(residual[next]);
    }
  }
  if (!a.early) attn::allow_dependent_grids();
}

}  // namespace ember::cuda::gemv
