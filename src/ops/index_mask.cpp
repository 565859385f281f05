// Positional masks tril and triu: shape rules, grads and front ends.
#include "kernels/cpu/index.h"
#include "ops/frontend.h"

namespace ember {

namespace {
MetaList infer_tri(std::span<const Tensor> in, const Attrs&) {
  return {TensorMeta{in[0].sizes(), {}, 0, in[0].dtype()}};
}
// The mask is fixed by position, so the grad is the same mask applied to the grad.
std::vector<Tensor> grad_tril(const GradCtx& c) {
  return {c.grads[0].tril(c.attrs.start)};
}
std::vector<Tensor> grad_triu(const GradCtx& c) {
  return {c.grads[0].triu(c.attrs.start)};
}

Tensor tri(OpId op, const Tensor& x, int64_t diagonal) {
  const char* name = op_name(op).data();
  EMBER_CHECK(x.defined(), name, ": undefined tensor argument");
  EMBER_CHECK(x.dim() >= 2, name, ": expects a tensor of at least 2 dims, got shape ",
              x.shape_str());
  Attrs a;
  a.start = diagonal;
  return dispatch1(op, {x}, a);
}
}  // namespace

const OpImpl op_impl_tril{infer_tri, cpu::tril, grad_tril};
const OpImpl op_impl_triu{infer_tri, cpu::triu, grad_triu};

Tensor Tensor::tril(int64_t diagonal) const {
  return tri(OpId::tril, *this, diagonal);
}
Tensor Tensor::triu(int64_t diagonal) const {
  return tri(OpId::triu, *this, diagonal);
}

}  // namespace ember
