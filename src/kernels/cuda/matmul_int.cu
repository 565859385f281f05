// Integer matmul on CUDA (cuBLAS has no integer gemm): one thread an output element, the operands
// broadcast to the output's batch dims and made contiguous first. Sums wrap around in two's
// complement, as on the CPU (unsigned arithmetic keeps the wrap well defined).
#include <cstdint>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/matmul_int.h"

namespace ember::cuda {

namespace {

template <class T>
__global__ void integer_matmul_kernel(const T* a, const T* b, T* c, int64_t batches, int64_t m,
                                      int64_t n, int64_t k) {
  const int64_t total = batches * m * n;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += step) {
    const int64_t j = o % n, row = o / n, bi = row / m;
    const T* ar = a + row * k;
    const T* bm = b + bi * k * n + j;
    uint64_t acc = 0;
    for (int64_t p = 0; p < k; ++p)
      acc += uint64_t(int64_t(ar[p])) * uint64_t(int64_t(bm[p * n]));
    c[o] = T(int64_t(acc));
  }
}

}  // namespace

void integer_matmul(const Tensor& a, const Tensor& b, Tensor& c) {
  const int64_t nd = c.dim(), m = c.sizes()[size_t(nd - 2)], n = c.sizes()[size_t(nd - 1)];
  const int64_t k = a.sizes()[size_t(a.dim() - 1)];
  Shape batch(c.sizes().begin(), c.sizes().end() - 2), sa = batch, sb = batch;
  int64_t batches = 1;
  for (int64_t s : batch) batches *= s;
  sa.push_back(m);
  sa.push_back(k);
  sb.push_back(k);
  sb.push_back(n);
  const Tensor x = a.expand(sa).contiguous(), y = b.expand(sb).contiguous();
  const int device = c.device().index;
  detail::use_device(device);
  const int64_t total = batches * m * n;
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, int64_t(1) << 16);
  auto run = [&]<class T>() {
    integer_matmul_kernel<T><<<unsigned(blocks), threads, 0, detail::stream(device)>>>(
        static_cast<const T*>(x.impl()->data()), static_cast<const T*>(y.impl()->data()),
        static_cast<T*>(c.impl()->data()), batches, m, n, k);
  };
  if (c.dtype() == DType::Int32) run.template operator()<int32_t>();
  else run.template operator()<int64_t>();
  detail::check(cudaGetLastError(), "matmul");
}

}  // namespace ember::cuda
