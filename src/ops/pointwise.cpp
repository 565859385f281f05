// Pointwise ops: shape rules, grad formulas and front ends (arithmetic, casts, copies).
#include "kernels/cpu/pointwise.h"
#include "ops/frontend.h"
#include "ops/pointwise_rules.h"

namespace ember {

MetaList infer_broadcast(std::span<const Tensor> in, const Attrs&) {
  Shape s = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i) s = broadcast_pair(s, in[i].sizes(), "pointwise op");
  return {TensorMeta{s, {}, 0, in[0].dtype()}};
}

MetaList infer_broadcast_bool(std::span<const Tensor> in, const Attrs& a) {
  MetaList m = infer_broadcast(in, a);
  m[0].dtype = DType::Bool;
  return m;
}

MetaList infer_same(std::span<const Tensor> in, const Attrs&) {
  return {TensorMeta{in[0].sizes(), {}, 0, in[0].dtype()}};
}

namespace {

MetaList infer_cast(std::span<const Tensor> in, const Attrs& a) {
  return {TensorMeta{in[0].sizes(), {}, 0, a.dtype}};
}

// Gradient of a broadcast input: sum over the broadcast dims.
Tensor reduce_grad(const Tensor& g, const GradCtx& c, size_t i) {
  return sum_to_size(g, c.input_meta[i].sizes);
}

std::vector<Tensor> grad_add(const GradCtx& c) {
  return {c.needs_grad[0] ? reduce_grad(c.grads[0], c, 0) : Tensor(),
          c.needs_grad[1] ? reduce_grad(c.grads[0], c, 1) : Tensor()};
}
std::vector<Tensor> grad_sub(const GradCtx& c) {
  return {c.needs_grad[0] ? reduce_grad(c.grads[0], c, 0) : Tensor(),
          c.needs_grad[1] ? reduce_grad(-c.grads[0], c, 1) : Tensor()};
}
std::vector<Tensor> grad_mul(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  return {c.needs_grad[0] ? reduce_grad(g * c.inputs[1], c, 0) : Tensor(),
          c.needs_grad[1] ? reduce_grad(g * c.inputs[0], c, 1) : Tensor()};
}
std::vector<Tensor> grad_div(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  return {c.needs_grad[0] ? reduce_grad(g / b, c, 0) : Tensor(),
          c.needs_grad[1] ? reduce_grad(-g * a / (b * b), c, 1) : Tensor()};
}
std::vector<Tensor> grad_neg(const GradCtx& c) { return {-c.grads[0]}; }
std::vector<Tensor> grad_cast(const GradCtx& c) {
  return {is_floating(c.input_meta[0].dtype) ? c.grads[0].to(c.input_meta[0].dtype) : Tensor()};
}
std::vector<Tensor> grad_clone(const GradCtx& c) { return {c.grads[0]}; }

}  // namespace

const OpImpl op_impl_add{infer_broadcast, cpu::add, grad_add};
const OpImpl op_impl_sub{infer_broadcast, cpu::sub, grad_sub};
const OpImpl op_impl_mul{infer_broadcast, cpu::mul, grad_mul, 0b11};
const OpImpl op_impl_div{infer_broadcast, cpu::div, grad_div, 0b11};
const OpImpl op_impl_neg{infer_same, cpu::neg, grad_neg};
const OpImpl op_impl_cast{infer_cast, cpu::cast, grad_cast};
const OpImpl op_impl_clone{infer_same, cpu::clone, grad_clone};

// ---- front ends ----

namespace {
void check_not_bool(const Tensor& t, const char* op) {
  EMBER_CHECK(t.dtype() != DType::Bool, op, ": not supported for bool tensors (shape ",
              t.shape_str(), "); cast with .to() first");
}
}  // namespace

Tensor Tensor::add(const Tensor& o) const { return binary(OpId::add, *this, o); }
Tensor Tensor::sub(const Tensor& o) const {
  check_not_bool(*this, "sub");
  return binary(OpId::sub, *this, o);
}
Tensor Tensor::mul(const Tensor& o) const { return binary(OpId::mul, *this, o); }
Tensor Tensor::div(const Tensor& o) const {
  EMBER_CHECK(o.defined(), "div: undefined tensor argument");
  if (sizes() != o.sizes()) broadcast_pair(sizes(), o.sizes(), "div");
  DType t = result_type(*this, o);
  if (!is_floating(t)) t = default_float_dtype();  // true division
  return dispatch1(OpId::div, {cast_to(*this, t), cast_to(o, t)});
}
Tensor Tensor::neg() const {
  check_not_bool(*this, "neg");
  return unary(OpId::neg, *this);
}

Tensor Tensor::to(DType t) const {
  if (dtype() == t) return *this;
  Attrs a;
  a.dtype = t;
  return dispatch1(OpId::cast, {*this}, a);
}

Tensor Tensor::clone() const { return unary(OpId::clone, *this); }
Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  checked_nbytes(sizes(), dtype(), "contiguous");  // an expanded view can hold more than fits
  return clone();
}

Tensor operator+(const Tensor& a, const Tensor& b) { return a.add(b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return a.sub(b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return a.mul(b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return a.div(b); }
Tensor operator-(const Tensor& a) { return a.neg(); }
Tensor operator+(const Tensor& a, double b) { return a.add(wrap_scalar(b, a)); }
Tensor operator-(const Tensor& a, double b) { return a.sub(wrap_scalar(b, a)); }
Tensor operator*(const Tensor& a, double b) { return a.mul(wrap_scalar(b, a)); }
Tensor operator/(const Tensor& a, double b) { return a.div(wrap_scalar(b, a)); }
Tensor operator+(double a, const Tensor& b) { return wrap_scalar(a, b).add(b); }
Tensor operator-(double a, const Tensor& b) { return wrap_scalar(a, b).sub(b); }
Tensor operator*(double a, const Tensor& b) { return wrap_scalar(a, b).mul(b); }
Tensor operator/(double a, const Tensor& b) { return wrap_scalar(a, b).div(b); }

// ---- in place ----

namespace {
void inplace_binary(OpId op, Tensor& self, const Tensor& o) {
  EMBER_CHECK(o.defined(), op_name(op), "_: undefined tensor argument");
  DType t = self.dtype();
  EMBER_CHECK(promote_types(t, o.dtype()) == t || o.dim() == 0 ||
                  (is_floating(t) && !is_floating(o.dtype())),
              op_name(op), "_: result type ", dtype_name(promote_types(t, o.dtype())),
              " cannot be written into a ", dtype_name(t), " tensor");
  EMBER_CHECK(op != OpId::div || is_floating(t), "div_: true division of a ",
              dtype_name(t), " tensor in place is not supported; convert it to float first");
  dispatch_inplace(op, self, {self, cast_to(o, t)});
}
}  // namespace

Tensor& Tensor::add_(const Tensor& o) {
  inplace_binary(OpId::add, *this, o);
  return *this;
}
Tensor& Tensor::sub_(const Tensor& o) {
  inplace_binary(OpId::sub, *this, o);
  return *this;
}
Tensor& Tensor::mul_(const Tensor& o) {
  inplace_binary(OpId::mul, *this, o);
  return *this;
}
Tensor& Tensor::div_(const Tensor& o) {
  inplace_binary(OpId::div, *this, o);
  return *this;
}
Tensor& Tensor::add_(double v) { return add_(scalar_tensor_on(v, dtype(), device())); }
Tensor& Tensor::mul_(double v) { return mul_(scalar_tensor_on(v, dtype(), device())); }

Tensor& Tensor::copy_(const Tensor& src) {
  EMBER_CHECK(src.defined(), "copy_: undefined source tensor");
  Tensor s = src.device() == device() ? src : src.to(device());
  s = cast_to(s, dtype());
  if (s.sizes() != sizes()) s = s.expand(sizes());
  dispatch_inplace(OpId::clone, *this, {s});
  return *this;
}

Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }

}  // namespace ember
