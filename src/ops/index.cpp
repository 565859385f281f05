// Index-driven ops: slice_backward, index_select, gather, index_add, scatter_add (shape rules,
// grads, front ends) and the embedding front end built on index_select.
#include "kernels/cpu/index.h"

#include "core/make_tensor.h"
#include "kernels/cpu/pointwise.h"
#include "ops/frontend.h"

namespace ember {

namespace {

MetaList infer_slice_backward(std::span<const Tensor> in, const Attrs& a) {
  return {TensorMeta{a.shape, {}, 0, in[0].dtype()}};
}

// Zeros everywhere, the incoming grad in the sliced region.
void cpu_slice_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  Tensor& o = out[0];
  std::memset(o.impl()->data(), 0, size_t(o.numel()) * dtype_size(o.dtype()));
  Shape sizes = o.sizes(), strides = o.strides();
  int64_t len = a.end - a.start;
  sizes[a.dim] = len <= 0 ? 0 : (len + a.step - 1) / a.step;
  strides[a.dim] *= a.step;
  Tensor region = make_view(o, sizes, strides, a.start * o.strides()[a.dim]);
  if (region.numel() == 0) return;
  Tensor dst[1] = {region};
  cpu::clone(in, std::span<Tensor>(dst, 1), Attrs{});
}

std::vector<Tensor> grad_slice_backward(const GradCtx& c) {
  const Attrs& a = c.attrs;
  return {c.grads[0].slice(a.dim, a.start, a.end, a.step)};
}

MetaList infer_index_select(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  s[a.dim] = in[1].numel();
  return {TensorMeta{s, {}, 0, in[0].dtype()}};
}
MetaList infer_gather(std::span<const Tensor> in, const Attrs&) {
  return {TensorMeta{in[1].sizes(), {}, 0, in[0].dtype()}};
}
MetaList infer_like_first(std::span<const Tensor> in, const Attrs&) {
  return {TensorMeta{in[0].sizes(), {}, 0, in[0].dtype()}};
}

Attrs dim_attrs(int64_t dim) {
  Attrs a;
  a.dim = dim;
  return a;
}

// Grads of the gathers are scatters into zeros, and the other way round.
std::vector<Tensor> grad_index_select(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  Tensor base = zeros_shaped_like(c.input_meta[0].sizes, g);
  return {dispatch1(OpId::index_add, {base, c.inputs[1], g}, dim_attrs(c.attrs.dim)), Tensor()};
}
std::vector<Tensor> grad_gather(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  Tensor base = zeros_shaped_like(c.input_meta[0].sizes, g);
  return {dispatch1(OpId::scatter_add, {base, c.inputs[1], g}, dim_attrs(c.attrs.dim)), Tensor()};
}
std::vector<Tensor> grad_index_add(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  Tensor gsrc;
  if (c.needs_grad[2])
    gsrc = dispatch1(OpId::index_select, {g, c.inputs[1]}, dim_attrs(c.attrs.dim));
  return {c.needs_grad[0] ? g : Tensor(), Tensor(), gsrc};
}
std::vector<Tensor> grad_scatter_add(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  Tensor gsrc;
  if (c.needs_grad[2]) {
    // src positions that the index does not reach get no gradient: pad with zeros up to
    // src's sizes, one dim at a time.
    gsrc = dispatch1(OpId::gather, {g, c.inputs[1]}, dim_attrs(c.attrs.dim));
    const Shape& src_sizes = c.input_meta[2].sizes;
    for (int64_t d = 0; d < int64_t(src_sizes.size()); ++d) {
      if (gsrc.sizes()[d] == src_sizes[d]) continue;
      Attrs a;
      a.shape = gsrc.sizes();
      a.shape[d] = src_sizes[d];
      a.dim = d;
      a.start = 0;
      a.end = gsrc.sizes()[d];
      gsrc = dispatch1(OpId::slice_backward, {gsrc}, a);
    }
  }
  return {c.needs_grad[0] ? g : Tensor(), Tensor(), gsrc};
}

}  // namespace

const OpImpl op_impl_slice_backward{infer_slice_backward, cpu_slice_backward, grad_slice_backward};
const OpImpl op_impl_index_select{infer_index_select, cpu::index_select, grad_index_select, 0b10};
const OpImpl op_impl_gather{infer_gather, cpu::gather, grad_gather, 0b10};
const OpImpl op_impl_index_add{infer_like_first, cpu::index_add, grad_index_add, 0b010};
const OpImpl op_impl_scatter_add{infer_like_first, cpu::scatter_add, grad_scatter_add, 0b010};

// ---- front ends ----

namespace {
void check_index_tensor(const Tensor& index, const char* op) {
  EMBER_CHECK(index.defined(), op, ": the index is an undefined tensor");
  EMBER_CHECK(is_integral(index.dtype()), op, ": the index must be an int64 or int32 tensor, got ",
              dtype_name(index.dtype()), " (shape ", index.shape_str(),
              "); convert it with .to(DType::Int64)");
}

void check_defined(const Tensor& t, const char* op, const char* what) {
  EMBER_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

// The dtype x and src combine in; bool has no addition.
DType scatter_dtype(const Tensor& x, const Tensor& src, const char* op) {
  DType t = promote_types(x.dtype(), src.dtype());
  EMBER_CHECK(t != DType::Bool, op, ": not supported for bool tensors; cast with .to() first");
  return t;
}
}  // namespace

Tensor Tensor::index_select(int64_t d, const Tensor& index) const {
  const char* op = "index_select";
  check_defined(*this, op, "the input");
  check_index_tensor(index, op);
  EMBER_CHECK(index.dim() <= 1, op, ": the index must be 1-D or 0-dim, got shape ",
              index.shape_str());
  if (dim() == 0) {  // a 0-dim input behaves as one element along dim 0
    wrap_dim(d, 0, op);
    return reshape({1}).index_select(0, index).reshape(index.sizes());
  }
  return dispatch1(OpId::index_select, {*this, index.reshape({-1})},
                   dim_attrs(wrap_dim(d, dim(), op)));
}

Tensor Tensor::gather(int64_t d, const Tensor& index) const {
  const char* op = "gather";
  check_defined(*this, op, "the input");
  check_index_tensor(index, op);
  if (dim() == 0 && index.dim() <= 1) {
    wrap_dim(d, 0, op);
    return reshape({1}).gather(0, index.reshape({-1})).reshape(index.sizes());
  }
  EMBER_CHECK(index.dim() == dim(), op, ": the index must have as many dims as the input, got ",
              "index shape ", index.shape_str(), " for input shape ", shape_str());
  int64_t w = wrap_dim(d, dim(), op);
  for (int64_t i = 0; i < dim(); ++i)
    EMBER_CHECK(i == w || index.sizes()[i] <= sizes()[i], op, ": index shape ", index.shape_str(),
                " does not fit input shape ", shape_str(), " at dim ", i,
                " (the index may not be larger than the input except at dim ", w, ")");
  return dispatch1(OpId::gather, {*this, index}, dim_attrs(w));
}

Tensor index_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src) {
  const char* op = "index_add";
  check_defined(x, op, "the input");
  check_defined(src, op, "src");
  check_index_tensor(index, op);
  EMBER_CHECK(index.dim() <= 1, op, ": the index must be 1-D or 0-dim, got shape ",
              index.shape_str());
  DType t = scatter_dtype(x, src, op);
  if (x.dim() == 0) {
    wrap_dim(d, 0, op);
    EMBER_CHECK(src.numel() == index.numel() && src.dim() <= 1, op, ": src of shape ",
                src.shape_str(), " does not match an index of ", index.numel(),
                " elements for a 0-dim input");
    return index_add(x.reshape({1}), 0, index, src.reshape({-1})).reshape({});
  }
  int64_t w = wrap_dim(d, x.dim(), op);
  Shape want = x.sizes();
  want[w] = index.numel();
  EMBER_CHECK(src.sizes() == want, op, ": src has shape ", src.shape_str(), " but adding ",
              index.numel(), " slices along dim ", w, " of an input of shape ", x.shape_str(),
              " needs src of shape ", shape_str(want));
  return dispatch1(OpId::index_add, {cast_to(x, t), index.reshape({-1}), cast_to(src, t)},
                   dim_attrs(w));
}

Tensor scatter_add(const Tensor& x, int64_t d, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  check_defined(x, op, "the input");
  check_defined(src, op, "src");
  check_index_tensor(index, op);
  DType t = scatter_dtype(x, src, op);
  if (x.dim() == 0 && index.dim() <= 1 && src.dim() <= 1) {
    wrap_dim(d, 0, op);
    return scatter_add(x.reshape({1}), 0, index.reshape({-1}), src.reshape({-1})).reshape({});
  }
  EMBER_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), op,
              ": input, index and src must have the same number of dims, got shapes ",
              x.shape_str(), ", ", index.shape_str(), " and ", src.shape_str());
  int64_t w = wrap_dim(d, x.dim(), op);
  for (int64_t i = 0; i < x.dim(); ++i) {
    EMBER_CHECK(index.sizes()[i] <= src.sizes()[i], op, ": index shape ", index.shape_str(),
                " is larger than src shape ", src.shape_str(), " at dim ", i);
    EMBER_CHECK(i == w || index.sizes()[i] <= x.sizes()[i], op, ": index shape ", index.shape_str(),
                " is larger than input shape ", x.shape_str(), " at dim ", i, " (only dim ", w,
                " may differ)");
  }
  return dispatch1(OpId::scatter_add, {cast_to(x, t), index, cast_to(src, t)}, dim_attrs(w));
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  const char* op = "embedding";
  check_defined(weight, op, "the weight");
  check_index_tensor(indices, op);
  EMBER_CHECK(weight.dim() == 2, op, ": the weight must be 2-D [num_embeddings, dim], got shape ",
              weight.shape_str());
  Shape out = indices.sizes();
  out.push_back(weight.sizes()[1]);
  try {
    return weight.index_select(0, indices.reshape({-1})).reshape(out);
  } catch (const Error& e) {
    throw Error(std::string("embedding: ") + e.what());
  }
}

}  // namespace ember
