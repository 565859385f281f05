// CUDA kernels of the factories: full (a constant, converted as the CPU converts it: the double
// to the compute type, then stored) and arange (start + i * step in double, then converted).
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

namespace {

template <class C>
struct Constant {
  C v;
  __device__ C operator()() const { return v; }
};

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    store(out + i, compute_t<T>(start + double(i) * step));
}

void full(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::All>(out[0].dtype(), "full", [&]<class T>() {
    using C = compute_t<T>;
    elementwise<T>("full", out[0], {}, Constant<C>{C(a.value)});
  });
}

void arange(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::Numeric>(out[0].dtype(), "arange", [&]<class T>() {
    const int64_t n = out[0].numel();
    const int device = out[0].device().index;
    detail::use_device(device);
    const int threads = 256;
    const int64_t want = (n + threads - 1) / threads;
    const int blocks = int(want < 4096 ? want : 4096);
    arange_kernel<T><<<blocks, threads, 0, detail::stream(device)>>>(
        static_cast<T*>(out[0].impl()->data()), n, a.value, a.value2);
    detail::check(cudaGetLastError(), "arange");
  });
}

}  // namespace

void register_factories(KernelTable& t) {
  t[OpId::full] = full;
  t[OpId::arange] = arange;
}

}  // namespace ember::cuda
