// The second pass of the column reductions (bias and norm-weight grads, the column sums): fold
// `splits` rows of partials [splits, n] (in the accumulation type A) into n results of type T.
// A block covers 32 columns with 16 row lanes, each lane folding every 16th partial row of its
// column; lane 0 then folds the lanes' results in lane order. The order is fixed, so results do
// not depend on timing, and a column's hundreds of partials are read by 16 threads at once (a
// thread a column waited on each load in turn). blockIdx.y picks one of up to two stacked sets
// of partials (set s at partial + s * splits * n, written to out[s]).
#pragma once
#include <cstdint>

#include "kernels/cuda/elementwise.cuh"

namespace ember::cuda {

constexpr int kFoldColumns = 32, kFoldLanes = 16;

struct FoldSum {
  template <class A> __device__ A init() const { return A(0); }
  template <class A> __device__ A fold(A a, A b) const { return a + b; }
};

// divisor > 0: each result is divided by it (a mean).
template <class A, class T, class Op>
__global__ void fold_partial_rows_kernel(const A* partial, int splits, int64_t n, T* out0,
                                         T* out1, Op op, int64_t divisor) {
  __shared__ A tile[kFoldLanes][kFoldColumns + 1];
  const A* part = partial + int64_t(blockIdx.y) * splits * n;
  T* out = blockIdx.y == 0 ? out0 : out1;
  const int64_t c = int64_t(blockIdx.x) * kFoldColumns + threadIdx.x;
  A acc = op.template init<A>();
  if (c < n) {
#pragma unroll 4
    for (int s = threadIdx.y; s < splits; s += kFoldLanes)
      acc = op.fold(acc, part[int64_t(s) * n + c]);
  }
  tile[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    for (int k = 1; k < kFoldLanes; ++k) acc = op.fold(acc, tile[k][threadIdx.x]);
    if (divisor > 0) acc = acc / A(divisor);
    store(out + c, acc);
  }
}

// Launches the fold of `sets` (1 or 2) stacked partial sets on `stream`.
template <class A, class T, class Op>
void fold_partial_rows(const A* partial, int splits, int64_t n, T* out0, T* out1, int sets,
                       Op op, int64_t divisor, cudaStream_t stream) {
  const dim3 grid{unsigned((n + kFoldColumns - 1) / kFoldColumns), unsigned(sets)};
  const dim3 block{kFoldColumns, kFoldLanes};
  fold_partial_rows_kernel<A, T, Op><<<grid, block, 0, stream>>>(partial, splits, n, out0, out1,
                                                                  op, divisor);
}

}  // namespace ember::cuda
