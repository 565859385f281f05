// Reductions: shape rules, grads and front ends of sum, mean, amax/amin, argmax/argmin, var/std
// and logsumexp, and the tie-mask op that the amax/amin grads use.
#include "kernels/cpu/reduce.h"
#include "ops/frontend.h"
#include "ops/pointwise_rules.h"

namespace ember {

MetaList infer_reduce(std::span<const Tensor> in, const Attrs& a) {
  return {TensorMeta{reduced_shape(in[0].sizes(), a.dims, a.keepdim), {}, 0, in[0].dtype()}};
}

namespace {

MetaList infer_arg_reduce(std::span<const Tensor> in, const Attrs& a) {
  return {TensorMeta{reduced_shape(in[0].sizes(), a.dims, a.keepdim), {}, 0, DType::Int64}};
}

// Number of input elements behind each output element.
int64_t reduced_count(const Shape& sizes, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

// A reduction's output (or its grad) with the reduced dims kept as size 1, so it broadcasts
// against the input.
Tensor keep_reduced(const Tensor& t, const GradCtx& c) {
  if (c.attrs.keepdim) return t;
  return t.reshape(reduced_shape(c.input_meta[0].sizes, c.attrs.dims, true));
}

// Grad of a reduction broadcast back over the reduced dims.
Tensor expand_reduced_grad(const Tensor& g, const GradCtx& c) {
  return keep_reduced(g, c).expand(c.input_meta[0].sizes);
}

std::vector<Tensor> grad_sum(const GradCtx& c) {
  return {expand_reduced_grad(c.grads[0], c)};
}

std::vector<Tensor> grad_mean(const GradCtx& c) {
  int64_t n = reduced_count(c.input_meta[0].sizes, c.attrs.dims);
  return {expand_reduced_grad(c.grads[0], c) / double(n)};
}

// The grad goes to the elements equal to the extreme, split evenly among ties.
std::vector<Tensor> grad_extreme(const GradCtx& c) {
  const Tensor& x = c.inputs[0];
  Tensor mask = dispatch1(OpId::equal_mask, {x, keep_reduced(c.outputs[0], c)});
  Tensor ties = mask.sum(c.attrs.dims, true);
  return {mask * (keep_reduced(c.grads[0], c) / ties)};
}

double var_divisor(const GradCtx& c) {
  double n = double(reduced_count(c.input_meta[0].sizes, c.attrs.dims));
  return std::max(0.0, n - c.attrs.value);
}

// d var / dx = 2 (x - mean) / (N - correction)
std::vector<Tensor> grad_var(const GradCtx& c) {
  const Tensor& x = c.inputs[0];
  Tensor centered = x - x.mean(c.attrs.dims, true);
  return {keep_reduced(c.grads[0], c) * centered * (2.0 / var_divisor(c))};
}

// d std / dx = (x - mean) / ((N - correction) std)
std::vector<Tensor> grad_std(const GradCtx& c) {
  const Tensor& x = c.inputs[0];
  Tensor centered = x - x.mean(c.attrs.dims, true);
  Tensor scale = keep_reduced(c.grads[0], c) / keep_reduced(c.outputs[0], c);
  return {scale * centered * (1.0 / var_divisor(c))};
}

// d logsumexp / dx = exp(x - logsumexp)
std::vector<Tensor> grad_logsumexp(const GradCtx& c) {
  const Tensor& x = c.inputs[0];
  return {keep_reduced(c.grads[0], c) * (x - keep_reduced(c.outputs[0], c)).exp()};
}

}  // namespace

const OpImpl op_impl_sum{infer_reduce, cpu::sum, grad_sum};
const OpImpl op_impl_mean{infer_reduce, cpu::mean, grad_mean};
const OpImpl op_impl_amax{infer_reduce, cpu::amax, grad_extreme, 0b1, 0b1};
const OpImpl op_impl_amin{infer_reduce, cpu::amin, grad_extreme, 0b1, 0b1};
const OpImpl op_impl_argmax{infer_arg_reduce, cpu::argmax, nullptr};
const OpImpl op_impl_argmin{infer_arg_reduce, cpu::argmin, nullptr};
const OpImpl op_impl_var{infer_reduce, cpu::var, grad_var, 0b1, 0};
const OpImpl op_impl_std_dev{infer_reduce, cpu::std_dev, grad_std, 0b1, 0b1};
const OpImpl op_impl_logsumexp{infer_reduce, cpu::logsumexp, grad_logsumexp, 0b1, 0b1};
const OpImpl op_impl_equal_mask{infer_broadcast, cpu::equal_mask, nullptr};

// ---- front ends ----

namespace {

Attrs reduce_attrs(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  EMBER_CHECK(x.defined(), op, ": undefined tensor argument");
  Attrs a;
  a.dims = reduction_dims(dims, x.dim(), op);
  a.keepdim = keepdim;
  return a;
}

// Reductions without an identity (max, min and their positions) need elements to reduce.
void check_has_elements(const Tensor& x, const Shape& dims, const char* op) {
  int64_t out_numel = shape_numel(reduced_shape(x.sizes(), dims, false));
  EMBER_CHECK(reduced_count(x.sizes(), dims) > 0 || out_numel == 0, op,
              ": cannot reduce over dims ", shape_str(dims), " of a tensor of shape ",
              x.shape_str(), ": they hold no elements and ", op,
              " has no identity value; reduce over non-empty dims");
}

Tensor extreme(OpId op, const Tensor& x, const Shape& dims, bool keepdim) {
  const char* name = op_name(op).data();
  Attrs a = reduce_attrs(x, dims, keepdim, name);
  check_has_elements(x, a.dims, name);
  // bool compares as 0/1: reduce it as int64 and convert back.
  if (x.dtype() == DType::Bool) return dispatch1(op, {x.to(DType::Int64)}, a).to(DType::Bool);
  return dispatch1(op, {x}, a);
}

Tensor arg_extreme(OpId op, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const char* name = op_name(op).data();
  EMBER_CHECK(x.defined(), name, ": undefined tensor argument");
  Tensor in = x.dtype() == DType::Bool ? x.to(DType::Int64) : x;
  Attrs a;
  a.dims = {0};
  if (!dim) {
    // Over all elements: positions in the flattened tensor.
    EMBER_CHECK(x.numel() > 0, name, ": the tensor (shape ", x.shape_str(),
                ") has no elements; pass a dim to reduce over a non-empty one");
    Tensor r = dispatch1(op, {in.reshape({-1})}, a);
    return keepdim ? r.reshape(Shape(size_t(x.dim()), 1)) : r;
  }
  int64_t d = wrap_dim(*dim, x.dim(), name);
  if (x.dim() == 0) return dispatch1(op, {in.reshape({1})}, a).reshape({});
  a.dims = {d};
  a.keepdim = keepdim;
  check_has_elements(x, a.dims, name);
  return dispatch1(op, {in}, a);
}

Tensor variance(OpId op, const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  const char* name = op == OpId::var ? "var" : "std";
  Attrs a = reduce_attrs(x, dims, keepdim, name);
  a.value = double(correction);
  return dispatch1(op, {to_floating(x)}, a);
}

}  // namespace

Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  Attrs a = reduce_attrs(*this, dims, keepdim, "sum");
  // Integers and bools sum in int64, as in PyTorch.
  Tensor x = is_floating(dtype()) ? *this : to(DType::Int64);
  return dispatch1(OpId::sum, {x}, a);
}

Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  Attrs a = reduce_attrs(*this, dims, keepdim, "mean");
  return dispatch1(OpId::mean, {to_floating(*this)}, a);
}

Tensor Tensor::amax(const Shape& dims, bool keepdim) const {
  return extreme(OpId::amax, *this, dims, keepdim);
}
Tensor Tensor::amin(const Shape& dims, bool keepdim) const {
  return extreme(OpId::amin, *this, dims, keepdim);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return arg_extreme(OpId::argmax, *this, dim, keepdim);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return arg_extreme(OpId::argmin, *this, dim, keepdim);
}
Tensor Tensor::var(const Shape& dims, int64_t correction, bool keepdim) const {
  return variance(OpId::var, *this, dims, correction, keepdim);
}
Tensor Tensor::std(const Shape& dims, int64_t correction, bool keepdim) const {
  return variance(OpId::std_dev, *this, dims, correction, keepdim);
}

Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const {
  Attrs a = reduce_attrs(*this, dims, keepdim, "logsumexp");
  return dispatch1(OpId::logsumexp, {to_floating(*this)}, a);
}

}  // namespace ember
