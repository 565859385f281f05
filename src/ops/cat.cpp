// Concatenation: the cat op (shape rule, grad, front end) and stack built on it.
#include "kernels/cpu/index.h"
#include "ops/frontend.h"

namespace ember {

namespace {
MetaList infer_cat(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].sizes();
  s[a.dim] = 0;
  for (const Tensor& t : in)
    EMBER_CHECK(size_add(s[a.dim], t.sizes()[a.dim], &s[a.dim]), "cat: the sizes of dim ", a.dim,
                " add up past int64 (at most ", kMaxSize, ") over ", in.size(),
                " tensors of shapes like ", t.shape_str(), "; concatenate fewer or smaller ones");
  return {TensorMeta{s, {}, 0, in[0].dtype()}};
}

// Each input's grad is its slab of the output's grad.
std::vector<Tensor> grad_cat(const GradCtx& c) {
  const int64_t d = c.attrs.dim;
  std::vector<Tensor> out(c.input_meta.size());
  int64_t start = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t len = c.input_meta[i].sizes[d];
    // needs_grad holds at most 64 entries; later inputs are asked for their grad regardless.
    bool needed = i >= c.needs_grad.size() || c.needs_grad[i];
    if (needed) out[i] = c.grads[0].slice(d, start, start + len);
    start += len;
  }
  return out;
}

// PyTorch's legacy rule: a 1-D tensor of size 0 joins any cat and contributes nothing.
bool is_legacy_empty(const Tensor& t) {
  return t.dim() == 1 && t.sizes()[0] == 0;
}
}  // namespace

const OpImpl op_impl_cat{infer_cat, cpu::cat, grad_cat};

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "cat: expects a non-empty list of tensors");
  DType dtype = DType::Bool;
  const Tensor* first = nullptr;
  size_t first_pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), "cat: tensor ", i, " is undefined");
    EMBER_CHECK(t.dim() > 0, "cat: tensor ", i,
                " is 0-dim and cannot be concatenated; unsqueeze it or use stack");
    dtype = i == 0 ? t.dtype() : promote_types(dtype, t.dtype());
    if (!first && !is_legacy_empty(t)) {
      first = &t;
      first_pos = i;
    }
  }
  if (!first) return empty({0}, dtype);
  const int64_t d = wrap_dim(dim, first->dim(), "cat");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (is_legacy_empty(t)) continue;
    EMBER_CHECK(t.dim() == first->dim(), "cat: tensors must have the same number of dims, but ",
                "tensor ", first_pos, " has shape ", first->shape_str(), " and tensor ", i,
                " has shape ", t.shape_str());
    for (int64_t j = 0; j < t.dim(); ++j)
      EMBER_CHECK(j == d || t.sizes()[j] == first->sizes()[j], "cat: sizes must match except ",
                  "in dim ", d, ", but tensor ", first_pos, " has shape ", first->shape_str(),
                  " and tensor ", i, " has shape ", t.shape_str(), " (dim ", j, ")");
    parts.push_back(cast_to(t, dtype));
  }
  Attrs a;
  a.dim = d;
  return dispatch1(OpId::cat, std::move(parts), a);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].defined(), "stack: tensor ", i, " is undefined");
    EMBER_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack: all tensors must have the ",
                "same shape, but tensor 0 has shape ", tensors[0].shape_str(), " and tensor ", i,
                " has shape ", tensors[i].shape_str());
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

}  // namespace ember
