// Float-only unary math: grads and front ends. Integer inputs are promoted first.
#include "kernels/cpu/pointwise_float.h"
#include "ops/frontend.h"
#include "ops/pointwise_rules.h"

namespace ember {

namespace {
std::vector<Tensor> grad_exp(const GradCtx& c) { return {c.grads[0] * c.outputs[0]}; }
std::vector<Tensor> grad_log(const GradCtx& c) { return {c.grads[0] / c.inputs[0]}; }
std::vector<Tensor> grad_sqrt(const GradCtx& c) { return {c.grads[0] / (c.outputs[0] * 2.0)}; }
std::vector<Tensor> grad_rsqrt(const GradCtx& c) {
  // d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
  const Tensor& y = c.outputs[0];
  return {c.grads[0] * y * y * y * -0.5};
}
}  // namespace

const OpImpl op_impl_exp{infer_same, cpu::exp, grad_exp, 0, 0b1};
const OpImpl op_impl_log{infer_same, cpu::log, grad_log, 0b1, 0};
const OpImpl op_impl_sqrt{infer_same, cpu::sqrt, grad_sqrt, 0, 0b1};
const OpImpl op_impl_rsqrt{infer_same, cpu::rsqrt, grad_rsqrt, 0, 0b1};

Tensor Tensor::exp() const { return unary(OpId::exp, to_floating(*this)); }
Tensor Tensor::log() const { return unary(OpId::log, to_floating(*this)); }
Tensor Tensor::sqrt() const { return unary(OpId::sqrt, to_floating(*this)); }
Tensor Tensor::rsqrt() const { return unary(OpId::rsqrt, to_floating(*this)); }

}  // namespace ember
