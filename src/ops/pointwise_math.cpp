// Powers, abs, sign, maximum / minimum and clamp: grads and front ends.
//
// Tensor::pow(double) is its own op, pow_scalar, with the exponent in attrs.value (not a
// 0-dim tensor): the kernels specialize common exponents, the compiler sees a constant, and
// the grad is e * x^(e-1) with no log(x) term. An integer tensor keeps its dtype for a
// non-negative integral exponent and is promoted to float for a fractional one.
#include <cmath>

#include "kernels/cpu/pointwise_math.h"
#include "ops/frontend.h"
#include "ops/pointwise_rules.h"

namespace ember {

namespace {
// pow: d/da a^b = b a^(b-1) (0 where b == 0, even at a == 0); d/db a^b = a^b log(a)
// (0 where a == 0 and b >= 0, where the limit is 0 rather than NaN).
std::vector<Tensor> grad_pow(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor ga, gb;
  if (c.needs_grad[0]) {
    Tensor d = (b * a.pow(b - 1.0)).masked_fill(b.eq(0.0), 0);
    ga = sum_to_size(g * d, c.input_meta[0].sizes);
  }
  if (c.needs_grad[1]) {
    Tensor d = c.outputs[0] * a.log();
    Tensor at_zero = a.eq(0.0).logical_and(b.ge(0.0));
    gb = sum_to_size(g * d.masked_fill(at_zero, 0), c.input_meta[1].sizes);
  }
  return {ga, gb};
}

std::vector<Tensor> grad_pow_scalar(const GradCtx& c) {
  const double e = c.attrs.value;
  const Tensor& g = c.grads[0];
  if (e == 0) return {zeros_like(g)};
  return {g * c.inputs[0].pow(e - 1) * e};
}

std::vector<Tensor> grad_abs(const GradCtx& c) { return {c.grads[0] * c.inputs[0].sign()}; }

// Ties split the gradient evenly; where the other input wins the gradient is 0. `self_loses`
// marks where self is strictly beaten (a < b for maximum, a > b for minimum).
Tensor tie_split_grad(const Tensor& g, const Tensor& a, const Tensor& b, const Tensor& self_loses) {
  return where(a.eq(b), g * 0.5, g).masked_fill(self_loses, 0);
}
// maximum (max = true) and minimum: a loses where it is below b (maximum) or above (minimum).
std::vector<Tensor> grad_extreme(const GradCtx& c, bool max) {
  const Tensor& g = c.grads[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  // Only the grads asked for: each comparison is a pass over the inputs.
  auto grad = [&](size_t i, bool a_below_loses) {
    if (!c.needs_grad[i]) return Tensor();
    const Tensor loses = a_below_loses ? a.lt(b) : a.gt(b);
    return sum_to_size(tie_split_grad(g, a, b, loses), c.input_meta[i].sizes);
  };
  return {grad(0, max), grad(1, !max)};
}
std::vector<Tensor> grad_maximum(const GradCtx& c) { return grad_extreme(c, true); }
std::vector<Tensor> grad_minimum(const GradCtx& c) { return grad_extreme(c, false); }

// The gradient passes where lo <= x <= hi (NaN inputs get 0); absent bounds are +-inf and
// need no comparison.
std::vector<Tensor> grad_clamp(const GradCtx& c) {
  const Tensor& x = c.inputs[0];
  const double lo = c.attrs.value, hi = c.attrs.value2;
  Tensor keep;
  if (lo != -INFINITY) keep = x.ge(lo);
  if (hi != INFINITY) keep = keep.defined() ? keep.logical_and(x.le(hi)) : x.le(hi);
  if (!keep.defined()) return {c.grads[0]};
  return {c.grads[0].masked_fill(keep.logical_not(), 0)};
}

void check_not_bool(const Tensor& t, const char* op) {
  EMBER_CHECK(t.defined(), op, ": undefined tensor argument");
  EMBER_CHECK(t.dtype() != DType::Bool, op, ": not supported for bool tensors (shape ",
              t.shape_str(), "); cast with .to() first");
}

// Promotes and dispatches a binary op, naming the op if the shapes do not broadcast.
Tensor checked_binary(OpId op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), op_name(op), ": undefined tensor argument");
  broadcast_pair(a.sizes(), b.sizes(), op_name(op).data());
  return binary(op, a, b);
}

bool is_integral_value(double v) { return std::isfinite(v) && std::nearbyint(v) == v; }

// Whether an integer tensor of dtype t can be clamped to v without leaving its dtype.
bool fits_integer(double v, DType t) {
  if (!is_integral_value(v)) return false;
  return t == DType::Int32 ? v >= -0x1p31 && v <= 0x1p31 - 1 : v >= -0x1p63 && v < 0x1p63;
}

// The clamp op's attrs and the tensor it runs on. An integer tensor with a bound it cannot
// hold (fractional, infinite or out of range) becomes float, as in integer-float arithmetic;
// absent bounds are +-inf and never promote.
std::pair<Tensor, Attrs> clamp_args(const Tensor& x, std::optional<double> min,
                                    std::optional<double> max, const char* op) {
  check_not_bool(x, op);
  EMBER_CHECK(min || max, op, ": at least one of min and max must be given");
  EMBER_CHECK(!(min && std::isnan(*min)) && !(max && std::isnan(*max)), op,
              ": min and max must not be NaN");
  Attrs a;
  a.value = min ? *min : -INFINITY;
  a.value2 = max ? *max : INFINITY;
  bool promote = !is_floating(x.dtype()) && ((min && !fits_integer(*min, x.dtype())) ||
                                             (max && !fits_integer(*max, x.dtype())));
  return {promote ? to_floating(x) : x, a};
}
}  // namespace

const OpImpl op_impl_pow{infer_broadcast, cpu::pow, grad_pow, 0b11, 0b1};
const OpImpl op_impl_pow_scalar{infer_same, cpu::pow_scalar, grad_pow_scalar, 0b1, 0};
const OpImpl op_impl_abs{infer_same, cpu::abs, grad_abs, 0b1, 0};
const OpImpl op_impl_sign{infer_same, cpu::sign, nullptr};
const OpImpl op_impl_maximum{infer_broadcast, cpu::maximum, grad_maximum, 0b11, 0};
const OpImpl op_impl_minimum{infer_broadcast, cpu::minimum, grad_minimum, 0b11, 0};
const OpImpl op_impl_clamp{infer_same, cpu::clamp, grad_clamp, 0b1, 0};

// ---- front ends ----

Tensor Tensor::pow(const Tensor& o) const {
  check_not_bool(*this, "pow");
  check_not_bool(o, "pow");
  return checked_binary(OpId::pow, *this, o);
}

Tensor Tensor::pow(double e) const {
  check_not_bool(*this, "pow");
  Attrs a;
  a.value = e;
  if (is_floating(dtype()) || !is_integral_value(e))
    return dispatch1(OpId::pow_scalar, {to_floating(*this)}, a);
  EMBER_CHECK(e >= 0, "pow: integers to negative integer powers are not allowed (",
              dtype_name(dtype()), " tensor of shape ", shape_str(), " ** ", e,
              "); convert the tensor to float first");
  // Exponents past 2^62 only ever give 0, +-1 or wrapped garbage; keep the cast defined.
  EMBER_CHECK(e < 4611686018427387904.0, "pow: exponent ", e, " is too large for an ",
              dtype_name(dtype()), " tensor; convert the tensor to float first");
  return dispatch1(OpId::pow_scalar, {*this}, a);
}

Tensor Tensor::abs() const {
  check_not_bool(*this, "abs");
  return unary(OpId::abs, *this);
}
Tensor Tensor::sign() const {
  check_not_bool(*this, "sign");
  return unary(OpId::sign, *this);
}

Tensor Tensor::maximum(const Tensor& o) const { return checked_binary(OpId::maximum, *this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return checked_binary(OpId::minimum, *this, o); }

Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const {
  auto [x, a] = clamp_args(*this, min, max, "clamp");
  return dispatch1(OpId::clamp, {x}, a);
}

Tensor& Tensor::clamp_(std::optional<double> min, std::optional<double> max) {
  auto [x, a] = clamp_args(*this, min, max, "clamp_");
  EMBER_CHECK(x.dtype() == dtype(), "clamp_: bounds ", a.value, " and ", a.value2,
              " do not fit the integers of a ", dtype_name(dtype()), " tensor, so the result "
              "would be ", dtype_name(x.dtype()), ", which cannot be written in place; use "
              "clamp() or bounds the dtype can hold");
  dispatch_inplace(OpId::clamp, *this, {*this}, a);
  return *this;
}

}  // namespace ember
