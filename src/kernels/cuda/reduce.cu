// CUDA kernels of the reductions (sum, mean, amax, amin, var, std, logsumexp, argmax, argmin)
// over any set of dims, and of softmax and log_softmax. A block takes
// an output element (grid-stride over outputs): its threads stride over the reduced elements,
// each folding into a register, then the block combines the partials through warp shuffles and
// shared memory. Operands are read through their strides (views need no copies). Sums
// accumulate as the CPU kernels do: float for float32 and the half types, double for float64,
// int64 for integers; extremes propagate NaN.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <limits>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

template <class T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
template <> struct Acc<int32_t> { using type = int64_t; };
template <> struct Acc<int64_t> { using type = int64_t; };
template <class T> using acc_t = typename Acc<T>::type;

// Index spaces of one reduction: the kept dims (one output element each) and the reduced ones.
struct ReducePlan {
  int kept_ndim = 0, red_ndim = 0;
  int64_t kept_sizes[kMaxDims], kept_strides[kMaxDims];
  int64_t red_sizes[kMaxDims], red_strides[kMaxDims];
  int64_t outputs = 1, reduced = 1;
};

__device__ __forceinline__ int64_t offset_of(int64_t i, int nd, const int64_t* sizes,
                                             const int64_t* strides) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

struct SumOp {
  template <class A> __device__ A init() const { return A(0); }
  template <class A> __device__ A fold(A a, A b) const { return a + b; }
};
template <bool Max>
struct ExtremeOp {
  template <class A>
  __device__ A init() const {
    if constexpr (std::is_floating_point_v<A>) return Max ? A(-INFINITY) : A(INFINITY);
    else return Max ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
  template <class A>
  __device__ A fold(A a, A b) const {
    if constexpr (std::is_floating_point_v<A>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return (Max ? a < b : b < a) ? b : a;
  }
};

// Block-wide fold of one value per thread; thread 0 gets the result.
template <class A, class Op>
__device__ A block_fold(A v, Op op) {
  __shared__ alignas(16) unsigned char raw[32 * sizeof(A)];
  A* partial = reinterpret_cast<A*>(raw);
  for (int s = 16; s > 0; s >>= 1) v = op.fold(v, __shfl_down_sync(0xffffffffu, v, s));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    v = lane < warps ? partial[lane] : op.template init<A>();
    for (int s = 16; s > 0; s >>= 1) v = op.fold(v, __shfl_down_sync(0xffffffffu, v, s));
  }
  __syncthreads();  // partial is reused by the next output of this block
  return v;
}

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

ReducePlan plan_of(const Tensor& x, const Shape& dims) {
  ReducePlan p;
  EMBER_CHECK(x.dim() <= kMaxDims, "reduction: CUDA kernels take up to ", kMaxDims,
              " dims, got shape ", x.shape_str());
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool red = false;
    for (int64_t r : dims) red |= r == d;
    const int64_t size = x.sizes()[size_t(d)], stride = x.strides()[size_t(d)];
    if (red) {
      p.red_sizes[p.red_ndim] = size;
      p.red_strides[p.red_ndim++] = stride;
      p.reduced *= size;
    } else {
      p.kept_sizes[p.kept_ndim] = size;
      p.kept_strides[p.kept_ndim++] = stride;
      p.outputs *= size;
    }
  }
  return p;
}

template <class T, class Op>
void launch(const char* name, const Tensor& x, Tensor& out, const Shape& dims, Op op,
            bool divide) {
  ReducePlan p = plan_of(x, dims);
  if (p.outputs == 0) return;
  const int device = x.device().index;
  detail::use_device(device);
  const T* in = reinterpret_cast<const T*>(static_cast<const char*>(x.impl()->storage->data) +
                                           x.storage_offset() * int64_t(sizeof(T)));
  T* o = reinterpret_cast<T*>(static_cast<char*>(out.impl()->storage->data) +
                              out.storage_offset() * int64_t(sizeof(T)));
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
template <class T, class A, bool Max>
__global__ void arg_kernel(const T* in, int64_t* out, ReducePlan p) {
  __shared__ A sv[32];
  __shared__ int64_t si[32];
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    const T* x = in + offset_of(o, p.kept_ndim, p.kept_sizes, p.kept_strides);
    A bv = 0;
    int64_t bi = INT64_MAX;
    for (int64_t r = threadIdx.x; r < p.reduced; r += blockDim.x) {
      const A v = A(load(x + offset_of(r, p.red_ndim, p.red_sizes, p.red_strides)));
      if (bi == INT64_MAX || better<Max>(v, r, bv, bi)) {
        bv = v;
        bi = r;
      }
    }
    auto fold = [&]() {
      for (int s = 16; s > 0; s >>= 1) {
        const A v = __shfl_down_sync(0xffffffffu, bv, s);
        const int64_t i = __shfl_down_sync(0xffffffffu, bi, s);
        if (i != INT64_MAX && (bi == INT64_MAX || better<Max>(v, i, bv, bi))) {
          bv = v;
          bi = i;
        }
      }
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
      if (lane == 0) out[o] = bi;
    }
    __syncthreads();
  }
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
    const int threads = p.reduced >= 4096 ? 512 : p.reduced >= 256 ? 256 : 64;
    const int blocks = int(p.outputs < 65535 ? p.outputs : 65535);
    using A = std::conditional_t<std::is_same_v<T, double>, double,
                                 std::conditional_t<std::is_integral_v<T>, int64_t, float>>;
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

// softmax / log_softmax along one dim: a block a row, three passes over it (max, sum of
// exp(x - max), write), as the CPU kernel computes it.
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
    const int threads = p.reduced >= 2048 ? 512 : p.reduced >= 256 ? 256 : 64;
    const int blocks = int(p.outputs < 65535 ? p.outputs : 65535);
    softmax_kernel<T, acc_t<T>><<<blocks, threads, 0, detail::stream(device)>>>(xp, yp, p, q, log);
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

void register_reductions(KernelTable& t) {
  t[OpId::var] = var;
  t[OpId::std_dev] = std_dev;
  t[OpId::logsumexp] = logsumexp;
  t[OpId::argmax] = argmax;
  t[OpId::argmin] = argmin;
  t[OpId::softmax] = softmax;
  t[OpId::log_softmax] = log_softmax;
  t[OpId::sum] = sum;
  t[OpId::mean] = mean;
  t[OpId::amax] = amax;
  t[OpId::amin] = amin;
}

}  // namespace ember::cuda
