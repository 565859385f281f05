// Helpers shared by the op front ends.
#include "ops/frontend.h"

#include <algorithm>

namespace ember {

namespace {
int category(DType t) { return t == DType::Bool ? 0 : is_integral(t) ? 1 : 2; }
}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  bool a0 = a.dim() == 0, b0 = b.dim() == 0;
  if (a0 != b0) {
    const Tensor& dimmed = a0 ? b : a;
    const Tensor& zero = a0 ? a : b;
    if (category(zero.dtype()) <= category(dimmed.dtype())) return dimmed.dtype();
    if (category(zero.dtype()) == 2) return default_float_dtype();
    return promote_types(a.dtype(), b.dtype());
  }
  return promote_types(a.dtype(), b.dtype());
}

Tensor wrap_scalar(double v, const Tensor& like) {
  DType t = like.dtype();
  bool integral_value = std::nearbyint(v) == v && std::isfinite(v);
  if (!is_floating(t)) {
    if (!integral_value) t = default_float_dtype();
    else if (t == DType::Bool && v != 0 && v != 1) t = DType::Int64;
  }
  return scalar_tensor_on(v, t, like.device());
}

Tensor scalar_tensor_on(double v, DType dtype, Device device) {
  TensorOptions o(dtype);
  o.device = device;
  return full({}, v, o);
}

Tensor zeros_shaped_like(const Shape& shape, const Tensor& like) {
  TensorOptions o(like.dtype());
  o.device = like.device();
  return zeros(shape, o);
}

Tensor to_floating(const Tensor& t) {
  return is_floating(t.dtype()) ? t : t.to(default_float_dtype());
}

Tensor binary(OpId op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), op_name(op), ": undefined tensor argument");
  // The shape rule checks broadcasting too, but without the op's name; check here only when
  // the shapes differ, so the common equal-shape call pays nothing extra.
  if (a.sizes() != b.sizes()) broadcast_pair(a.sizes(), b.sizes(), op_name(op).data());
  DType t = result_type(a, b);
  return dispatch1(op, {cast_to(a, t), cast_to(b, t)});
}

Tensor unary(OpId op, const Tensor& a, const Attrs& attrs) {
  EMBER_CHECK(a.defined(), op_name(op), ": undefined tensor argument");
  return dispatch1(op, {a}, attrs);
}

Shape reduction_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  EMBER_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dim ",
              *std::adjacent_find(out.begin(), out.end()), " appears more than once in ",
              shape_str(dims));
  if (ndim == 0) out.clear();
  return out;
}

Shape reduced_shape(const Shape& sizes, const Shape& dims, bool keepdim) {
  Shape out;
  size_t j = 0;
  for (int64_t d = 0; d < int64_t(sizes.size()); ++d) {
    bool reduced = j < dims.size() && dims[j] == d;
    if (reduced) ++j;
    if (!reduced) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace ember
