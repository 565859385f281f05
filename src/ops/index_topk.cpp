// topk: shape rule, grad (a scatter of the values' grad back to where they came from) and
// front end.
#include "kernels/cpu/index.h"
#include "ops/frontend.h"

namespace ember {

namespace {
MetaList infer_topk(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  s[a.dim] = a.start;
  return {TensorMeta{s, {}, 0, in[0].dtype()}, TensorMeta{s, {}, 0, DType::Int64}};
}

std::vector<Tensor> grad_topk(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  if (!g.defined()) return {Tensor()};
  Attrs a;
  a.dim = c.attrs.dim;
  Tensor base = zeros_shaped_like(c.input_meta[0].sizes, g);
  return {dispatch1(OpId::scatter_add, {base, c.outputs[1], g}, a)};
}
}  // namespace

const OpImpl op_impl_topk{infer_topk, cpu::topk, grad_topk, 0, 0b10};

std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t d, bool largest, bool sorted) const {
  (void)sorted;  // results always come sorted, which sorted=false permits as well
  EMBER_CHECK(defined(), "topk: undefined tensor argument");
  EMBER_CHECK(dtype() != DType::Bool,
              "topk: not supported for bool tensors; cast with .to() "
              "first");
  if (dim() == 0) {  // a 0-dim tensor is one element along dim 0
    wrap_dim(d, 0, "topk");
    auto [v, i] = reshape({1}).topk(k, 0, largest, true);
    return k == 1 ? std::make_pair(v.reshape({}), i.reshape({})) : std::make_pair(v, i);
  }
  Attrs a;
  a.dim = wrap_dim(d, dim(), "topk");
  const int64_t n = sizes()[a.dim];
  EMBER_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dim ", a.dim, " of size ", n,
              " (shape ", shape_str(), "); k must be in [0, ", n, "]");
  a.start = k;
  a.flag = largest;
  std::vector<Tensor> out = dispatch(OpId::topk, {*this}, a);
  return {out[0], out[1]};
}

}  // namespace ember
