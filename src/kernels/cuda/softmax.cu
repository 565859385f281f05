// CUDA kernels of softmax and log_softmax (see the notes below), on reduce_plan.cuh's index
// spaces and folds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/reduce_plan.cuh"
#include "kernels/cuda/row_registers.cuh"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

using namespace reduction;

// softmax / log_softmax along one dim, as the CPU kernel computes it: the max, the sum of
// exp(x - max), then exp(x - max) * (1 / sum) or (x - max) - log(sum).
//
// Fast path (the dim contiguous in x and y, n <= 16384): each row is read once into registers
// and written once. A group of G threads takes a row, thread t holding the chunks t, t + G,
// t + 2G, ... of V elements (16-byte vector loads and stores when every row start of x and y is
// 16-byte aligned, V = 1 otherwise; a chunk past the end is loaded element-wise, masked). Rows
// of up to 16 values a thread of a warp (512 elements for float32 and the half types, 256 for
// float64 or unaligned rows) take a power-of-two group of up to 32 lanes (several rows a warp
// for short rows) and fold through shuffles only; longer rows take a block of 16 values a
// thread (256 threads for 4096 elements), folding through shuffles and a shared-memory array.
// Other layouts and longer rows go to the general kernel: a block a row, three strided passes.

// Rows of a softmax: the kept dims, merged where x and y both allow, with x's and y's strides.
struct RowPlan {
  int ndim = 0;
  int64_t sizes[kMaxDims], xs[kMaxDims], ys[kMaxDims];
  int64_t rows = 1;
  int n = 0, group = 32;  // row length; lanes a row (warp kernel)
};

__device__ __forceinline__ void row_offsets(int64_t r, const RowPlan& p, int64_t& ox,
                                            int64_t& oy) {
  if (p.ndim == 1) {
    ox = r * p.xs[0];
    oy = r * p.ys[0];
    return;
  }
  ox = oy = 0;
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t c = r % p.sizes[d];
    r /= p.sizes[d];
    ox += c * p.xs[d];
    oy += c * p.ys[d];
  }
}

// kBlock: a block a row (G = blockDim.x, a multiple of 32); else groups of p.group lanes, a row
// each. E chunks of V elements a thread.
template <class T, class A, int V, int E, bool kBlock>
__global__ void __launch_bounds__(kBlock ? 1024 : 256)
    softmax_rows_kernel(const T* in, T* out, RowPlan p, bool log) {
  __shared__ A partial[2][32];  // the max's and the sum's: see block_all_fold
  const int G = kBlock ? int(blockDim.x) : p.group;
  const int t = kBlock ? int(threadIdx.x) : int(threadIdx.x) & (G - 1);
  const int64_t per_block = kBlock ? 1 : blockDim.x / G;
  const int64_t mine = kBlock ? 0 : threadIdx.x / G;
  const ExtremeOp<true> max_op;
  // The loop runs the same rounds in every thread (the folds need whole warps); a group past
  // the last row works on nothing (n 0) and stores nothing.
  for (int64_t r0 = blockIdx.x * per_block; r0 < p.rows; r0 += int64_t(gridDim.x) * per_block) {
    const int64_t row = r0 + mine;
    const int n = row < p.rows ? p.n : 0;
    int64_t ox = 0, oy = 0;
    if (n) row_offsets(row, p, ox, oy);
    A r[E][V];
    load_row<T, A, V, E>(in + ox, n, t, G, r);
    A m = max_op.template init<A>();
#pragma unroll
    for (int k = 0; k < E; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i)
        if ((k * G + t) * V + i < n) m = max_op.fold(m, r[k][i]);
    m = kBlock ? block_all_fold(m, max_op, partial[0]) : group_fold(m, max_op, G);
    A sum = 0;
#pragma unroll
    for (int k = 0; k < E; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if ((k * G + t) * V + i < n) {
          const A e = fn::ExpFtz{}(r[k][i] - m);
          sum += e;
          if (!log) r[k][i] = e;
        }
      }
    sum = kBlock ? block_all_fold(sum, SumOp{}, partial[1]) : group_fold(sum, SumOp{}, G);
    if (log) {
      const A log_sum = fn::Log{}(sum);
#pragma unroll
      for (int k = 0; k < E; ++k)
#pragma unroll
        for (int i = 0; i < V; ++i) r[k][i] = (r[k][i] - m) - log_sum;
    } else {
      const A inv = A(1) / sum;
#pragma unroll
      for (int k = 0; k < E; ++k)
#pragma unroll
        for (int i = 0; i < V; ++i) r[k][i] = r[k][i] * inv;
    }
    store_row<T, A, V, E>(out + oy, n, t, G, r);
  }
}

// Launches the fast kernel for rows of p.n elements, V elements a chunk: a group of up to 32
// lanes with E in {1, 2, 4, 8} chunks a thread (at most 16 values a thread, 8 for float64, so
// the registers stay few), else a block with 16 values a thread (up to 1024 threads). False
// where the row is too long.
template <class T, int V>
bool launch_softmax_rows(const T* xp, T* yp, RowPlan p, bool log, cudaStream_t stream) {
  using A = acc_t<T>;
  return launch_row_shape<V, sizeof(A) == 8 ? 8 : 16, 16>(
      p.n, p.rows, [&]<int E, bool kBlock>(int group, int64_t blocks, int threads) {
        RowPlan q = p;
        q.group = group;
        softmax_rows_kernel<T, A, V, E, kBlock><<<int(blocks), threads, 0, stream>>>(xp, yp, q, log);
      });
}

// The fast path where it applies (see above); false leaves the row to the general kernel.
template <class T>
bool softmax_fast(const T* xp, T* yp, const ReducePlan& px, const ReducePlan& py, bool log,
                  cudaStream_t stream) {
  if (px.red_ndim != 1 || px.reduced > 16384) return false;
  if (px.reduced > 1 && (px.red_strides[0] != 1 || py.red_strides[0] != 1)) return false;
  RowPlan p;
  p.n = int(px.reduced);
  p.rows = px.outputs;
  for (int d = 0; d < px.kept_ndim; ++d) {
    const int64_t size = px.kept_sizes[d], xs = px.kept_strides[d], ys = py.kept_strides[d];
    if (size == 1) continue;
    if (p.ndim > 0 && p.xs[p.ndim - 1] == xs * size && p.ys[p.ndim - 1] == ys * size) {
      p.sizes[p.ndim - 1] *= size;
      p.xs[p.ndim - 1] = xs;
      p.ys[p.ndim - 1] = ys;
      continue;
    }
    p.sizes[p.ndim] = size;
    p.xs[p.ndim] = xs;
    p.ys[p.ndim++] = ys;
  }
  constexpr int V = 16 / sizeof(T);
  bool aligned = reinterpret_cast<uintptr_t>(xp) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  for (int d = 0; d < p.ndim; ++d) aligned = aligned && p.xs[d] % V == 0 && p.ys[d] % V == 0;
  return aligned ? launch_softmax_rows<T, V>(xp, yp, p, log, stream)
                 : launch_softmax_rows<T, 1>(xp, yp, p, log, stream);
}

// The general kernel: a block a row, three passes over it (max, sum of exp(x - max), write).
template <class T, class A>
__global__ void softmax_kernel(const T* in, T* out, ReducePlan p, ReducePlan q, bool log) {
  __shared__ A shared;
  const int64_t sx = p.red_strides[0], sy = q.red_strides[0], n = p.reduced;
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    const T* x = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
    T* y = out + offset_of(o, q.kept_ndim, q.kept_sizes, q.kept_strides);
    const ExtremeOp<true> max_op;
    A m = max_op.template init<A>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = max_op.fold(m, A(load(x + j * sx)));
    m = block_fold<A>(m, max_op);
    if (threadIdx.x == 0) shared = m;
    __syncthreads();
    m = shared;
    A sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      sum += fn::ExpFtz{}(A(load(x + j * sx)) - m);
    sum = block_fold<A>(sum, SumOp{});
    if (threadIdx.x == 0) shared = sum;
    __syncthreads();
    sum = shared;
    const A log_sum = fn::Log{}(sum), inv = A(1) / sum;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const A v = A(load(x + j * sx)) - m;
      store(y + j * sy, log ? v - log_sum : fn::ExpFtz{}(v) * inv);
    }
    __syncthreads();  // `shared` is rewritten for the next row
  }
}

void softmax_like(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, bool log,
                  const char* name) {
  visit<Kinds::Float>(in[0].dtype(), name, [&]<class T>() {
    const Tensor& x = in[0];
    Tensor& y = out[0];
    const Shape dims{a.dim};
    ReducePlan p = plan_of(x, dims), q = plan_of(y, dims);
    if (p.outputs == 0 || p.reduced == 0) return;
    const int device = x.device().index;
    detail::use_device(device);
    const T* xp = reinterpret_cast<const T*>(x.impl()->data());
    T* yp = reinterpret_cast<T*>(y.impl()->data());
    if (!softmax_fast<T>(xp, yp, p, q, log, detail::stream(device))) {
      const int threads = p.reduced >= 2048 ? 512 : p.reduced >= 256 ? 256 : 64;
      const int blocks = int(p.outputs < 65535 ? p.outputs : 65535);
      softmax_kernel<T, acc_t<T>>
          <<<blocks, threads, 0, detail::stream(device)>>>(xp, yp, p, q, log);
    }
    detail::check(cudaGetLastError(), name);
  });
}
void softmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  softmax_like(in, out, a, false, "softmax");
}
void log_softmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  softmax_like(in, out, a, true, "log_softmax");
}

}  // namespace

void register_softmax(KernelTable& t) {
  t[OpId::softmax] = softmax;
  t[OpId::log_softmax] = log_softmax;
}

}  // namespace ember::cuda
