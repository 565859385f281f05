// Softmax and log-softmax over one dim: grads and front ends.
#include "kernels/cpu/rowwise.h"
#include "ops/frontend.h"
#include "ops/pointwise_rules.h"

namespace ember {

namespace {
// y = softmax(x): dx = y * (g - sum(g * y))
std::vector<Tensor> grad_softmax(const GradCtx& c) {
  const Tensor& y = c.outputs[0];
  const Tensor& g = c.grads[0];
  return {y * (g - (g * y).sum({c.attrs.dim}, true))};
}

// y = log_softmax(x): dx = g - softmax(x) * sum(g), with softmax(x) = exp(y)
std::vector<Tensor> grad_log_softmax(const GradCtx& c) {
  const Tensor& y = c.outputs[0];
  const Tensor& g = c.grads[0];
  return {g - y.exp() * g.sum({c.attrs.dim}, true)};
}

Tensor softmax_like(OpId op, const Tensor& x, int64_t dim) {
  const char* name = op_name(op).data();
  EMBER_CHECK(x.defined(), name, ": undefined tensor argument");
  Attrs a;
  a.dim = wrap_dim(dim, x.dim(), name);
  return dispatch1(op, {autocast_float32(to_floating(x))}, a);
}
}  // namespace

const OpImpl op_impl_softmax{infer_same, cpu::softmax, grad_softmax, 0, 0b1};
const OpImpl op_impl_log_softmax{infer_same, cpu::log_softmax, grad_log_softmax, 0, 0b1};

Tensor Tensor::softmax(int64_t dim) const {
  return softmax_like(OpId::softmax, *this, dim);
}
Tensor Tensor::log_softmax(int64_t dim) const {
  return softmax_like(OpId::log_softmax, *this, dim);
}
Tensor softmax(const Tensor& x, int64_t dim) {
  return x.softmax(dim);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return x.log_softmax(dim);
}

}  // namespace ember
