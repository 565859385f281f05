// What the CUDA reductions (reduce.cu) and softmax (softmax.cu) share: the accumulation type,
// a reduction's index spaces (kept and reduced dims) and their offsets, the extreme fold and a
// block-wide fold.
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "ember/tensor.h"
#include "kernels/cuda/elementwise.cuh"

namespace ember::cuda::reduction {

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

// The offset of element i of a (sizes, strides) space of nd dims; i is below the space's size,
// so the outermost dim needs no division (a one-dim space none at all).
__device__ __forceinline__ int64_t offset_of(int64_t i, int nd, const int64_t* sizes,
                                             const int64_t* strides) {
  int64_t off = 0;
  for (int d = nd - 1; d > 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return nd > 0 ? off + i * strides[0] : 0;
}

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
__device__ inline A block_fold(A v, Op op) {
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

inline ReducePlan plan_of(const Tensor& x, const Shape& dims) {
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

}  // namespace ember::cuda::reduction
