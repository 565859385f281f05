// nonzero on CUDA: a flag per element (x made contiguous), an exclusive scan of the flags (CUB)
// giving each non-zero element its output row, then each one writes its multi-index there. The
// shape rule has already counted the non-zero elements on the host (ops/nonzero.cpp); a row
// past that count (the input changed in between) is not written.
#include <cub/device/device_scan.cuh>

#include "core/make_tensor.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

namespace {

template <class T>
__global__ void flag_kernel(const T* x, int64_t* flags, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    flags[i] = load(x + i) != compute_t<T>(0) ? 1 : 0;
}

struct Sizes {
  int nd;
  int64_t s[kMaxDims];
};

__global__ void scatter_kernel(const int64_t* flags, const int64_t* rows, int64_t n, Sizes sz,
                               int64_t count, int64_t* out) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    if (!flags[i] || rows[i] >= count) continue;
    int64_t flat = i;
    int64_t* o = out + rows[i] * sz.nd;
    for (int d = sz.nd - 1; d >= 0; --d) {
      o[d] = flat % sz.s[d];
      flat /= sz.s[d];
    }
  }
}

int blocks_for(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return int(want < 65535 ? want : 65535);
}

void nonzero(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor x = in[0].contiguous();
  const int64_t n = x.numel(), count = out[0].sizes()[0];
  EMBER_CHECK(x.dim() <= kMaxDims, "nonzero: CUDA kernels take up to ", kMaxDims,
              " dims, got shape ", x.shape_str());
  if (n == 0 || count == 0) return;
  const int device = x.device().index;
  detail::use_device(device);
  const cudaStream_t stream = detail::stream(device);
  Tensor flags = make_tensor({n}, DType::Int64, x.device());
  Tensor rows = make_tensor({n}, DType::Int64, x.device());
  auto* fp = static_cast<int64_t*>(flags.impl()->data());
  auto* rp = static_cast<int64_t*>(rows.impl()->data());
  visit<Kinds::All>(x.dtype(), "nonzero", [&]<class T>() {
    flag_kernel<T><<<blocks_for(n), 256, 0, stream>>>(static_cast<const T*>(x.impl()->data()),
                                                      fp, n);
  });
  detail::check(cudaGetLastError(), "nonzero");
  size_t bytes = 0;
  detail::check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, fp, rp, n, stream), "nonzero");
  Tensor scratch = make_tensor({int64_t(bytes) + 1}, DType::Bool, x.device());
  detail::check(cub::DeviceScan::ExclusiveSum(scratch.impl()->data(), bytes, fp, rp, n, stream),
                "nonzero");
  Sizes sz{int(x.dim()), {}};
  for (int d = 0; d < sz.nd; ++d) sz.s[d] = x.sizes()[size_t(d)];
  scatter_kernel<<<blocks_for(n), 256, 0, stream>>>(fp, rp, n, sz, count,
                                                    static_cast<int64_t*>(out[0].impl()->data()));
  detail::check(cudaGetLastError(), "nonzero");
}

}  // namespace

void register_nonzero(KernelTable& t) { t[OpId::nonzero] = nonzero; }

}  // namespace ember::cuda
