// CUDA cross entropy of logits [N, C] against class targets [N]: a block a row (grid-stride over
// rows) reads the row once, each thread keeping a running max and sum of exp(x - max) (16-byte
// loads where the row is contiguous and aligned), merges them across the block, and writes the
// row's logsumexp and its loss lse - logit[target] (in double) to a scratch row; then one block
// sums the losses of the non-ignored rows in double and divides by their count (nan when there
// are none) into the loss's dtype. Types are the CPU kernel's: float for float32 and the half
// types, double for float64; a NaN max propagates. Logits and targets are read through their
// strides.
// A target neither in [0, C) nor equal to ignore_index is recorded as a fault (fault.cuh) under
// cross_entropy's name, as the CPU kernel names it, and its row does not read the logits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/make_tensor.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cross_entropy_grad.h"
#include "kernels/cuda/kernel_table.h"
#include "kernels/device_kernels.h"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

using In = std::span<const Tensor>;
using Out = std::span<Tensor>;

struct SumOp {
  template <class A> __device__ A identity() const { return A(0); }
  template <class A> __device__ A fold(A a, A b) const { return a + b; }
};
// Max that propagates NaN, as the CPU's ExtremeReducer.
struct MaxOp {
  template <class A> __device__ A identity() const { return A(-INFINITY); }
  template <class A>
  __device__ A fold(A a, A b) const {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? b : a;
  }
};

// Block-wide fold of one value per thread; every thread gets the result. blockDim.x is a
// multiple of 32.
template <class A, class Op>
__device__ A block_reduce(A v, Op op) {
  __shared__ alignas(16) unsigned char raw[33 * sizeof(A)];
  A* partial = reinterpret_cast<A*>(raw);
  for (int s = 16; s > 0; s >>= 1) v = op.fold(v, __shfl_xor_sync(0xffffffffu, v, s));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = int(blockDim.x >> 5);
    v = lane < warps ? partial[lane] : op.template identity<A>();
    for (int s = 16; s > 0; s >>= 1) v = op.fold(v, __shfl_xor_sync(0xffffffffu, v, s));
    if (lane == 0) partial[32] = v;
  }
  __syncthreads();
  v = partial[32];
  __syncthreads();  // partial is reused by the next call
  return v;
}

__device__ __forceinline__ bool bad_target(int64_t t, int64_t classes, int64_t ignore) {
  return t != ignore && (t < 0 || t >= classes);
}

template <class T, int V>
struct alignas(16) Chunk {
  T v[V];
};

// The running (max, sum of exp(x - max)) of a part of a row, merged with one more value or
// part. A max of -inf adds nothing (exp(-inf - -inf) would be NaN); a NaN max propagates, and
// the sum is then never read.
template <class C>
struct RunningLse {
  C m = -INFINITY, s = 0;
  __device__ __forceinline__ void merge(C m2, C s2) {
    const C mm = MaxOp{}.fold(m, m2);
    if (mm == -INFINITY) return;  // both parts are empty or all -inf
    s = (m == mm ? s : s * fn::ExpFtz{}(m - mm)) + (m2 == mm ? s2 : s2 * fn::ExpFtz{}(m2 - mm));
    m = mm;
  }
  __device__ __forceinline__ void add(C x) { merge(x, C(1)); }
};

// Adds a chunk of V values to a running pair: a larger max (or a NaN) rescales what was summed,
// then the chunk adds at the running max, one exp an element.
template <class T, class C, int V>
__device__ __forceinline__ void add_chunk(RunningLse<C>& run, const Chunk<T, V>& p) {
  C v[V];
  C m = -INFINITY;
#pragma unroll
  for (int i = 0; i < V; ++i) m = MaxOp{}.fold(m, v[i] = C(load(&p.v[i])));
  if (m != m || m > run.m) {
    run.s = run.m == -INFINITY ? C(0) : run.s * fn::ExpFtz{}(run.m - m);
    run.m = m;
  }
  if (run.m != -INFINITY) {
#pragma unroll
    for (int i = 0; i < V; ++i) run.s += fn::ExpFtz{}(v[i] - run.m);
  }
}

// Block-wide merge of the threads' running pairs; every thread gets the row's.
template <class C>
__device__ RunningLse<C> block_merge(RunningLse<C> r) {
  __shared__ C ms[32], ss[32];
  for (int k = 16; k > 0; k >>= 1)
    r.merge(__shfl_xor_sync(0xffffffffu, r.m, k), __shfl_xor_sync(0xffffffffu, r.s, k));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) ms[warp] = r.m, ss[warp] = r.s;
  __syncthreads();
  RunningLse<C> all;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) all.merge(ms[w], ss[w]);
  __syncthreads();  // the arrays are reused by the next row
  return all;
}

// Per row: lse[r] and, for a non-ignored target, row_loss[r] (NaN for a target out of range).
// One pass over the row: each thread keeps a running max and sum, rescaled when the max grows,
// reading 16 bytes at a time where the row is contiguous and aligned.
template <class T, class C>
__global__ void cross_entropy_rows(const T* x, int64_t row_stride, int64_t col_stride,
                                   const int64_t* t, int64_t t_stride, C* lse, int64_t lse_stride,
                                   double* row_loss, int64_t rows, int64_t classes, int64_t ignore,
                                   Fault* slot) {
  constexpr int V = 16 / sizeof(T);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * row_stride;
    RunningLse<C> run;
    int64_t done = 0;  // elements taken by the vector loop
    if (col_stride == 1 && reinterpret_cast<uintptr_t>(xr) % 16 == 0) {
      const int64_t chunks = classes / V;
      // U chunks a thread at a time, loaded before any is used: U loads in flight a thread
      // instead of one, which is what a row's read is limited by, not its exps.
      constexpr int U = 4;
      const int64_t grouped = chunks / (int64_t(U) * blockDim.x) * (int64_t(U) * blockDim.x);
      for (int64_t c = threadIdx.x; c < grouped; c += int64_t(U) * blockDim.x) {
        Chunk<T, V> p[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
          p[u] = *reinterpret_cast<const Chunk<T, V>*>(xr + (c + int64_t(u) * blockDim.x) * V);
#pragma unroll
        for (int u = 0; u < U; ++u) add_chunk<T, C, V>(run, p[u]);
      }
      for (int64_t c = grouped + threadIdx.x; c < chunks; c += blockDim.x)
        add_chunk<T, C, V>(run, *reinterpret_cast<const Chunk<T, V>*>(xr + c * V));
      done = chunks * V;
    }
    for (int64_t j = done + threadIdx.x; j < classes; j += blockDim.x)
      run.add(C(load(xr + j * col_stride)));
    run = block_merge(run);
    if (threadIdx.x == 0) {
      const C m = run.m;
      const C log_sum = fn::Log{}(run.s);
      const C l = isfinite(m) ? m + log_sum : m;
      lse[r * lse_stride] = l;
      const int64_t target = t[r * t_stride];
      double loss = 0;
      if (bad_target(target, classes, ignore)) {
        report_fault(slot, FaultKind::TargetOutOfRange, int32_t(OpId::cross_entropy), target,
                     classes, r);
        loss = NAN;
      } else if (target != ignore) {
        // (max - logit) + log(sum): exact up to the last rounding even when logits are large.
        const C xt = C(load(xr + target * col_stride));
        loss = isfinite(m) ? double((m - xt) + log_sum) : double(l - xt);
      }
      row_loss[r] = loss;
    }
  }
}

// One block: the mean of row_loss over rows whose target is not ignore_index.
template <class T>
__global__ void cross_entropy_mean(const double* row_loss, const int64_t* t, int64_t t_stride,
                                   int64_t rows, int64_t ignore, T* out) {
  double total = 0;
  int64_t count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    if (t[r * t_stride] == ignore) continue;
    total += row_loss[r];
    ++count;
  }
  total = block_reduce(total, SumOp{});
  count = block_reduce(count, SumOp{});
  // nan when every target is ignored (or there are no rows), as in PyTorch.
  if (threadIdx.x == 0) store(out, compute_t<T>(total / double(count)));
}

void cross_entropy(In in, Out out, const Attrs& a) {
  const Tensor& logits = in[0];
  const Tensor& targets = in[1];
  EMBER_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.dtype() == DType::Int64,
              "cross_entropy: the CUDA kernel takes logits [N, C] and int64 targets [N], got ",
              logits.shape_str(), " and ", dtype_name(targets.dtype()), " ",
              targets.shape_str());
  const int64_t rows = logits.sizes()[0], classes = logits.sizes()[1];
  const int64_t ignore = a.end;
  const int device = logits.device().index;
  detail::use_device(device);
  cudaStream_t stream = detail::stream(device);
  const int64_t* tp = static_cast<const int64_t*>(targets.impl()->data());
  const int64_t ts = targets.strides()[0];
  const Tensor row_loss = make_tensor({rows}, DType::Float64, logits.device());
  double* lp = static_cast<double*>(row_loss.impl()->data());
  visit<Kinds::Float>(logits.dtype(), "cross_entropy", [&]<class T>() {
    using C = compute_t<T>;
    if (rows > 0 && classes > 0) {
      const int threads = classes >= 2048 ? 512 : classes >= 256 ? 256 : 64;
      const int blocks = int(rows < 65535 ? rows : 65535);
      cross_entropy_rows<T, C><<<blocks, threads, 0, stream>>>(
          static_cast<const T*>(logits.impl()->data()), logits.strides()[0], logits.strides()[1],
          tp, ts, static_cast<C*>(out[1].impl()->data()), out[1].strides()[0], lp, rows, classes,
          ignore, detail::fault_slot(device));
      detail::check(cudaGetLastError(), "cross_entropy");
    }
  });
  // The loss in its own dtype: the logits' or, for half logits under autocast, float32.
  visit<Kinds::Float>(out[0].dtype(), "cross_entropy", [&]<class L>() {
    cross_entropy_mean<L><<<1, 512, 0, stream>>>(lp, tp, ts, rows, ignore,
                                                 static_cast<L*>(out[0].impl()->data()));
    detail::check(cudaGetLastError(), "cross_entropy");
  });
}

// cross_entropy_grad::run's kernel: a block a row at a time, each thread 16 bytes of logits at a
// step, two steps' loads before their math.
template <class T>
__global__ void cross_entropy_grad_rows(const T* x, const float* lse, int64_t lse_stride,
                                        const int64_t* t, int64_t t_stride, const float* scale,
                                        int64_t scale_stride, T* out, int64_t rows,
                                        int64_t classes) {
  constexpr int V = 16 / sizeof(T);
  const int64_t chunks = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float l = lse[r * lse_stride], s = scale[r * scale_stride];
    const int64_t target = t[r * t_stride];
    const Chunk<T, V>* xr = reinterpret_cast<const Chunk<T, V>*>(x + r * classes);
    Chunk<T, V>* orow = reinterpret_cast<Chunk<T, V>*>(out + r * classes);
    auto grad = [&](const Chunk<T, V>& p, int64_t c) {
      Chunk<T, V> o;
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float hot = c * V + i == target ? 1.f : 0.f;
        store(&o.v[i], (fn::ExpFtz{}(float(load(&p.v[i])) - l) - hot) * s);
      }
      orow[c] = o;
    };
    int64_t c = threadIdx.x;
    for (; c + blockDim.x < chunks; c += 2 * int64_t(blockDim.x)) {
      const Chunk<T, V> p0 = xr[c], p1 = xr[c + blockDim.x];
      grad(p0, c);
      grad(p1, c + blockDim.x);
    }
    if (c < chunks) grad(xr[c], c);
  }
}

}  // namespace

void register_losses(KernelTable& t) {
  t[OpId::cross_entropy] = cross_entropy;
}

}  // namespace ember::cuda

namespace ember::cross_entropy_grad {

bool run(const Tensor& logits, const Tensor& lse, const Tensor& targets, const Tensor& scale,
         const Tensor& out) {
  const DType dt = logits.dtype();
  if (dt != DType::BFloat16 && dt != DType::Float16) return false;
  const Device d = logits.device();
  if (d.type != DeviceType::CUDA || logits.dim() != 2 || !logits.is_contiguous() ||
      !out.defined() || out.dtype() != dt || out.device() != d || !out.is_contiguous() ||
      out.sizes() != logits.sizes())
    return false;
  const int64_t rows = logits.sizes()[0], classes = logits.sizes()[1];
  auto aligned = [](const Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.impl()->data()) % 16 == 0;
  };
  if (rows <= 0 || classes <= 0 || classes % 8 != 0 || !aligned(logits) || !aligned(out))
    return false;
  // The per-row values: [N] or [N, 1], read at r * their first stride.
  auto per_row = [&](const Tensor& t, DType want) {
    return t.defined() && t.dtype() == want && t.device() == d && t.dim() >= 1 &&
           t.dim() <= 2 && t.sizes()[0] == rows && (t.dim() == 1 || t.sizes()[1] == 1);
  };
  if (!per_row(lse, DType::Float32) || !per_row(targets, DType::Int64) ||
      !per_row(scale, DType::Float32))
    return false;
  const int64_t lse_stride = lse.strides()[0], targets_stride = targets.strides()[0],
                scale_stride = scale.strides()[0];
  const int device = d.index;
  cuda::detail::use_device(device);
  const cudaStream_t stream = cuda::detail::stream(device);
  const unsigned blocks = unsigned(rows < 65535 ? rows : 65535);
  auto launch = [&]<class T>() {
    cuda::cross_entropy_grad_rows<T><<<blocks, 256, 0, stream>>>(
        static_cast<const T*>(logits.impl()->data()), static_cast<const float*>(lse.impl()->data()),
        lse_stride, static_cast<const int64_t*>(targets.impl()->data()), targets_stride,
        static_cast<const float*>(scale.impl()->data()), scale_stride,
        static_cast<T*>(out.impl()->data()), rows, classes);
  };
  if (dt == DType::BFloat16)
    launch.template operator()<__nv_bfloat16>();
  else
    launch.template operator()<__half>();
  cuda::detail::check(cudaGetLastError(), "cross_entropy grad");
  return true;
}

}  // namespace ember::cross_entropy_grad
