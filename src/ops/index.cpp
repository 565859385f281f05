// Index-driven ops: slice_backward (gathers/scatters, cat, masks and BLAS join here).
#include "core/make_tensor.h"
#include "kernels/cpu/pointwise.h"
#include "ops/frontend.h"

namespace ember {

namespace {

MetaList infer_slice_backward(std::span<const Tensor> in, const Attrs& a) {
  return {TensorMeta{a.shape, {}, 0, in[0].dtype()}};
}

// Zeros everywhere, the incoming grad in the sliced region.
void cpu_slice_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  Tensor& o = out[0];
  std::memset(o.impl()->data(), 0, size_t(o.numel()) * dtype_size(o.dtype()));
  Shape sizes = o.sizes(), strides = o.strides();
  int64_t len = a.end - a.start;
  sizes[a.dim] = len <= 0 ? 0 : (len + a.step - 1) / a.step;
  strides[a.dim] *= a.step;
  Tensor region = make_view(o, sizes, strides, a.start * o.strides()[a.dim]);
  if (region.numel() == 0) return;
  Tensor dst[1] = {region};
  cpu::clone(in, std::span<Tensor>(dst, 1), Attrs{});
}

std::vector<Tensor> grad_slice_backward(const GradCtx& c) {
  const Attrs& a = c.attrs;
  return {c.grads[0].slice(a.dim, a.start, a.end, a.step)};
}

}  // namespace

const OpImpl op_impl_slice_backward{infer_slice_backward, cpu_slice_backward,
                                    grad_slice_backward};

}  // namespace ember
