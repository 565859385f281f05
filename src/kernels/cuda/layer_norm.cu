// CUDA layer_norm forward: the mean, then the variance around it (two passes, as the CPU kernel),
// then y = (x - mean) * rstd * w + b. Operands are made contiguous first (views are rare here);
// mean and rstd are written in the compute type (float for the half types), as the op's shape
// rule says. Rows of up to 16384 elements (8192 for float64) are read once into registers and
// written once (layer_norm_rows_kernel: a warp, part of one, or a block a row; 16-byte vector
// loads and stores where x, y, w, b and every row start are 16-byte aligned, element-wise
// otherwise); longer rows take the general kernel, a block a row with three passes over it.
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/row_registers.cuh"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

// ---- Fast path: the row in registers ----
// A group of G threads takes a row, thread t holding the chunks t, t + G, t + 2G, ... of V
// elements (V = 16 bytes of T when aligned, else 1; a chunk past the end is loaded element-wise,
// masked). Rows of up to 16 values a thread of a warp (8 for float64) take a power-of-two group
// of up to 32 lanes (several rows a warp for short rows) and fold through shuffles; longer rows
// take a block of 16 values a thread (8 for float64; 256 threads for 4096 elements), folding
// through shuffles and a shared-memory array.


// kBlock: a block a row (G = blockDim.x, a multiple of 32); else groups of `group` lanes, a row
// each. E chunks of V elements a thread.
template <class T, class C, int V, int E, bool kBlock>
__global__ void __launch_bounds__(kBlock ? 1024 : 256)
    layer_norm_rows_kernel(const T* x, const T* w, const T* b, T* y, C* mean, C* rstd,
                           int64_t rows, int n_, int group, C eps) {
  __shared__ C partial[2][32];  // the mean's and the variance's: see block_all_fold
  const int G = kBlock ? int(blockDim.x) : group;
  const int t = kBlock ? int(threadIdx.x) : int(threadIdx.x) & (G - 1);
  const int64_t per_block = kBlock ? 1 : blockDim.x / G;
  const int64_t mine = kBlock ? 0 : threadIdx.x / G;
  // The same rounds in every thread (the folds need whole warps); a group past the last row
  // works on nothing (n 0) and stores nothing.
  for (int64_t r0 = blockIdx.x * per_block; r0 < rows; r0 += int64_t(gridDim.x) * per_block) {
    const int64_t row = r0 + mine;
    const int n = row < rows ? n_ : 0;
    const int64_t base = n ? row * n_ : 0;
    const T* xr = x + base;
    T* yr = y + base;
    C r[E][V];
    load_row<T, C, V, E>(xr, n, t, G, r);
    C s = 0;  // the elements past n are 0
#pragma unroll
    for (int k = 0; k < E; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i) s += r[k][i];
    s = kBlock ? block_all_fold(s, SumOp{}, partial[0]) : group_fold(s, SumOp{}, G);
    const C mu = s / C(n_);
    C q = 0;
#pragma unroll
    for (int k = 0; k < E; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if ((k * G + t) * V + i < n) {
          const C d = r[k][i] - mu;
          q += d * d;
        }
      }
    q = kBlock ? block_all_fold(q, SumOp{}, partial[1]) : group_fold(q, SumOp{}, G);
    const C var = q / C(n_);
    const C rs = C(1) / fn::Sqrt{}(var + eps);
    if (t == 0 && n) {
      mean[row] = mu;
      rstd[row] = rs;
    }
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const int c = (k * G + t) * V;
      if (V > 1 && c + V <= n) {
        C wv[V], bv[V];
        if (w) {
          const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(w + c);
#pragma unroll
          for (int i = 0; i < V; ++i) wv[i] = C(load(&p.v[i]));
        }
        if (b) {
          const Pack<T, V> p = *reinterpret_cast<const Pack<T, V>*>(b + c);
#pragma unroll
          for (int i = 0; i < V; ++i) bv[i] = C(load(&p.v[i]));
        }
        Pack<T, V> o;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          C v = (r[k][i] - mu) * rs;
          if (w) v = v * wv[i];
          if (b) v = v + bv[i];
          store(&o.v[i], v);
        }
        *reinterpret_cast<Pack<T, V>*>(yr + c) = o;
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) {
          if (c + i < n) {
            C v = (r[k][i] - mu) * rs;
            if (w) v = v * C(load(w + c + i));
            if (b) v = v + C(load(b + c + i));
            store(yr + c + i, v);
          }
        }
      }
    }
  }
}

// Launches the fast kernel, V elements a chunk: a group of up to 32 lanes with E in {1, 2, 4, 8}
// chunks a thread (at most 16 values a thread, 8 for float64), else a block with 16 values a
// thread, 8 for float64 (up to 1024 threads, so no spills). False where the row is too long.
template <class T, int V>
bool launch_rows(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean,
                 compute_t<T>* rstd, int64_t rows, int64_t n64, compute_t<T> eps,
                 cudaStream_t stream) {
  using C = compute_t<T>;
  constexpr int kValues = sizeof(C) == 8 ? 8 : 16;  // a thread's values, warp or block
  if (n64 > 16384) return false;
  return launch_row_shape<V, kValues, kValues>(
      int(n64), rows, [&]<int E, bool kBlock>(int group, int64_t blocks, int threads) {
        layer_norm_rows_kernel<T, C, V, E, kBlock><<<int(blocks), threads, 0, stream>>>(
            x, w, b, y, mean, rstd, rows, int(n64), group, eps);
      });
}

// ---- General kernel: a block a row, three passes ----

template <class A>
__device__ A block_sum(A v, A* scratch) {
  for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    A total = 0;
    for (int w = 0; w < int((blockDim.x + 31) >> 5); ++w) total += scratch[w];
    scratch[32] = total;
  }
  __syncthreads();
  const A total = scratch[32];
  __syncthreads();
  return total;
}

template <class T, class C>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, C* mean, C* rstd,
                                  int64_t rows, int64_t n, C eps) {
  __shared__ C scratch[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * n;
    C s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += C(load(xr + i));
    const C mu = block_sum(s, scratch) / C(n);
    C q = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const C d = C(load(xr + i)) - mu;
      q += d * d;
    }
    const C var = block_sum(q, scratch) / C(n);
    const C rs = C(1) / fn::Sqrt{}(var + eps);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      C v = (C(load(xr + i)) - mu) * rs;
      if (w) v = v * C(load(w + i));
      if (b) v = v + C(load(b + i));
      store(y + r * n + i, v);
    }
  }
}

void layer_norm(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::Float>(in[0].dtype(), "layer_norm", [&]<class T>() {
    using C = compute_t<T>;
    const Tensor x = in[0].contiguous();
    const Tensor wt = in.size() > 1 ? in[1].contiguous() : Tensor();
    const Tensor bt = in.size() > 2 ? in[2].contiguous() : Tensor();
    int64_t n = 1;
    for (int64_t s : a.shape) n *= s;
    const int64_t rows = out[1].numel();
    if (rows == 0 || n == 0) return;
    const int device = x.device().index;
    detail::use_device(device);
    auto ptr = [](const Tensor& t) {
      return t.defined() ? reinterpret_cast<const T*>(t.impl()->data()) : nullptr;
    };
    const T *xp = ptr(x), *wp = ptr(wt), *bp = ptr(bt);
    T* yp = reinterpret_cast<T*>(out[0].impl()->data());
    C* mean = reinterpret_cast<C*>(out[1].impl()->data());
    C* rstd = reinterpret_cast<C*>(out[2].impl()->data());
    const cudaStream_t stream = detail::stream(device);
    // Vector loads and stores need x, y, w and b and every row start 16-byte aligned.
    constexpr int V = 16 / sizeof(T);
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool vec = n % V == 0 && aligned(xp) && aligned(yp) && aligned(wp) && aligned(bp);
    const C eps = C(a.value);
    const bool fast = vec ? launch_rows<T, V>(xp, wp, bp, yp, mean, rstd, rows, n, eps, stream)
                          : launch_rows<T, 1>(xp, wp, bp, yp, mean, rstd, rows, n, eps, stream);
    if (!fast) {
      const int threads = n >= 2048 ? 512 : n >= 256 ? 256 : 64;
      const int blocks = int(rows < 65535 ? rows : 65535);
      layer_norm_kernel<T, C>
          <<<blocks, threads, 0, stream>>>(xp, wp, bp, yp, mean, rstd, rows, n, eps);
    }
    detail::check(cudaGetLastError(), "layer_norm");
  });
}

}  // namespace

void register_layer_norm(KernelTable& t) { t[OpId::layer_norm] = layer_norm; }

}  // namespace ember::cuda
