// Reductions: shape rules, grads and front ends.
#include "kernels/cpu/reduce.h"
#include "ops/frontend.h"

namespace ember {

MetaList infer_reduce(std::span<const Tensor> in, const Attrs& a) {
  return {TensorMeta{reduced_shape(in[0].sizes(), a.dims, a.keepdim), {}, 0, in[0].dtype()}};
}

namespace {
// Grad of a reduction broadcast back over the reduced dims.
Tensor expand_reduced_grad(const Tensor& g, const GradCtx& c) {
  const Shape& in_sizes = c.input_meta[0].sizes;
  Tensor gk = c.attrs.keepdim ? g : g.reshape(reduced_shape(in_sizes, c.attrs.dims, true));
  return gk.expand(in_sizes);
}
std::vector<Tensor> grad_sum(const GradCtx& c) { return {expand_reduced_grad(c.grads[0], c)}; }
}  // namespace

const OpImpl op_impl_sum{infer_reduce, cpu::sum, grad_sum};

Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  Attrs a;
  a.dims = reduction_dims(dims, dim(), "sum");
  a.keepdim = keepdim;
  // Integers and bools sum in int64, as in PyTorch.
  Tensor x = is_floating(dtype()) ? *this : to(DType::Int64);
  return dispatch1(OpId::sum, {x}, a);
}

}  // namespace ember
