// Activations: grads and front ends. Integer inputs of the float-only ones are promoted to
// the default float dtype; relu keeps integer dtypes.
#include "kernels/cpu/pointwise_activation.h"
#include "ops/frontend.h"
#include "ops/pointwise_rules.h"

namespace ember {

namespace {
std::vector<Tensor> grad_tanh(const GradCtx& c) {
  const Tensor& y = c.outputs[0];
  return {c.grads[0] * (1.0 - y * y)};
}
std::vector<Tensor> grad_sigmoid(const GradCtx& c) {
  const Tensor& y = c.outputs[0];
  return {c.grads[0] * y * (1.0 - y)};
}
// relu(x) <= 0 exactly where x <= 0; NaN keeps its grad (as a threshold at 0 would).
std::vector<Tensor> grad_relu(const GradCtx& c) {
  return {c.grads[0].masked_fill(c.outputs[0].le(0.0), 0)};
}
// d/dx x*s(x) = s + x*s*(1-s) = s * (1 + x*(1-s)).
std::vector<Tensor> grad_silu(const GradCtx& c) {
  const Tensor& x = c.inputs[0];
  Tensor s = x.sigmoid();
  return {c.grads[0] * s * (1.0 + x * (1.0 - s))};
}
std::vector<Tensor> grad_gelu(const GradCtx& c) {
  Attrs a;
  a.flag = c.attrs.flag;
  return {dispatch1(OpId::gelu_backward, {c.grads[0], c.inputs[0]}, a)};
}

MetaList infer_gelu_backward(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in[0].dtype() == in[1].dtype() && is_floating(in[1].dtype()),
              "gelu_backward: grad and input must share one floating dtype, got ",
              dtype_name(in[0].dtype()), " and ", dtype_name(in[1].dtype()));
  return infer_broadcast(in, a);
}

Tensor float_unary(OpId op, const Tensor& x, const Attrs& a = {}) {
  EMBER_CHECK(x.defined(), op_name(op), ": undefined tensor argument");
  return unary(op, to_floating(x), a);
}
}  // namespace

const OpImpl op_impl_tanh{infer_same, cpu::tanh, grad_tanh, 0, 0b1};
const OpImpl op_impl_sigmoid{infer_same, cpu::sigmoid, grad_sigmoid, 0, 0b1};
const OpImpl op_impl_relu{infer_same, cpu::relu, grad_relu, 0, 0b1};
const OpImpl op_impl_silu{infer_same, cpu::silu, grad_silu, 0b1, 0};
const OpImpl op_impl_gelu{infer_same, cpu::gelu, grad_gelu, 0b1, 0};
const OpImpl op_impl_gelu_backward{infer_gelu_backward, cpu::gelu_backward, nullptr};

Tensor Tensor::tanh() const { return float_unary(OpId::tanh, *this); }
Tensor Tensor::sigmoid() const { return float_unary(OpId::sigmoid, *this); }
Tensor Tensor::silu() const { return float_unary(OpId::silu, *this); }

Tensor Tensor::relu() const {
  EMBER_CHECK(defined(), "relu: undefined tensor argument");
  EMBER_CHECK(dtype() != DType::Bool, "relu: not supported for bool tensors (shape ",
              shape_str(), "); cast with .to() first");
  return unary(OpId::relu, *this);
}

Tensor Tensor::gelu(bool tanh_approx) const {
  Attrs a;
  a.flag = tanh_approx;
  return float_unary(OpId::gelu, *this, a);
}
Tensor gelu(const Tensor& x, bool tanh_approx) { return x.gelu(tanh_approx); }

}  // namespace ember
