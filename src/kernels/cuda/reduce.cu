// CUDA kernels of the reductions (sum, mean, amax, amin, var, std, logsumexp, argmax, argmin)
// over any set of dims. A block takes
// an output element (grid-stride over outputs): its threads stride over the reduced elements,
// each folding into a register, then the block combines the partials through warp shuffles and
// shared memory. Operands are read through their strides (views need no copies), the kept and
// the reduced dims each merged where they step as one; columns and short rows have their own
// kernels (below); argmax and argmin over few long rows (a vocabulary's logits) split each row
// over many blocks, the last to finish joining them (arg_split_kernel). Sums
// accumulate as the CPU kernels do: float for float32 and the half types, double for float64,
// int64 for integers; extremes propagate NaN. Softmax and log_softmax: softmax.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "core/env.h"
#include "core/make_tensor.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/column_fold.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/reduce_plan.cuh"
#include "kernels/cuda/row_registers.cuh"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

using namespace reduction;

// Mean divides by the count: `divide` is true for mean.
template <class T, class A, class Op>
__global__ void reduce_kernel(const T* in, T* out, ReducePlan p, Op op, bool divide) {
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    const int64_t base = offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
    A acc = op.template init<A>();
    for (int64_t r = threadIdx.x; r < p.reduced; r += blockDim.x)
      acc = op.fold(acc, A(load(in + base + offset_of(r, p.red_ndim, p.red_sizes, p.red_strides))));
    acc = block_fold<A>(acc, op);
    if (threadIdx.x == 0) {
      if (divide) acc = acc / A(p.reduced);  // 0 / 0: nan, as on the CPU
      store(out + o, acc);
    }
  }
}

// Merges neighbouring dims of one list (kept or reduced) that step as one (stride[d-1] ==
// stride[d] * size[d]) and drops dims of size 1: fewer divisions in offset_of. The linear
// order of the outputs and of the reduced elements is unchanged.
void coalesce_dims(int& nd, int64_t* sizes, int64_t* strides) {
  int out = 0;
  for (int d = 0; d < nd; ++d) {
    if (sizes[d] == 1) continue;
    if (out > 0 && strides[out - 1] == strides[d] * sizes[d]) {
      sizes[out - 1] *= sizes[d];
      strides[out - 1] = strides[d];
      continue;
    }
    sizes[out] = sizes[d];
    strides[out++] = strides[d];
  }
  nd = out;
}

// Column reductions: the innermost kept dim is contiguous and the reduced dims lie outside it
// (bias and norm-weight grads: [rows, n] summed over rows). A block-per-output kernel would read
// a column per warp, one element from each of 32 rows; here a warp reads 32 neighbouring
// outputs' elements of one row instead. A block covers 32 outputs x 8 row lanes, `splits` blocks
// share the rows of each column group and leave partials (in the accumulation type) for a
// second pass, which folds them in a fixed order, so results do not depend on timing.
constexpr int kColumns = 32, kRowLanes = 8;

template <class T, class A, class Op>
__global__ void column_partial_kernel(const T* in, A* partial, ReducePlan p, Op op) {
  __shared__ A tile[kRowLanes][kColumns + 1];
  const int64_t o = int64_t(blockIdx.x) * kColumns + threadIdx.x;
  A acc = op.template init<A>();
  if (o < p.outputs) {
    const T* base = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
    const int64_t step = int64_t(gridDim.y) * kRowLanes;
    for (int64_t r = int64_t(blockIdx.y) * kRowLanes + threadIdx.y; r < p.reduced; r += step)
      acc = op.fold(acc, A(load(base + offset_of(r, p.red_ndim, p.red_sizes, p.red_strides))));
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < p.outputs) {
    for (int k = 1; k < kRowLanes; ++k) acc = op.fold(acc, tile[k][threadIdx.x]);
    partial[int64_t(blockIdx.y) * p.outputs + o] = acc;
  }
}

// The same over a plain [rows, n] matrix (one kept dim of unit stride, one reduced dim, rows
// 16-byte aligned, n a multiple of V): a thread takes V neighbouring columns through 16-byte
// loads, four rows in flight at a time, so a warp reads 512 contiguous bytes of a row.
template <class T, int V>
struct alignas(16) ColumnChunk {
  T v[V];
};

template <class T, class A, class Op, int V>
__global__ void column_partial_vec_kernel(const T* in, A* partial, int64_t n, int64_t rows,
                                          int64_t row_stride, Op op) {
  __shared__ A tile[kRowLanes][kColumns * V + 1];
  const int64_t c0 = (int64_t(blockIdx.x) * kColumns + threadIdx.x) * V;
  A acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = op.template init<A>();
  if (c0 < n) {
    const int64_t step = int64_t(gridDim.y) * kRowLanes;
    int64_t r = int64_t(blockIdx.y) * kRowLanes + threadIdx.y;
    for (; r + 3 * step < rows; r += 4 * step) {
      ColumnChunk<T, V> p[4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        p[u] = *reinterpret_cast<const ColumnChunk<T, V>*>(in + (r + u * step) * row_stride + c0);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = op.fold(acc[i], A(load(&p[u].v[i])));
    }
    for (; r < rows; r += step) {
      const ColumnChunk<T, V> p = *reinterpret_cast<const ColumnChunk<T, V>*>(in + r * row_stride + c0);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] = op.fold(acc[i], A(load(&p.v[i])));
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) tile[threadIdx.y][threadIdx.x * V + i] = acc[i];
  __syncthreads();
  if (threadIdx.y == 0 && c0 < n) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      A a = acc[i];
      for (int k = 1; k < kRowLanes; ++k) a = op.fold(a, tile[k][threadIdx.x * V + i]);
      partial[int64_t(blockIdx.y) * n + c0 + i] = a;
    }
  }
}

bool is_column_reduction(const ReducePlan& p) {
  if (p.kept_ndim == 0 || p.red_ndim == 0 || p.kept_strides[p.kept_ndim - 1] != 1) return false;
  for (int d = 0; d < p.red_ndim; ++d)
    if (p.red_strides[d] == 1 && p.red_sizes[d] > 1) return false;
  return p.reduced >= kRowLanes && p.kept_sizes[p.kept_ndim - 1] >= kColumns / 2;
}

template <class T, class A, class Op>
void launch_columns(const T* in, T* out, const ReducePlan& p, Op op, bool divide, Device dev,
                    const char* name) {
  static const int sms = [] {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
    return n > 0 ? n : 80;
  }();
  // A plain [rows, n] matrix with aligned rows takes the vector kernel.
  constexpr int V = int(16 / sizeof(T));
  const bool vec = p.kept_ndim == 1 && p.red_ndim == 1 && p.outputs % V == 0 &&
                   reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                   (p.red_strides[0] * int64_t(sizeof(T))) % 16 == 0;
  const int64_t columns = vec ? int64_t(kColumns) * V : kColumns;
  const int64_t groups = (p.outputs + columns - 1) / columns;
  // Enough blocks to fill the GPU a few times over, each with at least 8 rows a lane.
  const int64_t want = (int64_t(sms) * 8 + groups - 1) / groups;
  const int64_t most = std::max<int64_t>(1, p.reduced / (kRowLanes * 8));
  const int splits = int(std::min<int64_t>({want, most, 1024}));
  constexpr DType acc_dtype = std::is_same_v<A, double>    ? DType::Float64
                              : std::is_same_v<A, int64_t> ? DType::Int64
                                                           : DType::Float32;
  Tensor partial = make_tensor({int64_t(splits), p.outputs}, acc_dtype, dev);
  A* pp = static_cast<A*>(partial.impl()->data());
  cudaStream_t s = detail::stream(dev.index);
  const dim3 grid{unsigned(groups), unsigned(splits)}, block{kColumns, kRowLanes};
  if (vec)
    column_partial_vec_kernel<T, A, Op, V><<<grid, block, 0, s>>>(in, pp, p.outputs, p.reduced,
                                                                  p.red_strides[0], op);
  else
    column_partial_kernel<T, A, Op><<<grid, block, 0, s>>>(in, pp, p, op);
  detail::check(cudaGetLastError(), name);
  fold_partial_rows(pp, splits, p.outputs, out, out, 1, op, divide ? p.reduced : 0, s);
  detail::check(cudaGetLastError(), name);
}

// Short contiguous rows (the sum in softmax's grad: [.., 256] rows by the million): a warp a row
// instead of a block, lanes striding the row, a shuffle fold.
constexpr int kShortRow = 1024;

template <class T, class A, class Op>
__global__ void short_rows_kernel(const T* in, T* out, ReducePlan p, Op op, bool divide) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  const int64_t n = p.reduced;
  for (int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; o < p.outputs;
       o += warps) {
    const T* row = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
    A acc = op.template init<A>();
    for (int64_t r = lane; r < n; r += 32) acc = op.fold(acc, A(load(row + r)));
    for (int s = 16; s > 0; s >>= 1) acc = op.fold(acc, __shfl_down_sync(0xffffffffu, acc, s));
    if (lane == 0) {
      if (divide) acc = acc / A(n);
      store(out + o, acc);
    }
  }
}

bool is_short_row_reduction(const ReducePlan& p) {
  int reduced_dims = 0, unit = -1;
  for (int d = 0; d < p.red_ndim; ++d) {
    if (p.red_sizes[d] == 1) continue;
    ++reduced_dims;
    unit = d;
  }
  return reduced_dims == 1 && p.red_strides[unit] == 1 && p.reduced <= kShortRow &&
         p.outputs >= 1024;
}

template <class T, class Op>
void launch(const char* name, const Tensor& x, Tensor& out, const Shape& dims, Op op,
            bool divide) {
  ReducePlan p = plan_of(x, dims);
  if (p.outputs == 0) return;
  coalesce_dims(p.kept_ndim, p.kept_sizes, p.kept_strides);
  coalesce_dims(p.red_ndim, p.red_sizes, p.red_strides);
  const int device = x.device().index;
  detail::use_device(device);
  const T* in = reinterpret_cast<const T*>(static_cast<const char*>(x.impl()->storage->data) +
                                           x.storage_offset() * int64_t(sizeof(T)));
  T* o = reinterpret_cast<T*>(static_cast<char*>(out.impl()->storage->data) +
                              out.storage_offset() * int64_t(sizeof(T)));
  if (is_column_reduction(p) && out.is_contiguous()) {
    launch_columns<T, acc_t<T>, Op>(in, o, p, op, divide, x.device(), name);
    return;
  }
  if (is_short_row_reduction(p)) {
    const int64_t blocks = std::min<int64_t>((p.outputs + 7) / 8, int64_t(1) << 20);
    short_rows_kernel<T, acc_t<T>, Op><<<unsigned(blocks), 256, 0, detail::stream(device)>>>(
        in, o, p, op, divide);
    detail::check(cudaGetLastError(), name);
    return;
  }
  const int threads = p.reduced >= 4096 ? 512 : p.reduced >= 256 ? 256 : 64;
  const int blocks = int(p.outputs < 65535 ? p.outputs : 65535);
  reduce_kernel<T, acc_t<T>, Op><<<blocks, threads, 0, detail::stream(device)>>>(in, o, p, op,
                                                                                divide);
  detail::check(cudaGetLastError(), name);
}

void sum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::Numeric>(in[0].dtype(), "sum", [&]<class T>() {
    launch<T>("sum", in[0], out[0], a.dims, SumOp{}, false);
  });
}
void mean(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::Float>(in[0].dtype(), "mean", [&]<class T>() {
    launch<T>("mean", in[0], out[0], a.dims, SumOp{}, true);
  });
}
void amax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::Numeric>(in[0].dtype(), "amax", [&]<class T>() {
    launch<T>("amax", in[0], out[0], a.dims, ExtremeOp<true>{}, false);
  });
}
void amin(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::Numeric>(in[0].dtype(), "amin", [&]<class T>() {
    launch<T>("amin", in[0], out[0], a.dims, ExtremeOp<false>{}, false);
  });
}

// Two passes over each output's elements, as the CPU kernels: var and std (the mean, then the
// squared deviations; divisor max(0, N - correction)) and logsumexp (the max, then the sum of
// exp(x - max); an infinite or NaN max is the result itself).
enum class TwoPass { Var, Std, LogSumExp };
template <class T, class A>
__global__ void two_pass_kernel(const T* in, T* out, ReducePlan p, TwoPass kind, double correction) {
  __shared__ A shared;
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    const T* x = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
    auto at = [&](int64_t r) { return A(load(x + offset_of(r, p.red_ndim, p.red_sizes, p.red_strides))); };
    A first;
    if (kind == TwoPass::LogSumExp) {
      const ExtremeOp<true> max_op;
      A m = max_op.template init<A>();
      for (int64_t r = threadIdx.x; r < p.reduced; r += blockDim.x) m = max_op.fold(m, at(r));
      first = block_fold<A>(m, max_op);
    } else {
      A sum = 0;
      for (int64_t r = threadIdx.x; r < p.reduced; r += blockDim.x) sum += at(r);
      first = block_fold<A>(sum, SumOp{}) / A(p.reduced);
    }
    if (threadIdx.x == 0) shared = first;
    __syncthreads();
    first = shared;
    A acc = 0;
    for (int64_t r = threadIdx.x; r < p.reduced; r += blockDim.x) {
      if (kind == TwoPass::LogSumExp) {
        acc += fn::ExpFtz{}(at(r) - first);
      } else {
        const A d = at(r) - first;
        acc += d * d;
      }
    }
    acc = block_fold<A>(acc, SumOp{});
    if (threadIdx.x == 0) {
      A v;
      if (kind == TwoPass::LogSumExp) {
        v = isfinite(first) ? first + fn::Log{}(acc) : first;
      } else {
        const double n = double(p.reduced) - correction;
        v = acc / A(n > 0 ? n : 0.0);
        if (kind == TwoPass::Std) v = fn::Sqrt{}(v);
      }
      store(out + o, v);
    }
    __syncthreads();
  }
}

void two_pass(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, TwoPass kind,
              const char* name) {
  visit<Kinds::Float>(in[0].dtype(), name, [&]<class T>() {
    ReducePlan p = plan_of(in[0], a.dims);
    if (p.outputs == 0) return;
    const int device = in[0].device().index;
    detail::use_device(device);
    const T* xp = reinterpret_cast<const T*>(in[0].impl()->data());
    T* op = reinterpret_cast<T*>(out[0].impl()->data());
    const int threads = p.reduced >= 4096 ? 512 : p.reduced >= 256 ? 256 : 64;
    const int blocks = int(p.outputs < 65535 ? p.outputs : 65535);
    two_pass_kernel<T, acc_t<T>><<<blocks, threads, 0, detail::stream(device)>>>(xp, op, p, kind,
                                                                                a.value);
    detail::check(cudaGetLastError(), name);
  });
}
void var(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  two_pass(in, out, a, TwoPass::Var, "var");
}
void std_dev(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  two_pass(in, out, a, TwoPass::Std, "std");
}
void logsumexp(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  two_pass(in, out, a, TwoPass::LogSumExp, "logsumexp");
}

// argmax / argmin: (value, position) pairs folded per thread, then across the block; the
// first position of the extreme wins, a NaN counting as the extreme (its first position).
template <bool Max, class A>
__device__ __forceinline__ bool better(A v, int64_t i, A bv, int64_t bi) {
  const bool vn = v != v, bn = bv != bv;
  if (vn || bn) return vn && (!bn || i < bi);
  if (v == bv) return i < bi;
  return Max ? v > bv : v < bv;
}
// A thread's extreme so far, (value, position): position INT64_MAX before it has one. take()
// keeps the better of it and (v, r), where r is a position (INT64_MAX: none, nothing taken).
template <class A, bool Max>
struct ArgBest {
  A v = 0;
  int64_t i = INT64_MAX;
  __device__ __forceinline__ void take(A value, int64_t r) {
    if (r != INT64_MAX && (i == INT64_MAX || better<Max>(value, r, v, i))) {
      v = value;
      i = r;
    }
  }
};

// Folds each thread's (value, position) over the block: the extreme in thread 0's *v_out and
// *i_out (position INT64_MAX where no thread had one). sv and si hold 32 entries in shared
// memory. `better` is a total order, so the fold's shape does not change the result.
template <class A, bool Max>
__device__ void block_fold_arg(A bv, int64_t bi, A* sv, int64_t* si, A* v_out, int64_t* i_out) {
  auto fold = [&]() {
    ArgBest<A, Max> best{bv, bi};
    for (int s = 16; s > 0; s >>= 1)
      best.take(__shfl_down_sync(0xffffffffu, best.v, s), __shfl_down_sync(0xffffffffu, best.i, s));
    bv = best.v;
    bi = best.i;
  };
  fold();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    bv = lane < warps ? sv[lane] : A(0);
    bi = lane < warps ? si[lane] : INT64_MAX;
    fold();
    if (lane == 0) {
      *v_out = bv;
      *i_out = bi;
    }
  }
  __syncthreads();
}

// The extreme of row x's positions [begin, end) over the block: its (value, position) in
// thread 0 (position INT64_MAX for an empty range). sv and si hold 32 entries in shared memory.
template <class T, class A, bool Max>
__device__ void block_arg(const T* x, const ReducePlan& p, int64_t begin, int64_t end, A* sv,
                          int64_t* si, A* v_out, int64_t* i_out) {
  ArgBest<A, Max> best;
  // kUnroll loads in flight a thread before their compares: a long row (a vocabulary's
  // logits) would otherwise wait on one load at a time. The last pass is predicated, so it
  // too is one round of loads.
  constexpr int kUnroll = 8;
  const int64_t step = blockDim.x;
  for (int64_t r = begin + threadIdx.x; r < end; r += kUnroll * step) {
    A v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t ru = r + u * step;
      v[u] = ru < end ? A(load(x + offset_of(ru, p.red_ndim, p.red_sizes, p.red_strides))) : A(0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (r + u * step < end) best.take(v[u], r + u * step);
  }
  block_fold_arg<A, Max>(best.v, best.i, sv, si, v_out, i_out);
}

template <class T, class A, bool Max>
__global__ void __launch_bounds__(1024) arg_kernel(const T* in, int64_t* out, ReducePlan p) {
  __shared__ A sv[32];
  __shared__ int64_t si[32];
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    const T* x = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
    A v;
    int64_t i;
    block_arg<T, A, Max>(x, p, 0, p.reduced, sv, si, &v, &i);
    if (threadIdx.x == 0) out[o] = i;
  }
}

// A value another block of this launch wrote, read from L2 rather than this SM's L1.
template <class A>
__device__ __forceinline__ A ld_past_l1(const A* p) {
  if constexpr (std::is_integral_v<A>)
    return A(__ldcg(reinterpret_cast<const long long*>(p)));
  else
    return __ldcg(p);
}

// Few long rows (a decode step's logits): each row split over `splits` blocks of `chunk`
// positions, each writing its extreme to (pv, pi); the last of a row's blocks to finish
// (counted in the device's counters, set back to 0 after) folds the splits in order. Launched
// after the product that writes the logits (launch.cuh): its blocks wait for it first.
template <class T, class A, bool Max>
__global__ void __launch_bounds__(1024)
    arg_split_kernel(const T* in, int64_t* out, ReducePlan p, int64_t chunk, int splits, A* pv,
                     int64_t* pi, int* counters) {
  __shared__ A sv[32];
  __shared__ int64_t si[32];
  __shared__ bool last;
  const int64_t o = blockIdx.x / splits;
  const int s = int(blockIdx.x % splits);
  const T* x = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
  const int64_t begin = s * chunk, end = begin + chunk < p.reduced ? begin + chunk : p.reduced;
  A v;
  int64_t i;
  attn::wait_for_prior_grids();
  block_arg<T, A, Max>(x, p, begin, end, sv, si, &v, &i);
  if (threadIdx.x == 0) {
    pv[o * splits + s] = v;
    pi[o * splits + s] = i;
    last = attn::count_in(&counters[o]) == splits - 1;  // releases them, acquires the others'
  }
  __syncthreads();
  if (!last) return;
  // The row's splits, a thread each, folded over the block (they were written by other
  // blocks of this launch: read past the SM's cache).
  ArgBest<A, Max> best;
  for (int k = threadIdx.x; k < splits; k += blockDim.x)
    best.take(ld_past_l1(pv + o * splits + k), ld_past_l1(pi + o * splits + k));
  block_fold_arg<A, Max>(best.v, best.i, sv, si, &v, &i);
  if (threadIdx.x == 0) {
    out[o] = i;
    counters[o] = 0;  // zero at rest, for the next launch
  }
}

// A row of contiguous elements a block (a decode step's logits), read in 16-byte vectors:
// each thread loads its up to kArgVectorLoads vectors at once (one round of memory latency for
// a row of up to kArgVectorLoads * 1024 vectors), folds their elements, then the block folds
// the threads' (block_fold_arg: `better` is a total order, so the result is the split kernel's).
// Rows start on 16 bytes; the elements past the last whole vector are read one at a time.
constexpr int kArgVectorLoads = 8;
// Element e of a 16-byte vector of floating-point T, widened to A (by value from registers: an
// element pointer into the vector would put it in local memory).
template <class T, class A>
__device__ __forceinline__ A vector_element(const uint4& q, int e) {
  const unsigned w[4] = {q.x, q.y, q.z, q.w};
  if constexpr (sizeof(T) == 2) {
    const unsigned bits = (w[e / 2] >> (16 * (e % 2))) & 0xFFFFu;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return A(__uint_as_float(bits << 16));
    else return A(__half2float(__ushort_as_half(static_cast<unsigned short>(bits))));
  } else if constexpr (sizeof(T) == 4) {
    return A(__uint_as_float(w[e]));
  } else {
    return A(__longlong_as_double(static_cast<long long>(
        (static_cast<unsigned long long>(w[2 * e + 1]) << 32) | w[2 * e])));
  }
}
template <class T, class A, bool Max>
__global__ void __launch_bounds__(1024) arg_vector_kernel(const T* in, int64_t* out, ReducePlan p) {
  __shared__ A sv[32];
  __shared__ int64_t si[32];
  constexpr int V = 16 / int(sizeof(T));
  const int64_t o = blockIdx.x, n = p.reduced, vecs = n / V, step = blockDim.x;
  const T* x = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
  attn::wait_for_prior_grids();
  uint4 buf[kArgVectorLoads];
#pragma unroll
  for (int u = 0; u < kArgVectorLoads; ++u) {
    const int64_t i = threadIdx.x + u * step;
    if (i < vecs) buf[u] = reinterpret_cast<const uint4*>(x)[i];
  }
  ArgBest<A, Max> best;
#pragma unroll
  for (int u = 0; u < kArgVectorLoads; ++u) {
    const int64_t i = threadIdx.x + u * step;
    if (i < vecs)
#pragma unroll
      for (int e = 0; e < V; ++e) best.take(vector_element<T, A>(buf[u], e), i * V + e);
  }
  for (int64_t r = vecs * V + threadIdx.x; r < n; r += step) best.take(A(load(x + r)), r);
  A v;
  int64_t i;
  block_fold_arg<A, Max>(best.v, best.i, sv, si, &v, &i);
  if (threadIdx.x == 0) out[o] = i;
}

// Contiguous floating-point rows of up to kArgVectorLoads * 1024 vectors take arg_vector_kernel,
// a block a row, instead of the split kernel or the strided one, unless EMBER_ARGMAX_VECTOR=0.
// Read once.
bool arg_vectors() {
  static const bool on = env_switch("EMBER_ARGMAX_VECTOR", true);
  return on;
}

template <bool Max>
void arg_extreme(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a,
                 const char* name) {
  visit<Kinds::Numeric>(in[0].dtype(), name, [&]<class T>() {
    ReducePlan p = plan_of(in[0], a.dims);
    if (p.outputs == 0) return;
    const int device = in[0].device().index;
    detail::use_device(device);
    const T* xp = reinterpret_cast<const T*>(in[0].impl()->data());
    int64_t* op = reinterpret_cast<int64_t*>(out[0].impl()->data());
    using A = std::conditional_t<std::is_same_v<T, double>, double,
                                 std::conditional_t<std::is_integral_v<T>, int64_t, float>>;
    if constexpr (std::is_floating_point_v<A>) {
      // Contiguous rows starting on 16 bytes, one round of vector loads each.
      constexpr int64_t V = 16 / int64_t(sizeof(T));
      bool rows_aligned = arg_vectors() && reinterpret_cast<uintptr_t>(xp) % 16 == 0;
      for (int d = 0; rows_aligned && d < p.kept_ndim; ++d)
        rows_aligned = (p.kept_strides[d] * int64_t(sizeof(T))) % 16 == 0;
      if (rows_aligned && p.red_ndim == 1 && p.red_strides[0] == 1 && rows_aligned &&
          p.reduced <= 1024 * kArgVectorLoads * V && p.outputs <= 65535) {
        detail::launch_after(arg_vector_kernel<T, A, Max>, dim3(unsigned(p.outputs)), dim3(1024),
                             0, detail::stream(device), name, xp, op, p);
        return;
      }
    }
    // Few rows much longer than a block takes well: split each over blocks of kChunk
    // positions, so that the row is read by many multiprocessors instead of one.
    constexpr int64_t kChunk = 2048, kMaxSplits = 128;  // 2048: 8 loads a thread of 256
    const int64_t splits = std::min<int64_t>((p.reduced + kChunk - 1) / kChunk, kMaxSplits);
    if (splits >= 4 && p.outputs * splits <= 1024 && p.outputs <= detail::kCounters) {
      const int64_t chunk = (p.reduced + splits - 1) / splits;
      const DType vt = std::is_same_v<A, double> ? DType::Float64
                       : std::is_integral_v<A>   ? DType::Int64
                                                 : DType::Float32;
      const Tensor pv = make_tensor({p.outputs * splits}, vt, in[0].device()),
                   pi = make_tensor({p.outputs * splits}, DType::Int64, in[0].device());
      detail::launch_after(arg_split_kernel<T, A, Max>, dim3(unsigned(p.outputs * splits)),
                           dim3(256), 0, detail::stream(device), name, xp, op, p, chunk,
                           int(splits), reinterpret_cast<A*>(pv.impl()->data()),
                           reinterpret_cast<int64_t*>(pi.impl()->data()),
                           detail::counters(device));
      return;
    }
    const int threads = p.reduced >= 16384 ? 1024 : p.reduced >= 4096 ? 512
                        : p.reduced >= 256 ? 256 : 64;
    const int blocks = int(p.outputs < 65535 ? p.outputs : 65535);
    arg_kernel<T, A, Max><<<blocks, threads, 0, detail::stream(device)>>>(xp, op, p);
    detail::check(cudaGetLastError(), name);
  });
}
void argmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  arg_extreme<true>(in, out, a, "argmax");
}
void argmin(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  arg_extreme<false>(in, out, a, "argmin");
}

}  // namespace

void register_reductions(KernelTable& t) {
  t[OpId::var] = var;
  t[OpId::std_dev] = std_dev;
  t[OpId::logsumexp] = logsumexp;
  t[OpId::argmax] = argmax;
  t[OpId::argmin] = argmin;
  t[OpId::sum] = sum;
  t[OpId::mean] = mean;
  t[OpId::amax] = amax;
  t[OpId::amin] = amin;
}

}  // namespace ember::cuda
