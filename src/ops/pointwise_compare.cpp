// Comparisons, logical ops, where and masked_fill: shape rules, grads and front ends.
// Comparisons and logical ops return bool tensors and record no history.
#include <cmath>
#include <limits>

#include "kernels/cpu/pointwise_compare.h"
#include "ops/frontend.h"
#include "ops/pointwise_rules.h"

namespace ember {

namespace {
// The kernels read the condition / mask as bytes and both branches as one type: checked here
// too, since callers below the front ends (graph replay, grad formulas) skip those checks.
MetaList infer_where(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in[0].dtype() == DType::Bool && in[1].dtype() == in[2].dtype(),
              "where: expected a bool condition and branches of one dtype, got ",
              dtype_name(in[0].dtype()), ", ", dtype_name(in[1].dtype()), " and ",
              dtype_name(in[2].dtype()));
  MetaList m = infer_broadcast(in, a);
  m[0].dtype = in[1].dtype();
  return m;
}
MetaList infer_masked_fill(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in[1].dtype() == DType::Bool, "masked_fill: the mask must be a bool tensor, got ",
              dtype_name(in[1].dtype()));
  EMBER_CHECK(broadcast_pair(in[0].sizes(), in[1].sizes(), "masked_fill") == in[0].sizes(),
              "masked_fill: the mask of shape ", in[1].shape_str(),
              " cannot be broadcast to the tensor's shape ", in[0].shape_str());
  return infer_same(in, a);
}

// Each branch gets the gradient where it was chosen, summed back to its own shape.
std::vector<Tensor> grad_where(const GradCtx& c) {
  const Tensor& cond = c.inputs[0];
  const Tensor& g = c.grads[0];
  return {Tensor(),
          c.needs_grad[1] ? sum_to_size(g.masked_fill(cond.logical_not(), 0), c.input_meta[1].sizes)
                          : Tensor(),
          c.needs_grad[2] ? sum_to_size(g.masked_fill(cond, 0), c.input_meta[2].sizes)
                          : Tensor()};
}

std::vector<Tensor> grad_masked_fill(const GradCtx& c) {
  return {c.grads[0].masked_fill(c.inputs[1], 0), Tensor()};
}

void check_defined(const Tensor& t, const char* op) {
  EMBER_CHECK(t.defined(), op, ": undefined tensor argument");
}

// Both operands in a common dtype (PyTorch promotion), shapes checked naming the op.
Tensor compare(OpId op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op).data();
  check_defined(a, name);
  check_defined(b, name);
  broadcast_pair(a.sizes(), b.sizes(), name);
  return binary(op, a, b);
}

// Logical ops read truthiness, so any dtypes combine: a common dtype is only needed because
// the kernel reads both inputs as one type.
Tensor logical(OpId op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op).data();
  check_defined(a, name);
  check_defined(b, name);
  broadcast_pair(a.sizes(), b.sizes(), name);
  DType t = promote_types(a.dtype(), b.dtype());
  return dispatch1(op, {cast_to(a, t), cast_to(b, t)});
}

void check_mask(const Tensor& self, const Tensor& mask, const char* op) {
  check_defined(self, op);
  check_defined(mask, op);
  EMBER_CHECK(mask.dtype() == DType::Bool, op, ": the mask must be a bool tensor, got ",
              dtype_name(mask.dtype()), " (shape ", mask.shape_str(),
              "); build it with a comparison such as x.gt(0) or convert it with .to(DType::Bool)");
  Shape s = broadcast_pair(self.sizes(), mask.sizes(), op);
  EMBER_CHECK(s == self.sizes(), op, ": the mask of shape ", mask.shape_str(),
              " cannot be broadcast to the tensor's shape ", self.shape_str(),
              " (the result would have shape ", shape_str(s), ")");
}

// The fill value must be representable in the tensor's dtype: integers take only integral
// values in range, floats no finite value that would overflow to inf (a silent truncation or
// overflow would be a wrong answer). Bool tensors take any value by truthiness.
void check_fill_value(const Tensor& self, double v, const char* op) {
  bool ok = true;
  switch (self.dtype()) {
    case DType::Bool: break;
    case DType::Int32: ok = std::nearbyint(v) == v && v >= -0x1p31 && v <= 0x1p31 - 1; break;
    case DType::Int64: ok = std::nearbyint(v) == v && v >= -0x1p63 && v < 0x1p63; break;
    case DType::Float16: ok = !std::isfinite(v) || std::abs(v) <= 65504.0; break;
    case DType::BFloat16: ok = !std::isfinite(v) || std::abs(v) <= 0x1.fep127; break;
    case DType::Float32:
      ok = !std::isfinite(v) || std::abs(v) <= double(std::numeric_limits<float>::max());
      break;
    case DType::Float64: break;
  }
  EMBER_CHECK(ok, op, ": value ", v, " cannot be stored in a ", dtype_name(self.dtype()),
              " tensor (shape ", self.shape_str(), "); convert the tensor to a wider dtype first");
}
}  // namespace

const OpImpl op_impl_eq{infer_broadcast_bool, cpu::eq, nullptr};
const OpImpl op_impl_ne{infer_broadcast_bool, cpu::ne, nullptr};
const OpImpl op_impl_lt{infer_broadcast_bool, cpu::lt, nullptr};
const OpImpl op_impl_le{infer_broadcast_bool, cpu::le, nullptr};
const OpImpl op_impl_gt{infer_broadcast_bool, cpu::gt, nullptr};
const OpImpl op_impl_ge{infer_broadcast_bool, cpu::ge, nullptr};
const OpImpl op_impl_logical_and{infer_broadcast_bool, cpu::logical_and, nullptr};
const OpImpl op_impl_logical_or{infer_broadcast_bool, cpu::logical_or, nullptr};
const OpImpl op_impl_logical_xor{infer_broadcast_bool, cpu::logical_xor, nullptr};
const OpImpl op_impl_logical_not{infer_broadcast_bool, cpu::logical_not, nullptr};
const OpImpl op_impl_where{infer_where, cpu::where, grad_where, 0b001, 0};
const OpImpl op_impl_masked_fill{infer_masked_fill, cpu::masked_fill, grad_masked_fill, 0b10, 0};

// ---- front ends ----

Tensor Tensor::eq(const Tensor& o) const { return compare(OpId::eq, *this, o); }
Tensor Tensor::ne(const Tensor& o) const { return compare(OpId::ne, *this, o); }
Tensor Tensor::lt(const Tensor& o) const { return compare(OpId::lt, *this, o); }
Tensor Tensor::le(const Tensor& o) const { return compare(OpId::le, *this, o); }
Tensor Tensor::gt(const Tensor& o) const { return compare(OpId::gt, *this, o); }
Tensor Tensor::ge(const Tensor& o) const { return compare(OpId::ge, *this, o); }
Tensor Tensor::eq(double v) const { return compare(OpId::eq, *this, wrap_scalar(v, *this)); }
Tensor Tensor::ne(double v) const { return compare(OpId::ne, *this, wrap_scalar(v, *this)); }
Tensor Tensor::lt(double v) const { return compare(OpId::lt, *this, wrap_scalar(v, *this)); }
Tensor Tensor::le(double v) const { return compare(OpId::le, *this, wrap_scalar(v, *this)); }
Tensor Tensor::gt(double v) const { return compare(OpId::gt, *this, wrap_scalar(v, *this)); }
Tensor Tensor::ge(double v) const { return compare(OpId::ge, *this, wrap_scalar(v, *this)); }

Tensor Tensor::logical_and(const Tensor& o) const { return logical(OpId::logical_and, *this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return logical(OpId::logical_or, *this, o); }
Tensor Tensor::logical_xor(const Tensor& o) const { return logical(OpId::logical_xor, *this, o); }
Tensor Tensor::logical_not() const {
  check_defined(*this, "logical_not");
  return dispatch1(OpId::logical_not, {*this});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where");
  check_defined(a, "where");
  check_defined(b, "where");
  EMBER_CHECK(cond.dtype() == DType::Bool, "where: the condition must be a bool tensor, got ",
              dtype_name(cond.dtype()), " (shape ", cond.shape_str(),
              "); build it with a comparison such as x.gt(0) or convert it with .to(DType::Bool)");
  broadcast_pair(broadcast_pair(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  DType t = result_type(a, b);
  return dispatch1(OpId::where, {cond, cast_to(a, t), cast_to(b, t)});
}
Tensor Tensor::where(const Tensor& cond, const Tensor& other) const {
  return ember::where(cond, *this, other);
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  check_mask(*this, mask, "masked_fill");
  check_fill_value(*this, value, "masked_fill");
  Attrs a;
  a.value = value;
  return dispatch1(OpId::masked_fill, {*this, mask}, a);
}

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  check_mask(*this, mask, "masked_fill_");
  check_fill_value(*this, value, "masked_fill_");
  Attrs a;
  a.value = value;
  dispatch_inplace(OpId::masked_fill, *this, {*this, mask}, a);
  return *this;
}

}  // namespace ember
