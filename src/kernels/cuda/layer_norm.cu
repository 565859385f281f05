// CUDA layer_norm forward: a block a row of the normalized dims; the mean, then the variance
// around it (two passes, as the CPU kernel), then y = (x - mean) * rstd * w + b. Operands are made
// contiguous first (views are rare here); mean and rstd are written in the compute type (float for
// the half types), as the op's shape rule says.
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

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
    const int threads = n >= 2048 ? 512 : n >= 256 ? 256 : 64;
    const int blocks = int(rows < 65535 ? rows : 65535);
    layer_norm_kernel<T, C><<<blocks, threads, 0, detail::stream(device)>>>(
        ptr(x), ptr(wt), ptr(bt), reinterpret_cast<T*>(out[0].impl()->data()),
        reinterpret_cast<C*>(out[1].impl()->data()), reinterpret_cast<C*>(out[2].impl()->data()),
        rows, n, C(a.value));
    detail::check(cudaGetLastError(), "layer_norm");
  });
}

}  // namespace

void register_layer_norm(KernelTable& t) { t[OpId::layer_norm] = layer_norm; }

}  // namespace ember::cuda
